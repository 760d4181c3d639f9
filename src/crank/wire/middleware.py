"""Request checks as ASGI wrappers around any app, the way Starlette's middleware and the official SDK's
transport security do them: `Host`/`Origin` (DNS-rebinding protection), the body size limit, and bearer
authentication. Each answers a refused request itself; the wrapped app sees only requests that passed.

The checks and their order are `crank.wire.checks.check_request`'s; `RequestGate` adds the caller's
authentication and admission (`BearerAuth`) after them. `RequestChecksMiddleware` is the gate around an app, and
`HostOriginMiddleware`, `BodyLimitMiddleware` and `BearerAuthMiddleware` are it with one part each; the MCP
endpoint calls the gate itself, first thing on its one path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from crank import _json
from crank.exceptions import (
    AuthChallengeError,
    DependencyUnavailableError,
    InternalError,
    InvalidRequestError,
    RateLimitedError,
    RequestTooLargeError,
    RPCError,
)
from crank.types import ASGIApp, Message, Receive, Scope, Send
from crank.wire.asgi import DEFAULT_MAX_BODY_SIZE, JSON_CONTENT_TYPE, EarlyAnswer, send_response
from crank.wire.auth import Authenticator, Principal, challenge_header
from crank.wire.checks import Passed, Refused, body_too_large_message, check_request, count_body
from crank.wire.http import bearer_token
from crank.wire.jsonrpc import encode_error
from crank.wire.security import HostOriginPolicy

__all__ = [
    "AUTH_SCOPE_KEY",
    "Admission",
    "KnownRefusal",
    "BearerAuth",
    "BearerAuthMiddleware",
    "BodyLimitMiddleware",
    "HostOriginMiddleware",
    "RequestChecksMiddleware",
    "RequestGate",
    "TokenTable",
    "jsonrpc_refusal",
    "plain_refusal",
]

_TOKEN_CACHE_SIZE = 2048
_TOKEN_CACHE_VALUE_BYTES = 2048  # an access token (a JWT is 0.5-1.5 KB) is parsed once; longer values each time:
# the cache (each value and its token) stays under 9 MiB

AUTH_SCOPE_KEY = "crank.auth"
"""Where `BearerAuth` leaves what `authenticate` returned for the request."""

Refusal = Callable[[Scope, int, str], bytes]
"""The body of a refused request, from its scope, HTTP status and message: each app keeps its error shape."""


Admission = Callable[[Scope, Principal], Awaitable[None] | None]
"""Admits an authenticated request (its scope and who calls): None lets it through at once; an awaitable
decides, and raises `RateLimitedError` (429) to refuse it."""

KnownRefusal = Callable[[Scope, Principal], RateLimitedError | None]
"""The refusal `Admission` would give an authenticated request (its scope and who calls), when it is known at
once without counting anything (a used-up limit); None when it is not known."""


def jsonrpc_rejection(scope: Scope, error: RPCError) -> bytes:
    """A JSON-RPC error object, without an id: how a refusal with its own code and data is answered."""
    return encode_error(None, error)


def jsonrpc_refusal(scope: Scope, status: int, message: str) -> bytes:
    """A JSON-RPC error without an id, the shape the MCP and rpc endpoints answer in: -32600 for a request
    refused (4xx), -32603 when the server cannot serve it now (5xx)."""
    if status >= 500:
        return encode_error(None, InternalError(message))
    return encode_error(None, InvalidRequestError(message))


def plain_refusal(scope: Scope, status: int, message: str) -> bytes:
    """`{"error": message}`: the refusal of an app that speaks plain JSON (the admin API, `crank serve`'s own
    routes)."""
    return _json.dumps({"error": message})


async def send_refusal(scope: Scope, send: Send, refused: Refused, refusal: Refusal = plain_refusal) -> None:
    """The answer to a request `check_request` refused, its body in the app's shape (`refusal`)."""
    await send_response(send, refused.status, refusal(scope, refused.status, refused.message), refused.headers)


