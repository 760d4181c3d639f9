"""How an operation's upstream credentials are sent: its `AuthConfig` compiled once per published operation into a
`Credential`, which the adapter asks on each request for the headers and query parameters to add (`Sent`).

    bearer   Authorization: Bearer <secret>
    header   <name>: <secret>
    query    ?<name>=<secret>                    (encoded by the client, with the rest of the query)
    cookie   Cookie: <name>=<secret>
    basic    Authorization: Basic base64(<secret>)   the secret holds `user:password`
    oauth2   Authorization: Bearer <access token>    OAuth 2 client credentials grant (RFC 6749, 4.4)

Secrets are read from their references on the first call (on the serving process: a publish or a lint never
needs them) and kept for the published version. A reference that does not resolve here is the operator's to fix:
one warning line naming it (no traceback, never a value) and the call fails as `configuration_error`.

**oauth2.** The access token comes from the authorization server's `token_url` (`grant_type=client_credentials`,
`scope` when the operation names scopes), the client authenticated with HTTP Basic (`client_id` and the secret
form-urlencoded first, RFC 6749, 2.3.1), through the operation's `UpstreamClient` (so the egress policy applies),
within the operation's timeout and `MAX_TOKEN_RESPONSE_BYTES`. A `TokenCache` (one per process: `AgentSource`
passes its own to every catalog it builds) keeps each token until `TOKEN_EXPIRY_MARGIN` seconds before it
expires (`DEFAULT_TOKEN_LIFETIME` when the answer says nothing), shared by every operation with the same token
URL, client, secret reference, scopes and workspace; a missing or expired token is fetched once for all the calls
that need it at that moment (single flight). An upstream 401 may mean a token revoked or rotated early: the
adapter asks `renew` (once, single flight again) and retries an idempotent call once; a call that is not
idempotent fails as `upstream_unauthorized` and the token is dropped, so the next call fetches a fresh one.
A token endpoint that fails, or answers without a usable `access_token`, fails the call as
`upstream_token_unavailable` (not recoverable by the model); the log line names the token URL's origin and the
cause, never the secret.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Final, NamedTuple
from urllib.parse import quote_plus, urlencode

from cachetools import LRUCache

from crank import _json
from crank.exceptions import (
    ConfigurationError,
    ExternalServiceError,
    ToolConfigurationError,
    ToolError,
    UpstreamBusyError,
    UpstreamConnectionError,
    UpstreamRefusedError,
    UpstreamRequestTooLargeError,
    UpstreamTimeoutError,
    UpstreamTooLargeError,
    UserCredentialsError,
)
from crank.gateway.client import UpstreamClient, parse_upstream_url
from crank.gateway.secrets import resolve_secret
from crank.gateway.tokens import same_issuer
from crank.registry.runtime import DEFAULT_TIMEOUT, AuthConfig
from crank.wire.auth import Principal
from crank.wire.http import is_token
from crank.wire.notices import ThrottledLog
from crank.wire.tenant_cache import TenantCaches

__all__ = [
    "DEFAULT_TOKEN_LIFETIME",
    "MAX_TOKEN_RESPONSE_BYTES",
    "NO_CREDENTIALS",
    "TOKEN_EXPIRY_MARGIN",
    "TOKEN_UNAVAILABLE_ACTION",
    "Credential",
    "ExchangeKey",
    "Sent",
    "TokenCache",
    "TokenKey",
    "compile_credential",
]

logger = logging.getLogger("crank.gateway")
_notices = ThrottledLog(logger)

DEFAULT_TOKEN_LIFETIME: Final = 300.0
"""Seconds a client-credentials token is kept when its answer has no `expires_in`."""
TOKEN_EXPIRY_MARGIN: Final = 30.0
"""Seconds before its `expires_in` that a token stops being used: a call never sends one about to expire."""
MAX_TOKEN_RESPONSE_BYTES: Final = 64 * 1024
"""The largest token endpoint answer read (a token response is a few hundred bytes; a JWT a few KiB)."""
FAILURE_MEMORY: Final = 5.0
"""Seconds a token request that failed is remembered: the calls meanwhile fail at once with the same error, and a
failing token endpoint is asked once per interval, not once per call."""
MAX_REMEMBERED_FAILURES: Final = 10_000
"""Refusals remembered (`FAILURE_MEMORY`), by the request they refused; the oldest go first."""
TOKEN_CACHE_BYTES: Final = 2 * 1024 * 1024
"""What one workspace's upstream tokens may take (the token and about 200 bytes each: some 2,000 users' exchanged
tokens of 1 KB); past it its least recently used go."""
TOKEN_CACHE_TOTAL_BYTES: Final = 32 * 1024 * 1024
"""What every workspace's upstream tokens may take together; past it the largest workspace's go first."""
_TOKEN_OVERHEAD = 200
TOKEN_EXCHANGE_GRANT: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"
_USER_REFUSALS: Final = frozenset({"access_denied", "consent_required", "interaction_required"})
"""A token endpoint's refusals of an exchange that say the user may not (no access, no consent); `invalid_grant`
says the user's token is no longer good (`USER_SIGN_IN_ACTION`). Any other is Crank's own configuration's."""
USER_SIGN_IN_ACTION: Final = (
    "Do not retry with other arguments: the user's sign-in is no longer accepted by the identity provider (it "
    "expired or was revoked). Tell the user to sign in again, then call the tool again."
)
USER_REFUSED_ACTION: Final = (
    "Do not retry with other arguments: tell the user that their account has no access to this API, or that they "
    "must consent to it at the identity provider, and ask the operator if it should."
)
_MAX_TOKEN_CHARS = 16 * 1024

