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
import re
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Final, NamedTuple

from cachetools import LRUCache

from crank.exceptions import ConfigurationError, ExternalServiceError, ToolError, UserCredentialsError
from crank.gateway.client import UpstreamClient
from crank.gateway.secrets import SecretValue
from crank.gateway.token_endpoint import (
    ACCESS_TOKEN_TYPE,
    TOKEN_EXPIRY_MARGIN,
    TokenEndpoint,
    TokenFailure,
    sign_in_again,
)
from crank.gateway.tokens import same_issuer
from crank.gateway.user_connections import Connected, UserConnections
from crank.registry.runtime import DEFAULT_TIMEOUT, AuthConfig
from crank.state.store import MemoryStore
from crank.wire.auth import Principal
from crank.wire.http import is_token
from crank.wire.tenant_cache import TenantCaches

__all__ = [
    "FAILURE_MEMORY",
    "NO_CREDENTIALS",
    "TOKEN_CACHE_BYTES",
    "TOKEN_CACHE_TOTAL_BYTES",
    "Credential",
    "ExchangeKey",
    "Sent",
    "TokenCache",
    "TokenKey",
    "compile_credential",
]

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

# Header names the client refuses or that describe the request itself: never a credential's.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "content-type"})
_COOKIE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")  # RFC 6265 cookie-octet


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


class _Static(Credential):
    """bearer, header, query, cookie, basic: the same parts on every request, composed on the first."""

    def __init__(self, auth: AuthConfig, *, workspace: str, where: str) -> None:
        self.scheme = auth.scheme or auth.type
        self._type = auth.type
        self._name = auth.name
        check = {"cookie": _cookie_problem, "basic": _basic_problem}.get(auth.type)
        self._secret = SecretValue(auth.secret, workspace=workspace, where=where, check=check)
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


_Remembered = tuple[str, str | None, bool, float]
"""A failure as remembered (`FAILURE_MEMORY`): its cause, detail and egress refusal, and until when; never the
exception itself, whose frames hold the request (a client secret, a user's token)."""


def _remember(memory: LRUCache[Hashable, _Remembered], key: Hashable, failure: TokenFailure, until: float) -> None:
    memory[key] = (failure.cause, failure.detail, failure.refused, until)


def _remembered(memory: LRUCache[Hashable, _Remembered], key: Hashable, now: float) -> TokenFailure | None:
    found = memory.get(key)
    if found is None:
        return None
    if now >= found[3]:
        memory.pop(key, None)
        return None
    return TokenFailure(found[0], found[1], refused=found[2])


def _token_bytes(key: Hashable, value: tuple[str, float]) -> int:
    return len(value[0]) + _TOKEN_OVERHEAD