class RequestGate:
    """What a request passes before an app reads its body: `check_request` (with `policy` and `max_body_size`;
    None skips that check), then, when `auth` is given, the caller's authentication and admission. A refused
    request is answered here, its body in the app's shape (`refusal`)."""

    def __init__(
        self,
        policy: HostOriginPolicy | None,
        max_body_size: int | None,
        *,
        refusal: Refusal = jsonrpc_refusal,
        auth: BearerAuth | None = None,
    ) -> None:
        self.policy = policy
        self.max_body_size = max_body_size
        self.refusal = refusal
        self.auth = auth

    def enter(self, scope: Scope, send: Send) -> Passed | Awaitable[Passed | None]:
        """The request's `Passed` when it may go on at once (the common request: no coroutine); else what to
        await: the `Passed` once its caller is admitted, or None when it was answered (refused)."""
        checked = check_request(scope, self.policy, self.max_body_size)
        if not isinstance(checked, Passed):
            return self._refused(scope, send, checked)
        if self.auth is not None:
            pending = self.auth.check(scope, send, checked.authorization)
            if pending is not None:
                return _when_admitted(pending, checked)
        return checked

    def receive_for(self, checked: Passed, receive: Receive) -> Receive:
        """`receive` as the app may read it: counted when the body is streamed, so that it stops at the limit
        (`RequestTooLargeError`); as it is when a length frames the body (the server never hands on more)."""
        if checked.length is not None or self.max_body_size is None:
            return receive
        return count_body(receive, self.max_body_size)

    async def refuse_too_large(self, scope: Scope, send: Send) -> None:
        """The 413 of a streamed body that passed the limit (`receive_for`)."""
        assert self.max_body_size is not None
        await send_refusal(scope, send, Refused(413, body_too_large_message(self.max_body_size)), self.refusal)

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        """The answer `enter` would give from the request's head alone, when it costs no state: a known caller's
        used-up limit (`BearerAuth.answer_early`), once the checks pass. None for any other request."""
        if self.auth is None or self.auth.refused_now is None:
            return None
        checked = check_request(scope, self.policy, self.max_body_size)
        if type(checked) is not Passed:
            return None
        return self.auth.answer_early(scope, checked.authorization)

    async def _refused(self, scope: Scope, send: Send, refused: Refused) -> None:
        await send_refusal(scope, send, refused, self.refusal)


async def _when_admitted(pending: Awaitable[bool], checked: Passed) -> Passed | None:
    return checked if await pending else None


class RequestChecksMiddleware:
    """A `RequestGate` around an app: the checks, then the authentication when `auth` is given. `exempt` names
    requests that go to the app unchecked (a public document, say)."""

    def __init__(
        self,
        app: ASGIApp,
        policy: HostOriginPolicy | None,
        max_body_size: int | None = DEFAULT_MAX_BODY_SIZE,
        *,
        refusal: Refusal = jsonrpc_refusal,
        auth: BearerAuth | None = None,
        exempt: Callable[[Scope], bool] | None = None,
    ) -> None:
        self.app = app
        self.gate = RequestGate(policy, max_body_size, refusal=refusal, auth=auth)
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        entered = self.gate.enter(scope, send)
        checked = entered if isinstance(entered, Passed) else await entered
        if checked is None:  # refused, and answered
            return
        counted = self.gate.receive_for(checked, receive)
        if counted is receive:
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except RequestTooLargeError:
            if started:
                raise
            await self.gate.refuse_too_large(scope, send)

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        return self.gate.answer_early(scope)


class HostOriginMiddleware(RequestChecksMiddleware):
    """DNS-rebinding protection (transports.mdx §Security Warning): a `Host` outside the policy is 421,
    a present `Origin` that the policy does not allow is 403 (with the checks that come before them)."""

    def __init__(self, app: ASGIApp, policy: HostOriginPolicy, *, refusal: Refusal = plain_refusal) -> None:
        super().__init__(app, policy, None, refusal=refusal)


class BodyLimitMiddleware(RequestChecksMiddleware):
    """Refuses a request body larger than `max_body_size` with 413, before the app reads it when the body
    declares its length, and as soon as the limit is passed when it is streamed (chunked)."""

    def __init__(
        self, app: ASGIApp, max_body_size: int = DEFAULT_MAX_BODY_SIZE, *, refusal: Refusal = jsonrpc_refusal
    ) -> None:
        super().__init__(app, None, max_body_size, refusal=refusal)