MISSING_SECRET_MESSAGE: Final = (
    "The tool cannot call its upstream: a credential it needs is not configured on this server."
)
TOKEN_UNAVAILABLE_ACTION: Final = (
    "Do not retry with other arguments: this server could not obtain its credentials for the API from the API's "
    "authorization server. Tell the user that the API's credentials need attention (the operator must check the "
    "tool's OAuth client and token endpoint)."
)

# Header names the client refuses or that describe the request itself: never a credential's.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "content-type"})
_VISIBLE = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: a token68 or a bearer token
_COOKIE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")  # RFC 6265 cookie-octet
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")  # an RFC 6749 5.2 `error`: a code, safe to log


class Sent:
    """What a request carries for its credentials: headers (they replace the mapping's of the same name, whatever
    the case), query parameters (they replace the mapping's of the same name) and, for oauth2, the access token
    they carry (which a 401 renews or drops). Made once per secret or token, never per call."""

    __slots__ = ("header_names", "headers", "query", "query_names", "token")

    def __init__(
        self, headers: Mapping[str, str], query: tuple[tuple[str, str], ...] = (), token: str | None = None
    ) -> None:
        self.headers = headers
        self.query = query
        self.token = token
        self.header_names = frozenset(name.lower() for name in headers)
        self.query_names = frozenset(name for name, _ in query)

    @classmethod
    def bearer(cls, token: str) -> Sent:
        """`Authorization: Bearer <token>`, made without a pass over its names: a user's exchanged token is one per
        user, so one of these is made per call."""
        sent = cls.__new__(cls)
        sent.headers, sent.query, sent.token = {"Authorization": f"Bearer {token}"}, (), token
        sent.header_names, sent.query_names = _AUTHORIZATION, _NO_NAMES
        return sent


_AUTHORIZATION: Final = frozenset({"authorization"})
_NO_NAMES: Final[frozenset[str]] = frozenset()


NO_CREDENTIALS: Final = Sent({})


class Credential:
    """No credentials: the base of every kind. The adapter calls `ready()` on each request (no coroutine: the
    common case costs a method call), and awaits `obtain()` only when it returns None (an oauth2 token to fetch)."""

    scheme: str = "none"
    """What the log line of an upstream 401 or 403 names: the API description's scheme name, else the type."""
    renewable: bool = False
    """Whether a 401 may be a token revoked or rotated early, which `renew` replaces (oauth2)."""

    def ready(self, caller: Principal | None = None) -> Sent | None:
        """What to send for `caller` (who made the call: a kind that acts as the user needs its token), if known
        without waiting; None: await `obtain(caller)`."""
        return NO_CREDENTIALS

    async def obtain(self, caller: Principal | None = None) -> Sent:
        sent = self.ready(caller)
        assert sent is not None  # pragma: no cover - kinds that may wait override this
        return sent

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        """Credentials in place of `refused`, which the upstream answered with 401."""
        return refused

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        """The upstream answered `refused` with 401 and the call is not retried: the next call gets fresh ones."""