class TokenCache:
    """OAuth 2 access tokens of one process, per workspace (`crank.wire.tenant_cache`: no workspace's tokens push
    out another's) and by `TokenKey` (client credentials) or `ExchangeKey` (a user's exchanged token): each kept
    until shortly before it expires, and fetched once for every call that needs it at the same time (single
    flight). A failure is remembered `FAILURE_MEMORY` seconds: the endpoint's (down, slow, garbled) for every
    request of the workspace to its URL, a refusal (4xx) for its key alone."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, connections: UserConnections | None = None
    ) -> None:
        """`clock`: monotonic seconds (a test's own, to expire tokens without waiting). `connections`: the users'
        own connections (`crank.gateway.user_connections`), the process's other upstream tokens, which
        `user_connection` credentials use (none: such a tool fails as `configuration_error`)."""
        self.clock = clock
        self.connections = connections or UserConnections(None, MemoryStore(), None)
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
        except TokenFailure as failure:
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


class _ClientCredentials(Credential):
    """oauth2: a bearer access token of the client credentials grant, from the shared `TokenCache`."""

    renewable = True

    def __init__(
        self, auth: AuthConfig, client: UpstreamClient, tokens: TokenCache, *, workspace: str, where: str,
        timeout: float,
    ) -> None:  # fmt: skip
        self.scheme = auth.scheme or auth.type
        self._endpoint = TokenEndpoint(auth, client, workspace=workspace, where=where, timeout=timeout)
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
        except TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        endpoint = self._endpoint
        endpoint.secret.value()  # its token may have come from another operation's request
        try:
            token = await self._tokens.renew(endpoint.workspace, self._key, endpoint.url, refused.token, self._fetch)
        except TokenFailure as failure:
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
        answer = await self._endpoint.request(self._form)
        return answer.access_token, answer.lifetime


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
        self._endpoint = TokenEndpoint(auth, client, workspace=workspace, where=where, timeout=timeout)
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
        token = self._tokens.cached(self._endpoint.workspace, self._key(caller))
        return None if token is None else Sent.bearer(token)

    async def obtain(self, caller: Principal | None = None) -> Sent:
        user = self._user(caller)
        endpoint = self._endpoint
        endpoint.secret.value()
        try:
            fetched = await self._tokens.get(endpoint.workspace, self._key(user), endpoint.url, self._fetcher(user))
            return Sent.bearer(fetched)
        except TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme, user=True) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        user = self._user(caller)
        endpoint = self._endpoint
        try:
            token = await self._tokens.renew(endpoint.workspace, self._key(user), endpoint.url, refused.token,
                                             self._fetcher(user))  # fmt: skip
        except TokenFailure as failure:
            raise endpoint.unavailable(failure, self.scheme, user=True) from None
        return Sent.bearer(token)

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        if refused.token is not None and caller is not None:
            self._tokens.drop(self._endpoint.workspace, self._key(caller), refused.token)

    def _key(self, user: Principal) -> Hashable:
        """The user's exchanged token's key in the `TokenCache`: who they are, through which client and with which
        scopes, for this exchange's target."""
        return (user.id, user.client_id, user.scopes, self._target)

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
            raise sign_in_again()  # it would expire during the exchange, or be refused as expired
        return caller

    def _fetcher(self, user: Principal) -> Callable[[], Awaitable[tuple[str, float]]]:
        assert user.token is not None
        form = {**self._form, "subject_token": user.token}

        async def fetch() -> tuple[str, float]:
            answer = await self._endpoint.request(form, issued=ACCESS_TOKEN_TYPE)
            return answer.access_token, answer.lifetime

        return fetch


class _UserConnection(Credential):
    """user_connection: the signed-in user's own token for the API, from their connection (the authorization code
    flow on the connect page, kept in the vault: `UserConnections`), refreshed at `token_url` when it expires. A
    user who has not connected is asked to (`UpstreamConnectionRequiredError`, with their connect link); a call
    without a signed-in user is refused. Nothing is sent upstream either way."""

    renewable = True

    def __init__(
        self, auth: AuthConfig, client: UpstreamClient, tokens: TokenCache, *, workspace: str, where: str,
        timeout: float,
    ) -> None:  # fmt: skip
        assert auth.scheme is not None  # AuthConfig requires it: a connection is kept per scheme
        self.scheme = auth.scheme
        self._endpoint = TokenEndpoint(auth, client, workspace=workspace, where=where, timeout=timeout)
        self._connections = tokens.connections
        self._workspace = workspace
        self._resource = {"resource": auth.resource} if auth.resource else {}

    def ready(self, caller: Principal | None = None) -> Sent | None:
        if caller is None:
            return None  # `obtain` refuses it
        token = self._connections.cached(self._workspace, self.scheme, caller)
        return None if token is None else Sent.bearer(token)

    async def obtain(self, caller: Principal | None = None) -> Sent:
        try:
            return Sent.bearer(await self._connections.token(self._workspace, self.scheme, caller,
                                                             self._refresh))  # fmt: skip
        except TokenFailure as failure:
            raise self._unavailable(failure) from None

    async def renew(self, refused: Sent, caller: Principal | None = None) -> Sent:
        assert refused.token is not None
        try:
            token = await self._connections.renew(self._workspace, self.scheme, caller, refused.token,
                                                  self._refresh)  # fmt: skip
        except TokenFailure as failure:
            raise self._unavailable(failure) from None
        return Sent.bearer(token)

    def drop(self, refused: Sent, caller: Principal | None = None) -> None:
        if refused.token is not None and caller is not None:
            self._connections.drop(self._workspace, self.scheme, caller, refused.token)

    def _unavailable(self, failure: TokenFailure) -> ToolError:
        if failure.cause != "refresh_busy":
            return self._endpoint.unavailable(failure, self.scheme)
        busy = ExternalServiceError(
            "The user's token for the API is being renewed by another call, which did not finish in time. Nothing "
            "was sent.", error_code="upstream_token_busy", recoverable=True,
            suggested_action="Call the tool again in a few seconds.",
        )  # fmt: skip
        busy.may_have_taken_effect = False
        return busy

    async def _refresh(self, connected: Connected) -> Connected:
        """The connection's tokens renewed with its refresh token (RFC 6749 6); a server that sends no new refresh
        token keeps the old one valid."""
        assert connected.refresh_token is not None
        self._endpoint.secret.value()
        # No `scope`: the refreshed token keeps what the user consented to (RFC 6749 6).
        form = {"grant_type": "refresh_token", "refresh_token": connected.refresh_token, **self._resource}
        answer = await self._endpoint.request(form)
        return Connected.from_answer(answer, time.time(), previous=connected)


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
    if auth.type in ("oauth2", "token_exchange", "user_connection"):
        kind = {"oauth2": _ClientCredentials, "token_exchange": _TokenExchange}.get(auth.type, _UserConnection)
        return kind(auth, client, tokens if tokens is not None else TokenCache(), workspace=workspace, where=where,
                    timeout=timeout)  # fmt: skip
    reserved = auth.type == "header" and auth.name.lower() in _RESERVED_HEADERS
    if auth.type in ("header", "cookie") and (not is_token(auth.name) or reserved):
        raise ConfigurationError(f"{where}: {auth.name!r} cannot name a {auth.type} that carries a credential")
    if auth.type == "query" and not auth.name:
        raise ConfigurationError(f"{where}: a query credential needs the parameter's name")
    return _Static(auth, workspace=workspace, where=where)