class BearerAuth:
    """Authentication through an `Authenticator` (`crank.wire.auth`): each request's bearer token (None without
    one) becomes a `Principal`, or is refused with 401 or 403 and a `WWW-Authenticate: Bearer` challenge.

    The principal is left in `scope["crank.auth"]` for the app (which may still refuse what it may not use).
    `authenticate` is the synchronous look-up on the hot path; a token it does not know gets `verify`, the
    slower look. Either may raise `DependencyUnavailableError` when it cannot tell who calls (its registry or the
    token's issuer does not answer): 503 with `Retry-After`. `admit`, when given, gets every request whose
    caller is known, before the app reads its body; it returns None to let it through at once, or an awaitable
    that may refuse it with `RateLimitedError`: 429 with `Retry-After`, the error as `rejection` shapes it (with
    its code and data), or with `DependencyUnavailableError` when it cannot tell (503). `metadata_url`, when
    given, names the protected resource metadata of the request's resource in every challenge (RFC 9728 §5.1).

    The one authentication rule of `RequestGate`, and so of every wrapper and of the MCP endpoint."""

    def __init__(
        self,
        authenticator: Authenticator,
        *,
        realm: str,
        message: str,
        refusal: Refusal = jsonrpc_refusal,
        admit: Admission | None = None,
        rejection: Callable[[Scope, RPCError], bytes] = jsonrpc_rejection,
        refused_now: KnownRefusal | None = None,
        metadata_url: Callable[[Scope], str | None] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.admit = admit
        self.refused_now = refused_now
        self.message = message
        self.refusal = refusal
        self.rejection = rejection
        self.realm = realm
        self.metadata_url = metadata_url
        # The token of each `Authorization` value seen lately: a client sends the same one on every request.
        # Bounded in entries and in each entry's size: a flood of distinct values cannot grow it.
        self._tokens: dict[str | bytes, str | None] = {}

    async def admitted(self, scope: Scope, send: Send, authorization: str | bytes | None) -> bool:
        """Authenticate the request (its `Authorization` header's value) and admit it: True when it may go on,
        False when it was answered (401, 403, 429 or 503)."""
        pending = self.check(scope, send, authorization)
        return True if pending is None else await pending

    def check(self, scope: Scope, send: Send, authorization: str | bytes | None) -> Awaitable[bool] | None:
        """`admitted` without a coroutine for the common request (a known key, nothing to wait for): None when
        it may go on at once; else what to await, as `admitted` answers."""
        token = None if authorization is None else self._token(authorization)
        try:
            caller = self.authenticator.authenticate(scope, token)
        except AuthChallengeError as refused:
            return self._challenged(scope, send, refused)
        except DependencyUnavailableError as unavailable:
            return self._unavailable(scope, send, unavailable)
        if caller is None:
            return self._verified(scope, send, token)
        return self._admission(scope, send, caller)

    async def still_valid(self, scope: Scope) -> bool:
        """Whether an admitted request's credentials would still be taken now (a long stream asks again): False
        once its key is revoked or its token expired; True when it cannot be told (the registry or issuer does
        not answer), as a stream that only says "a list changed" does no harm meanwhile."""
        authorization = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        token = None if authorization is None else self._token(authorization)
        try:
            if self.authenticator.authenticate(scope, token) is None:
                await self.authenticator.verify(scope, token)
        except AuthChallengeError:
            return False
        except DependencyUnavailableError:
            return True
        return True

    def answer_early(self, scope: Scope, authorization: str | bytes | None) -> EarlyAnswer | None:
        """The 429 `check` would answer, when `refused_now` knows it for a known caller: None for any other
        request (no key, a key `authenticate` does not know or cannot tell, a caller not refused at once)."""
        if self.refused_now is None or authorization is None:
            return None
        try:
            caller = self.authenticator.authenticate(scope, self._token(authorization))
        except (DependencyUnavailableError, AuthChallengeError):
            return None
        refused = None if caller is None else self.refused_now(scope, caller)
        return None if refused is None else self._rate_limited(scope, refused)

    def challenge(self, scope: Scope, refused: AuthChallengeError) -> EarlyAnswer:
        """The whole 401 or 403 of a refused request: its body in the app's shape, and the Bearer challenge."""
        url = self.metadata_url(scope) if self.metadata_url is not None else None
        message = self.message if refused.status == 401 and refused.error is None else refused.description
        headers = [
            (b"content-type", JSON_CONTENT_TYPE),
            (b"www-authenticate", challenge_header(refused, resource_metadata=url, realm=self.realm)),
        ]
        return refused.status, headers, self.refusal(scope, refused.status, message)

    def _rate_limited(self, scope: Scope, limited: RateLimitedError) -> EarlyAnswer:
        """The whole 429 of a refused admission, as `_admitted` sends it and `answer_early` gives it."""
        headers = [(b"content-type", JSON_CONTENT_TYPE), (b"retry-after", str(limited.retry_after).encode())]
        return 429, headers, self.rejection(scope, limited)

    def _token(self, authorization: str | bytes) -> str | None:
        try:
            return self._tokens[authorization]
        except KeyError:
            token = bearer_token(authorization)
            # ASCII only: then characters are bytes, and the bound on each entry holds.
            if len(authorization) <= _TOKEN_CACHE_VALUE_BYTES and authorization.isascii():
                if len(self._tokens) >= _TOKEN_CACHE_SIZE:
                    self._tokens.clear()
                self._tokens[authorization] = token
            return token

    def _admission(self, scope: Scope, send: Send, caller: Principal) -> Awaitable[bool] | None:
        scope[AUTH_SCOPE_KEY] = caller
        if self.admit is None:
            return None
        admission = self.admit(scope, caller)
        return None if admission is None else self._admitted(scope, send, admission)

    async def _verified(self, scope: Scope, send: Send, token: str | None) -> bool:
        """The slower look at a token `authenticate` did not know (`verify`), then the admission."""
        try:
            caller = await self.authenticator.verify(scope, token)
        except AuthChallengeError as refused:
            return await self._challenged(scope, send, refused)
        except DependencyUnavailableError as unavailable:
            return await self._unavailable(scope, send, unavailable)
        pending = self._admission(scope, send, caller)
        return True if pending is None else await pending

    async def _challenged(self, scope: Scope, send: Send, refused: AuthChallengeError) -> bool:
        status, headers, body = self.challenge(scope, refused)
        await send_response(send, status, body, headers, content_type=None)
        return False

    async def _admitted(self, scope: Scope, send: Send, admission: Awaitable[None]) -> bool:
        try:
            await admission
        except RateLimitedError as limited:
            status, headers, body = self._rate_limited(scope, limited)
            await send_response(send, status, body, headers, content_type=None)
            return False
        except DependencyUnavailableError as unavailable:  # cannot count the request: not admitted
            return await self._unavailable(scope, send, unavailable)
        return True

    async def _unavailable(self, scope: Scope, send: Send, unavailable: DependencyUnavailableError) -> bool:
        retry = [(b"retry-after", str(unavailable.retry_after).encode())]
        await send_response(send, 503, self.refusal(scope, 503, unavailable.message), retry)
        return False


class TokenTable:
    """The simplest `Authenticator`: a callable from a token to who it proves (a dict's `get`, say), None
    refusing it with 401; `confirm`, when given, is an awaited second look at a token it did not know. What the
    admin API's one token and small apps need.

    Its callers are `Any`, on purpose: whatever the app's look-up returns (a name, a role set) is what its handlers
    read from `scope["crank.auth"]`; the gateway and the MCP endpoint's access use `Principal` authenticators."""

    def __init__(
        self,
        lookup: Callable[[str | None], Any],
        *,
        confirm: Callable[[str], Awaitable[Any]] | None = None,
        message: str = "A valid bearer token is required",
    ) -> None:
        self.lookup = lookup
        self.confirm = confirm
        self.message = message

    def authenticate(self, scope: Scope, token: str | None) -> Any:
        caller = self.lookup(token)
        if caller is None and (token is None or self.confirm is None):
            raise AuthChallengeError(self.message)
        return caller

    async def verify(self, scope: Scope, token: str | None) -> Any:
        caller = await self.confirm(token) if self.confirm is not None and token is not None else None
        if caller is None:
            raise AuthChallengeError(self.message)
        return caller


class BearerAuthMiddleware(RequestChecksMiddleware):
    """`BearerAuth` around an app (with the checks that come before it): see there. `exempt` names requests that
    need no credentials (a public document, say)."""

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator | Callable[[str | None], Any],
        *,
        realm: str,
        message: str,
        refusal: Refusal = jsonrpc_refusal,
        exempt: Callable[[Scope], bool] | None = None,
        admit: Admission | None = None,
        rejection: Callable[[Scope, RPCError], bytes] = jsonrpc_rejection,
    ) -> None:
        """`authenticator`: an `Authenticator`, or a plain look-up from a token to its caller (`TokenTable`)."""
        chosen = authenticator if hasattr(authenticator, "verify") else TokenTable(authenticator, message=message)
        auth = BearerAuth(cast(Authenticator, chosen), realm=realm, message=message, refusal=refusal, admit=admit,
                          rejection=rejection)  # fmt: skip
        super().__init__(app, None, None, refusal=refusal, auth=auth, exempt=exempt)
        self.auth = auth