class _Secret:
    """A secret reference read on first use and kept; a reference that does not resolve fails each call as
    `configuration_error`, with a warning line naming it (never its value)."""

    def __init__(self, reference: str, check: Callable[[str], str | None], *, workspace: str, where: str) -> None:
        self.reference = reference
        self._check = check  # why a value cannot be sent this way (its kind's rules), or None
        self._workspace = workspace
        self._where = where
        self._value: str | None = None

    def value(self) -> str:
        if self._value is None:
            try:
                value = resolve_secret(self.reference, workspace=self._workspace, where=self._where)
                problem = _line_break(value) or self._check(value)
                if problem is not None:
                    raise ConfigurationError(f"{self._where}: the secret {self.reference!r} {problem}")
            except ConfigurationError as exc:  # the operator's to fix: a warning without a traceback
                logger.warning("%s", exc, extra={"secret_reference": self.reference})
                raise ToolConfigurationError(MISSING_SECRET_MESSAGE) from None
            self._value = value
        return self._value


def _line_break(value: str) -> str | None:
    return "contains a line break or a control character" if re.search(r"[\x00-\x1f\x7f]", value) else None


def _no_check(value: str) -> str | None:
    return None


class _Static(Credential):
    """bearer, header, query, cookie, basic: the same parts on every request, composed on the first."""

    def __init__(self, auth: AuthConfig, *, workspace: str, where: str) -> None:
        self.scheme = auth.scheme or auth.type
        self._type = auth.type
        self._name = auth.name
        check = {"cookie": _cookie_problem, "basic": _basic_problem}.get(auth.type, _no_check)
        self._secret = _Secret(auth.secret, check, workspace=workspace, where=where)
        self._sent: Sent | None = None

    def ready(self, caller: Principal | None = None) -> Sent:
        if self._sent is None:
            secret = self._secret.value()
            if self._type == "bearer":
                self._sent = Sent({"Authorization": f"Bearer {secret}"})
            elif self._type == "header":
                self._sent = Sent({self._name: secret})
            elif self._type == "query":
                self._sent = Sent({}, ((self._name, secret),))  # percent-encoded by the client
            elif self._type == "cookie":
                self._sent = Sent({"Cookie": f"{self._name}={secret}"})
            else:  # basic
                self._sent = Sent({"Authorization": f"Basic {base64.b64encode(secret.encode()).decode()}"})
        return self._sent


def _cookie_problem(value: str) -> str | None:
    return None if _COOKIE_VALUE.fullmatch(value) else 'cannot be a cookie value (RFC 6265: no ; , " \\ or spaces)'


def _basic_problem(value: str) -> str | None:
    return None if ":" in value else "is not 'user:password', which HTTP Basic authentication needs"


class TokenKey(NamedTuple):
    """What makes two operations' client-credentials tokens the same token."""

    token_url: str
    client_id: str
    secret: str  # the reference, never the value
    scopes: tuple[str, ...]
    workspace: str


class _TokenFailure(Exception):
    """A token request that gave no usable token: why (`cause`, for the log) and what the endpoint said (`detail`:
    an RFC 6749 error code at most). Each waiting call turns it into its own structured error."""

    def __init__(self, cause: str, detail: str | None = None, *, refused: bool = False) -> None:
        super().__init__(cause)
        self.cause = cause
        self.detail = detail
        self.refused = refused  # the egress policy refuses the token URL: the operator's, like a missing secret

    @property
    def endpoints(self) -> bool:
        """Whether the failure is the token endpoint's (down, slow, garbled, refused by the egress policy), which
        every request to it would meet, not this request's own refusal (4xx: this client, this user)."""
        return not self.cause.startswith("http_4")


