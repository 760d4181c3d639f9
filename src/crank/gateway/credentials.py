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
from crank.registry.runtime import DEFAULT_TIMEOUT, AuthConfig
from crank.wire.auth import Principal
from crank.wire.http import is_token
from crank.wire.notices import ThrottledLog

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
MAX_CACHED_TOKENS: Final = 10_000
"""Tokens kept (one per token URL, client, scopes and workspace in use, and per user for exchanged ones): past it
the expired ones are swept, then the oldest go."""
TOKEN_EXCHANGE_GRANT: Final = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"
_USER_REFUSALS: Final = frozenset({"invalid_grant", "access_denied", "consent_required", "interaction_required",
                                   "invalid_target", "unauthorized_client"})  # fmt: skip
"""A token endpoint's refusals of an exchange that are about the user (its token, access or consent)."""
USER_REQUIRED_ACTION: Final = (
    "Do not retry: this tool needs a signed-in user. Tell the user to connect through an MCP client that signs "
    "them in (OAuth), not with an API key."
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

    def again(self) -> _TokenFailure:
        """The same failure, for a call that meets it remembered (`FAILURE_MEMORY`)."""
        return _TokenFailure(self.cause, self.detail, refused=self.refused)


class TokenCache:
    """OAuth 2 access tokens of one process, by `TokenKey` (client credentials) or `ExchangeKey` (a user's exchanged
    token): each kept until shortly before it expires, at most `MAX_CACHED_TOKENS` (the expired go first, then the
    oldest), and fetched once for every call that needs it at the same time (single flight)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """`clock`: monotonic seconds (a test's own, to expire tokens without waiting)."""
        self.clock = clock
        self._tokens: dict[Hashable, tuple[str, float]] = {}  # key -> (token, when it stops being used)
        self._flights: dict[Hashable, asyncio.Task[str]] = {}  # key -> the token request under way
        self._failed: dict[Hashable, tuple[_TokenFailure, float]] = {}  # key -> its request's failure, until when

    def cached(self, key: Hashable) -> str | None:
        """The token kept for `key`, unless it expired."""
        held = self._tokens.get(key)
        if held is None:
            return None
        if self.clock() >= held[1]:
            del self._tokens[key]
            return None
        return held[0]

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> str:
        """The kept token, else the one `fetch` gets ((token, seconds it may be used)), fetched once for all."""
        token = self.cached(key)
        if token is not None:
            return token
        return await self._join(key, fetch)

    async def renew(self, key: Hashable, refused: str, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> str:
        """A token in place of `refused`: the one another call already renewed or is renewing, else a new one."""
        if key not in self._flights:
            token = self.cached(key)
            if token is not None and token != refused:
                return token
            self._tokens.pop(key, None)
        return await self._join(key, fetch)

    def drop(self, key: Hashable, refused: str) -> None:
        """Forget `refused`, unless another token replaced it already."""
        held = self._tokens.get(key)
        if held is not None and held[0] == refused:
            del self._tokens[key]

    async def _join(self, key: Hashable, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> str:
        failed = self._failed.get(key)
        if failed is not None:  # a token endpoint that just failed is not asked again for FAILURE_MEMORY seconds
            if self.clock() < failed[1]:
                raise failed[0].again()  # a fresh one: the first keeps its own traceback, not every call's since
            del self._failed[key]
        loop = asyncio.get_running_loop()
        flight = self._flights.get(key)
        if flight is None or flight.get_loop() is not loop:
            flight = loop.create_task(self._fly(key, fetch))
            self._flights[key] = flight
            flight.add_done_callback(functools.partial(self._landed, key))
        # Shielded: a caller that gives up (its deadline, a cancelled request) does not end the others' request.
        return await asyncio.shield(flight)

    async def _fly(self, key: Hashable, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> str:
        started = self.clock()  # the lifetime counts from the request: the token is never kept past its expiry
        try:
            token, lifetime = await fetch()
        except _TokenFailure as failure:
            if len(self._failed) >= MAX_CACHED_TOKENS:
                self._failed.clear()
            self._failed[key] = (failure, self.clock() + FAILURE_MEMORY)
            raise
        if lifetime > 0:
            if len(self._tokens) >= MAX_CACHED_TOKENS:
                now = self.clock()
                self._tokens = {held: value for held, value in self._tokens.items() if value[1] > now}
                while len(self._tokens) >= MAX_CACHED_TOKENS:  # none expired: the oldest go
                    del self._tokens[next(iter(self._tokens))]
            self._tokens[key] = (token, started + lifetime)
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
        self.secret = _Secret(auth.secret, _no_check, workspace=workspace, where=where)
        self._client = client
        self._timeout = timeout
        self._workspace = workspace
        self._where = where
        self._refusal = client.egress.target_refusal(auth.token_url)  # a stricter replica: checked on each call

    async def request(self, form: Mapping[str, str]) -> tuple[str, float]:
        """One token request of `form`: (the access token, seconds it may be used); a `_TokenFailure` saying why not."""
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
                tenant=self._workspace,
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
        if isinstance(token_type, str) and token_type.lower() not in ("bearer", "n_a"):  # RFC 8693 2.2.1: N_A too
            raise self._failed("token_type", token_type if _ERROR_CODE.fullmatch(token_type) else None)
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

    def unavailable(self, failure: _TokenFailure, scheme: str) -> ToolError:
        """What a call is told of a token request that failed (never a secret, nor the token endpoint's address)."""
        if failure.refused:
            return ToolConfigurationError(
                "The tool cannot obtain its upstream credentials: this server's egress policy does not allow the "
                "address of the API's authorization server."
            )
        error: ToolError
        if failure.detail in _USER_REFUSALS:  # a token exchange the server refused for this user: the user's to fix
            error = UserCredentialsError(
                "The API's authorization server refused to give this server a token for the signed-in user: the "
                "user has no access to the API, or has not consented to it. Nothing was sent.",
                error_code="upstream_token_refused", suggested_action=USER_REFUSED_ACTION,
            )  # fmt: skip
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
        token = self._tokens.cached(self._key)
        return None if token is None else self._parts(token)

    async def obtain(self, caller: Principal | None = None) -> Sent:
        self._endpoint.secret.value()  # a missing secret fails before any request, even when another's token is kept
        try:
            return self._parts(await self._tokens.get(self._key, self._fetch))
        except _TokenFailure as failure:
            raise self._endpoint.unavailable(failure, self.scheme) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        self._endpoint.secret.value()  # its token may have come from another operation's request
        try:
            return self._parts(await self._tokens.renew(self._key, refused.token, self._fetch))
        except _TokenFailure as failure:
            raise self._endpoint.unavailable(failure, self.scheme) from None

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        if refused.token is not None:
            self._tokens.drop(self._key, refused.token)

    def _parts(self, token: str) -> Sent:
        sent = self._sent
        if sent is None or sent.token != token:
            sent = self._sent = Sent({"Authorization": f"Bearer {token}"}, token=token)
        return sent

    async def _fetch(self) -> tuple[str, float]:
        return await self._endpoint.request(self._form)


ExchangeTarget = tuple[str, str, str, str | None, str | None, tuple[str, ...]]
"""An operation's token endpoint, client, secret reference (never the value), audience, resource and scopes."""
ExchangeKey = tuple[str, ExchangeTarget]
"""What makes two calls' exchanged tokens the same token: the same user (a principal's id names its workspace, issuer
and subject) and the same `ExchangeTarget` (made once per operation: a call builds only the pair)."""


class _TokenExchange(Credential):
    """token_exchange (RFC 8693): the signed-in user's access token is the `subject_token` of a token request at the
    identity provider, whose answer is a token of the API for that user; cached per user in the shared `TokenCache`
    until shortly before it expires, exchanged once for every call that needs it at the same time. The user's own
    token goes to the token endpoint only, never upstream. A call without a user's token (an API key, a caller
    without credentials) is refused before anything is sent: such a tool never falls back to a shared account."""

    renewable = True

    def __init__(
        self, auth: AuthConfig, client: UpstreamClient, tokens: TokenCache, *, workspace: str, where: str,
        timeout: float,
    ) -> None:  # fmt: skip
        self.scheme = auth.scheme or auth.type
        self._endpoint = _TokenEndpoint(auth, client, workspace=workspace, where=where, timeout=timeout)
        self._tokens = tokens
        self._scopes = tuple(sorted(set(auth.scopes)))
        self._key: ExchangeTarget = (self._endpoint.url, self._endpoint.client_id, auth.secret, auth.audience,
                                     auth.resource, self._scopes)  # fmt: skip
        self._form = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            **({"audience": auth.audience} if auth.audience else {}),
            **({"resource": auth.resource} if auth.resource else {}),
            **({"scope": " ".join(self._scopes)} if self._scopes else {}),
        }

    def ready(self, caller: Principal | None = None) -> Sent | None:
        if caller is None or caller.token is None:
            return None  # `obtain` refuses it
        token = self._tokens.cached((caller.id, self._key))
        return None if token is None else Sent.bearer(token)

    async def obtain(self, caller: Principal | None = None) -> Sent:
        user = _user(caller)
        self._endpoint.secret.value()
        try:
            return Sent.bearer(await self._tokens.get((user.id, self._key), self._fetcher(user)))
        except _TokenFailure as failure:
            raise self._endpoint.unavailable(failure, self.scheme) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        user = _user(caller)
        try:
            return Sent.bearer(await self._tokens.renew((user.id, self._key), refused.token, self._fetcher(user)))
        except _TokenFailure as failure:
            raise self._endpoint.unavailable(failure, self.scheme) from None

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        if refused.token is not None and caller is not None:
            self._tokens.drop((caller.id, self._key), refused.token)

    def _fetcher(self, user: Principal) -> Callable[[], Awaitable[tuple[str, float]]]:
        assert user.token is not None
        form = {**self._form, "subject_token": user.token}

        async def fetch() -> tuple[str, float]:
            return await self._endpoint.request(form)

        return fetch


def _user(caller: Principal | None) -> Principal:
    """The signed-in user a tool acting as the user needs: a principal of an access token, else refused."""
    if caller is None or caller.token is None or caller.anonymous:
        raise UserCredentialsError(
            "This tool acts as the signed-in user, and this call has no user: it came with an API key, or without "
            "credentials. Nothing was sent.", suggested_action=USER_REQUIRED_ACTION,
        )  # fmt: skip
    return caller


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