_Remembered = tuple[str, str | None, bool, float]
"""A failure as remembered (`FAILURE_MEMORY`): its cause, detail and egress refusal, and until when; never the
exception itself, whose frames hold the request (a client secret, a user's token)."""


def _remember(memory: LRUCache[Hashable, _Remembered], key: Hashable, failure: _TokenFailure, until: float) -> None:
    memory[key] = (failure.cause, failure.detail, failure.refused, until)


def _remembered(memory: LRUCache[Hashable, _Remembered], key: Hashable, now: float) -> _TokenFailure | None:
    found = memory.get(key)
    if found is None:
        return None
    if now >= found[3]:
        memory.pop(key, None)
        return None
    return _TokenFailure(found[0], found[1], refused=found[2])


def _token_bytes(key: Hashable, value: tuple[str, float]) -> int:
    return len(value[0]) + _TOKEN_OVERHEAD


class TokenCache:
    """OAuth 2 access tokens of one process, per workspace (`crank.wire.tenant_cache`: no workspace's tokens push
    out another's) and by `TokenKey` (client credentials) or `ExchangeKey` (a user's exchanged token): each kept
    until shortly before it expires, and fetched once for every call that needs it at the same time (single
    flight). A failure is remembered `FAILURE_MEMORY` seconds: the endpoint's (down, slow, garbled) for every
    request of the workspace to its URL, a refusal (4xx) for its key alone."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock`: monotonic seconds (a test's own, to expire tokens without waiting)."""
        self.clock = clock
        # (token, when it stops being used) per workspace and key
        self._tokens: TenantCaches[tuple[str, float]] = TenantCaches(TOKEN_CACHE_BYTES, TOKEN_CACHE_TOTAL_BYTES,
                                                                      _token_bytes)  # fmt: skip
        self._flights: dict[Hashable, asyncio.Task[str]] = {}  # key -> the token request under way
        self._refused: LRUCache[Hashable, _Remembered] = LRUCache(maxsize=MAX_REMEMBERED_FAILURES)  # by key
        self._down: LRUCache[Hashable, _Remembered] = LRUCache(maxsize=MAX_REMEMBERED_FAILURES)  # by workspace, URL

    def cached(self, tenant: str, key: Hashable) -> str | None:
        """The token kept for `key` in `tenant`'s share, unless it expired."""
        held = self._tokens.get(tenant, key)
        if held is None:
            return None
        if self.clock() >= held[1]:
            self._tokens.pop(tenant, key)
            return None
        return held[0]

    async def get(self, tenant: str, key: Hashable, url: str, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> str:
        """The kept token, else the one `fetch` gets from the endpoint at `url` ((token, seconds it may be used)),
        fetched once for all."""
        token = self.cached(tenant, key)
        if token is not None:
            return token
        return await self._join(tenant, key, url, fetch)

    async def renew(
        self, tenant: str, key: Hashable, url: str, refused: str, fetch: Callable[[], Awaitable[tuple[str, float]]]
    ) -> str:
        """A token in place of `refused`: the one another call already renewed or is renewing, else a new one."""
        if key not in self._flights:
            token = self.cached(tenant, key)
            if token is not None and token != refused:
                return token
            self._tokens.pop(tenant, key)
        return await self._join(tenant, key, url, fetch)

    def drop(self, tenant: str, key: Hashable, refused: str) -> None:
        """Forget `refused`, unless another token replaced it already."""
        held = self._tokens.get(tenant, key)
        if held is not None and held[0] == refused:
            self._tokens.pop(tenant, key)

    async def _join(
        self, tenant: str, key: Hashable, url: str, fetch: Callable[[], Awaitable[tuple[str, float]]]
    ) -> str:
        now = self.clock()
        # What just failed is not asked again for FAILURE_MEMORY seconds (a fresh failure: no shared traceback).
        failed = _remembered(self._down, (tenant, url), now) or _remembered(self._refused, key, now)
        if failed is not None:
            raise failed
        loop = asyncio.get_running_loop()
        flight = self._flights.get(key)
        if flight is None or flight.get_loop() is not loop:
            flight = loop.create_task(self._fly(tenant, key, url, fetch))
            self._flights[key] = flight
            flight.add_done_callback(functools.partial(self._landed, key))
        # Shielded: a caller that gives up (its deadline, a cancelled request) does not end the others' request.
        return await asyncio.shield(flight)

    async def _fly(
        self, tenant: str, key: Hashable, url: str, fetch: Callable[[], Awaitable[tuple[str, float]]]
    ) -> str:
        started = self.clock()  # the lifetime counts from the request: the token is never kept past its expiry
        try:
            token, lifetime = await fetch()
        except _TokenFailure as failure:
            until = self.clock() + FAILURE_MEMORY
            if failure.endpoints:  # per workspace: one tenant's short timeout or strict egress never fails another's
                _remember(self._down, (tenant, url), failure, until)
            else:
                _remember(self._refused, key, failure, until)
            raise
        if lifetime > 0:
            self._tokens.put(tenant, key, (token, started + lifetime))
        return token

    def _landed(self, key: Hashable, flight: asyncio.Task[str]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved here too: no warning when every caller had given up waiting


class _TokenEndpoint:
    """One authorization server's token endpoint as an operation's credential asks it: Crank's own client
    authenticated with HTTP Basic (RFC 6749 2.3.1), through the operation's `UpstreamClient` (the egress policy
    applies), within the operation's timeout and `MAX_TOKEN_RESPONSE_BYTES`. `request` gives the access token and
    how long it may be used, or a `_TokenFailure` with the operator's warning line."""

    def __init__(self, auth: AuthConfig, client: UpstreamClient, *, workspace: str, where: str, timeout: float) -> None:
        assert auth.client_id is not None and auth.token_url is not None  # AuthConfig requires both for these kinds
        try:
            parts = parse_upstream_url(auth.token_url)
        except ValueError as exc:
            raise ConfigurationError(f"{where}: token_url: {exc}") from None
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.url = auth.token_url
        self.client_id = auth.client_id
        self.workspace = workspace
        self.secret = _Secret(auth.secret, _no_check, workspace=workspace, where=where)
        self._client = client
        self._timeout = timeout
        self._where = where
        self._refusal = client.egress.target_refusal(auth.token_url)  # a stricter replica: checked on each call

    async def request(self, form: Mapping[str, str], *, issued: str | None = None) -> tuple[str, float]:
        """One token request of `form`: (the access token, seconds it may be used); a `_TokenFailure` saying why
        not. `issued`: the `issued_token_type` the answer must name (a token exchange's)."""
        if self._refusal is not None:
            raise self._failed("egress", refused=True)
        secret = self.secret.value()
        pair = f"{quote_plus(self.client_id)}:{quote_plus(secret)}"  # RFC 6749 2.3.1: form-urlencoded first
        headers = {
            "Authorization": f"Basic {base64.b64encode(pair.encode()).decode()}",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        try:
            answer = await self._client.request(
                "POST", self.url, params=None, headers=headers, body=urlencode(form).encode(), timeout=self._timeout,
                tenant=self.workspace,
            )  # fmt: skip
        except UpstreamRefusedError:
            raise self._failed("egress", refused=True) from None
        except UpstreamBusyError:
            raise self._failed("busy") from None
        except UpstreamTimeoutError:
            raise self._failed("timeout") from None
        except UpstreamConnectionError as exc:
            raise self._failed(exc.cause or "unreachable") from None
        except (UpstreamTooLargeError, UpstreamRequestTooLargeError):
            raise self._failed("too_large") from None
        if len(answer.body) > MAX_TOKEN_RESPONSE_BYTES:
            raise self._failed("too_large")
        try:
            payload = _json.loads(answer.body)
        except ValueError:
            payload = None
        if answer.status != 200:
            error = payload.get("error") if isinstance(payload, dict) else None
            code = error if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else None
            raise self._failed(f"http_{answer.status}", code)
        if not isinstance(payload, dict):
            raise self._failed("not_json")
        token = payload.get("access_token")
        if not isinstance(token, str) or not token:
            raise self._failed("no_access_token")
        if len(token) > _MAX_TOKEN_CHARS or not _VISIBLE.fullmatch(token):
            raise self._failed("bad_access_token")
        token_type = payload.get("token_type")
        if isinstance(token_type, str) and token_type.lower() != "bearer":  # `N_A` (RFC 8693 2.2.1) is no bearer
            raise self._failed("token_type", token_type if _ERROR_CODE.fullmatch(token_type) else None)
        if issued is not None and payload.get("issued_token_type") != issued:
            raise self._failed("issued_token_type")  # an ID token, say: never sent as an access token
        return token, _lifetime(payload.get("expires_in"))

    def _failed(self, cause: str, detail: str | None = None, *, refused: bool = False) -> _TokenFailure:
        """The failure, with the operator's warning line (at most one per interval and token URL)."""
        if refused:
            logger.warning("%s: token_url %s is refused by this server's egress policy", self._where, self.origin,
                           extra={"origin": self.origin})  # fmt: skip
        else:
            _notices.warning(
                f"upstream_token:{self.origin}", "%s: no OAuth access token from %s (%s%s)", self._where,
                self.origin, cause, f", {detail}" if detail else "", origin=self.origin, cause=cause,
            )  # fmt: skip
        return _TokenFailure(cause, detail, refused=refused)

    def unavailable(self, failure: _TokenFailure, scheme: str, *, user: bool = False) -> ToolError:
        """What a call is told of a token request that failed (never a secret, nor the token endpoint's address).
        `user`: the request was a token exchange of the signed-in user's token, whose own refusals are the user's
        to know of (`_USER_REFUSALS`, and `invalid_grant`: sign in again)."""
        if failure.refused:
            return ToolConfigurationError(
                "The tool cannot obtain its upstream credentials: this server's egress policy does not allow the "
                "address of the API's authorization server."
            )
        error: ToolError
        if user and failure.detail in _USER_REFUSALS:
            error = UserCredentialsError(
                "The API's authorization server refused to give this server a token for the signed-in user: the "
                "user has no access to the API, or has not consented to it. Nothing was sent.",
                error_code="upstream_token_refused", suggested_action=USER_REFUSED_ACTION,
            )  # fmt: skip
        elif user and failure.detail == "invalid_grant":
            error = _sign_in_again()
        else:
            error = ExternalServiceError(
                "The API's credentials could not be obtained: its authorization server gave this server no access "
                "token.", error_code="upstream_token_unavailable", recoverable=False,
                suggested_action=TOKEN_UNAVAILABLE_ACTION,
            )  # fmt: skip
        error.may_have_taken_effect = False  # nothing went to the API
        error.log_context = {"cause": failure.cause, "origin": self.origin, "scheme": scheme}
        if failure.detail:
            error.log_context["detail"] = failure.detail
        return error


def _sign_in_again() -> UserCredentialsError:
    return UserCredentialsError(
        "The signed-in user's token is no longer accepted for the API (it expired or was revoked). Nothing was "
        "sent.", error_code="user_sign_in_expired", suggested_action=USER_SIGN_IN_ACTION,
    )  # fmt: skip


class _ClientCredentials(Credential):
    """oauth2: a bearer access token of the client credentials grant, from the shared `TokenCache`."""

    renewable = True

    def __init__(
        self, auth: AuthConfig, client: UpstreamClient, tokens: TokenCache, *, workspace: str, where: str,
        timeout: float,
    ) -> None:  # fmt: skip
        self.scheme = auth.scheme or auth.type
        self._endpoint = _TokenEndpoint(auth, client, workspace=workspace, where=where, timeout=timeout)
        self._tokens = tokens
        scopes = tuple(sorted(set(auth.scopes)))
        self._key = TokenKey(self._endpoint.url, self._endpoint.client_id, auth.secret, scopes, workspace)
        self._form = {"grant_type": "client_credentials"} | ({"scope": " ".join(scopes)} if scopes else {})
        self._sent: Sent | None = None  # the last token's parts, built once per token

    def ready(self, caller: Principal | None = None) -> Sent | None:
        token = self._tokens.cached(self._endpoint.workspace, self._key)
        return None if token is None else self._parts(token)

    async def obtain(self, caller: Principal | None = None) -> Sent:
        endpoint = self._endpoint
        endpoint.secret.value()  # a missing secret fails before any request, even when another's token is kept
        try:
            return self._parts(await self._tokens.get(endpoint.workspace, self._key, endpoint.url, self._fetch))
        except _TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        endpoint = self._endpoint
        endpoint.secret.value()  # its token may have come from another operation's request
        try:
            token = await self._tokens.renew(endpoint.workspace, self._key, endpoint.url, refused.token, self._fetch)
        except _TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme) from None
        return self._parts(token)

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        if refused.token is not None:
            self._tokens.drop(self._endpoint.workspace, self._key, refused.token)

    def _parts(self, token: str) -> Sent:
        sent = self._sent
        if sent is None or sent.token != token:
            sent = self._sent = Sent({"Authorization": f"Bearer {token}"}, token=token)
        return sent

    async def _fetch(self) -> tuple[str, float]:
        return await self._endpoint.request(self._form)


ExchangeTarget = tuple[str, str, str, str, str | None, str | None, tuple[str, ...]]
"""An operation's subject issuer, token endpoint, client, secret reference (never the value), audience, resource and
scopes."""
ExchangeKey = tuple[str, str | None, frozenset[str] | None, ExchangeTarget]
"""What makes two calls' exchanged tokens the same token: the same user (a principal's id names its workspace,
issuer and subject), through the same MCP client with the same scopes (the provider's consent is per client and
scope), and the same `ExchangeTarget` (made once per operation: a call builds only the tuple around it)."""


class _TokenExchange(Credential):
    """token_exchange (RFC 8693): the signed-in user's access token is the `subject_token` of a token request at the
    identity provider that issued it (`subject_issuer`), whose answer is a token of the API for that user; cached
    per user, client and scopes in the shared `TokenCache` until shortly before it expires, exchanged once for every
    call that needs it at the same time. The user's own token goes to that token endpoint only, never upstream. A
    call without a user's token of that issuer (an API key, no credentials, another provider's sign-in) is refused
    before anything is sent: such a tool never falls back to a shared account."""

    renewable = True

    def __init__(
        self, auth: AuthConfig, client: UpstreamClient, tokens: TokenCache, *, workspace: str, where: str,
        timeout: float,
    ) -> None:  # fmt: skip
        assert auth.subject_issuer is not None  # AuthConfig requires it for a token exchange
        self.scheme = auth.scheme or auth.type
        self._endpoint = _TokenEndpoint(auth, client, workspace=workspace, where=where, timeout=timeout)
        self._tokens = tokens
        self._issuer = auth.subject_issuer
        scopes = tuple(sorted(set(auth.scopes)))
        self._target: ExchangeTarget = (auth.subject_issuer, self._endpoint.url, self._endpoint.client_id,
                                        auth.secret, auth.audience, auth.resource, scopes)  # fmt: skip
        self._form = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            **({"audience": auth.audience} if auth.audience else {}),
            **({"resource": auth.resource} if auth.resource else {}),
            **({"scope": " ".join(scopes)} if scopes else {}),
        }

    def ready(self, caller: Principal | None = None) -> Sent | None:
        if caller is None or caller.token is None:
            return None  # `obtain` refuses it
        token = self._tokens.cached(self._endpoint.workspace, (caller.id, caller.client_id, caller.scopes,
                                                              self._target))  # fmt: skip
        return None if token is None else Sent.bearer(token)

    async def obtain(self, caller: Principal | None = None) -> Sent:
        user = self._user(caller)
        endpoint = self._endpoint
        endpoint.secret.value()
        key = (user.id, user.client_id, user.scopes, self._target)
        try:
            return Sent.bearer(await self._tokens.get(endpoint.workspace, key, endpoint.url, self._fetcher(user)))
        except _TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme, user=True) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        user = self._user(caller)
        endpoint = self._endpoint
        key = (user.id, user.client_id, user.scopes, self._target)
        try:
            token = await self._tokens.renew(endpoint.workspace, key, endpoint.url, refused.token, self._fetcher(user))
        except _TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme, user=True) from None
        return Sent.bearer(token)

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        if refused.token is not None and caller is not None:
            key = (caller.id, caller.client_id, caller.scopes, self._target)
            self._tokens.drop(self._endpoint.workspace, key, refused.token)

    def _user(self, caller: Principal | None) -> Principal:
        """The signed-in user this tool acts as: a principal of an access token from the exchange's own issuer,
        not about to expire; else refused before anything is sent."""
        if caller is None or caller.token is None or caller.anonymous:
            raise UserCredentialsError(
                "This tool acts as the signed-in user, and this call has no user: it came with an API key, or "
                "without credentials. Nothing was sent.",
            )  # fmt: skip
        if caller.issuer is None or not same_issuer(caller.issuer, self._issuer):
            raise UserCredentialsError(
                "This tool acts as the signed-in user of another identity provider than the one this call signed in "
                "with: the user's token is never sent elsewhere. Nothing was sent.",
                suggested_action="Do not retry: tell the user that this tool needs them signed in with the identity "
                "provider its API trusts, and to sign in again choosing it.",
            )  # fmt: skip
        if caller.expires_at is not None and caller.expires_at - time.time() < TOKEN_EXPIRY_MARGIN:
            raise _sign_in_again()  # it would expire during the exchange, or be refused as expired
        return caller

    def _fetcher(self, user: Principal) -> Callable[[], Awaitable[tuple[str, float]]]:
        assert user.token is not None
        form = {**self._form, "subject_token": user.token}

        async def fetch() -> tuple[str, float]:
            return await self._endpoint.request(form, issued=ACCESS_TOKEN_TYPE)

        return fetch


MAX_TOKEN_LIFETIME = 3600.0
"""Seconds a client-credentials token is used at most, whatever its `expires_in` says."""


def _lifetime(expires_in: object) -> float:
    """Seconds a token may be used: its `expires_in` less the margin (none left: used by the calls that waited for
    it, then fetched again), or the default when the answer gives none that is a number."""
    if isinstance(expires_in, str) and expires_in.isascii() and expires_in.isdigit() and len(expires_in) <= 9:
        expires_in = int(expires_in)  # some servers send it as a string
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or not math.isfinite(expires_in):
        return DEFAULT_TOKEN_LIFETIME
    seconds = min(float(expires_in), MAX_TOKEN_LIFETIME)  # a token kept at most an hour: the cache turns over
    # The margin, but never more than half the lifetime: a short-lived token still serves a few calls.
    return max(seconds - TOKEN_EXPIRY_MARGIN, seconds / 2)


def compile_credential(
    auth: AuthConfig | None,
    client: UpstreamClient,
    *,
    workspace: str,
    where: str,
    timeout: float = DEFAULT_TIMEOUT,
    tokens: TokenCache | None = None,
) -> Credential:
    """The operation's credential, checked when the version is built (names; the token URL). Its secret is read on
    the first call. `timeout`: what a token request may take (the operation's); `tokens`: the process's
    `TokenCache` (a fresh one when None)."""
    if auth is None:
        return Credential()
    if auth.type in ("oauth2", "token_exchange"):
        kind = _ClientCredentials if auth.type == "oauth2" else _TokenExchange
        return kind(auth, client, tokens if tokens is not None else TokenCache(), workspace=workspace, where=where,
                    timeout=timeout)  # fmt: skip
    reserved = auth.type == "header" and auth.name.lower() in _RESERVED_HEADERS
    if auth.type in ("header", "cookie") and (not is_token(auth.name) or reserved):
        raise ConfigurationError(f"{where}: {auth.name!r} cannot name a {auth.type} that carries a credential")
    if auth.type == "query" and not auth.name:
        raise ConfigurationError(f"{where}: a query credential needs the parameter's name")
    return _Static(auth, workspace=workspace, where=where)
