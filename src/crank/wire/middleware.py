"""Request checks as ASGI wrappers around any app, the way Starlette's middleware and the official SDK's
transport security do them: `Host`/`Origin` (DNS-rebinding protection), the body size limit, and bearer
authentication. Each answers a refused request itself; the wrapped app sees only requests that passed.

`RequestChecksMiddleware` is `HostOriginMiddleware` around `BodyLimitMiddleware` as one wrapper, with one
pass over the headers and one await level: what an endpoint puts around itself on its hot path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
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
from crank.wire.asgi import (
    DEFAULT_MAX_BODY_SIZE,
    HEADERS_SCOPE_KEY,
    JSON_CONTENT_TYPE,
    EarlyAnswer,
    header,
    send_response,
    unique_headers,
)
from crank.wire.auth import Authenticator, Principal, challenge_header
from crank.wire.http import bearer_token, repeated_header, repeated_header_message
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
    "TokenTable",
    "ambiguous_framing",
    "jsonrpc_refusal",
    "refuse_ambiguous_framing",
]

_TOKEN_CACHE_SIZE = 2048
_TOKEN_CACHE_VALUE_BYTES = 2048  # an access token (a JWT is 0.5-1.5 KB) is parsed once; longer values each time:
# the cache (each value and its token) stays under 9 MiB

AUTH_SCOPE_KEY = "crank.auth"
"""Where `BearerAuthMiddleware` leaves what `authenticate` returned for the request."""

Refusal = Callable[[Scope, int, str], bytes]
"""The body of a refused request, from its scope, HTTP status and message: each app keeps its error shape."""


Admission = Callable[[Scope, Any], Awaitable[None] | None]
"""Admits an authenticated request (its scope and who calls): None lets it through at once; an awaitable
decides, and raises `RateLimitedError` (429) to refuse it."""

KnownRefusal = Callable[[Scope, Any], RateLimitedError | None]
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


_HOST_ORIGIN_MESSAGES = {
    421: "Misdirected request: this Host is not served here",
    403: "Forbidden: this Origin is not allowed",
}


class HostOriginMiddleware:
    """DNS-rebinding protection (transports.mdx §Security Warning): a `Host` outside the policy is 421,
    a present `Origin` that the policy does not allow is 403."""

    def __init__(self, app: ASGIApp, policy: HostOriginPolicy, *, refusal: Refusal | None = None) -> None:
        self.app = app
        self.policy = policy
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            repeated = repeated_header(scope["headers"])
            if repeated is not None:
                await _refuse_repeated(scope, send, repeated, self.refusal)
                return
            host = origin = None
            for name, value in scope["headers"]:
                if name == b"host":
                    host = value.decode("latin-1")
                elif name == b"origin":
                    origin = value.decode("latin-1")
            refused = self.policy.check(scope.get("server"), host, origin)
            if refused is not None:
                await _refuse_host_or_origin(scope, send, refused, self.refusal)
                return
        await self.app(scope, receive, send)


async def _refuse_repeated(scope: Scope, send: Send, name: str, refusal: Refusal | None) -> None:
    """400 for a request that repeats a header it may send once (`crank.wire.http.ONCE_ONLY_HEADERS`)."""
    message = repeated_header_message(name)
    body = _json.dumps({"error": message}) if refusal is None else refusal(scope, 400, message)
    await send_response(send, 400, body)


async def _refuse_host_or_origin(scope: Scope, send: Send, status: int, refusal: Refusal | None) -> None:
    if refusal is None:
        body = _json.dumps({"error": "Forbidden host or origin"})
    else:
        body = refusal(scope, status, _HOST_ORIGIN_MESSAGES[status])
    await send_response(send, status, body)


AMBIGUOUS_FRAMING_MESSAGE = "Bad request: Content-Length and Transfer-Encoding together (RFC 9112 §6.1)"


def ambiguous_framing(scope: Scope) -> bool:
    """Whether a request sends both `Content-Length` and `Transfer-Encoding`: a smuggling attempt (RFC 9112 §6.1
    says the server MUST close the connection after it), which some servers (uvicorn's h11) hand to the app. The
    one owner of the rule: the request checks, and `crank serve`'s own routes to the admin API and the console."""
    names = {name for name, _ in scope["headers"]}
    return b"transfer-encoding" in names and b"content-length" in names


async def refuse_ambiguous_framing(scope: Scope, send: Send, refusal: Refusal | None = None) -> None:
    """400, and `Connection: close`: whatever server runs the app, the connection ends with this answer, so that
    what the other framing would make of the body is never read as a request of its own."""
    message = AMBIGUOUS_FRAMING_MESSAGE
    body = _json.dumps({"error": message}) if refusal is None else refusal(scope, 400, message)
    await send_response(send, 400, body, [(b"connection", b"close")])


class BodyLimitMiddleware:
    """Refuses a request body larger than `max_body_size` with 413, before the app reads it when the body
    declares its length, and as soon as the limit is passed when it is streamed (chunked)."""

    def __init__(
        self, app: ASGIApp, max_body_size: int = DEFAULT_MAX_BODY_SIZE, *, refusal: Refusal = jsonrpc_refusal
    ) -> None:
        self.app = app
        self.max_body_size = max_body_size
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunked = header(scope, b"transfer-encoding") is not None
        if chunked and ambiguous_framing(scope):
            await refuse_ambiguous_framing(scope, send, self.refusal)
            return
        # A Transfer-Encoding frames the body, whatever Content-Length says (RFC 9112 §6.3): its body is counted.
        declared = header(scope, b"content-length") if not chunked else None
        if declared is not None and declared.isdigit():
            if int(declared) > self.max_body_size:
                await self._refuse(scope, send)
                return
            # The server frames the body by Content-Length: the app can never read more than declared.
            await self.app(scope, receive, send)
            return
        await self._streamed(scope, receive, send)

    async def _streamed(self, scope: Scope, receive: Receive, send: Send) -> None:
        size = 0
        started = False

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > self.max_body_size:
                raise RequestTooLargeError(self.max_body_size)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except RequestTooLargeError:
            if started:
                raise
            await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        message = f"Request body exceeds {self.max_body_size} bytes"
        await send_response(send, 413, self.refusal(scope, 413, message))


class RequestChecksMiddleware(BodyLimitMiddleware):
    """`HostOriginMiddleware(BodyLimitMiddleware(BearerAuthMiddleware(app, ...), max_body_size, refusal=refusal),
    policy)` in one wrapper (without `auth`, no authentication): the same answers, with the headers read in one
    pass and one or two await levels less per request."""

    def __init__(
        self,
        app: ASGIApp,
        policy: HostOriginPolicy,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        *,
        refusal: Refusal = jsonrpc_refusal,
        auth: BearerAuth | None = None,
    ) -> None:
        super().__init__(app, max_body_size, refusal=refusal)
        self.policy = policy
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The one decoding of the headers, left in the scope for the app (`read_headers`): the common request.
        headers = unique_headers(scope)
        if headers is not None:
            scope[HEADERS_SCOPE_KEY] = headers
            host, origin = headers.get("host"), headers.get("origin")
            length, authorization = _framed_length(headers), headers.get("authorization")
        elif (repeated := repeated_header(scope["headers"])) is not None:
            await _refuse_repeated(scope, send, repeated, self.refusal)
            return
        else:
            host, origin, declared, authorization = _repeated_headers(scope)
            length = _declared_length(declared)
        if length is None and ambiguous_framing(scope):  # first: whatever else is wrong, the connection closes
            await refuse_ambiguous_framing(scope, send, self.refusal)
            return
        refused = self.policy.check(scope.get("server"), host, origin)
        if refused is not None:
            await _refuse_host_or_origin(scope, send, refused, self.refusal)
        elif length is not None and length > self.max_body_size:
            await self._refuse(scope, send)
        elif (
            self.auth is not None
            and (pending := self.auth.check(scope, send, authorization)) is not None
            and (not await pending)
        ):
            return
        elif length is None:
            await self._streamed(scope, receive, send)
        else:
            # The server frames the body by Content-Length: the app can never read more than declared.
            await self.app(scope, receive, send)

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        """The answer `__call__` would give from the request's head alone, when it costs no state: a known
        caller's used-up limit (`BearerAuth.answer_early`), after the same Host/Origin and body-size checks
        `__call__` makes first. None for any other request, which then goes through `__call__`."""
        if self.auth is None or self.auth.refused_now is None:
            return None
        passing = self._passing(scope)
        if passing is None:
            return None
        return self.auth.answer_early(scope, passing[0].get("authorization"))

    def straight_through(self, scope: Scope, limit: int) -> dict[str, str] | None:
        """The headers of a request that `__call__` would hand to its app at once, as it is: no header repeated,
        the Host/Origin policy met, a body framed by a declared length within the limit and within the caller's
        own `limit`, and no authentication to wait for (left in the scope, as `__call__` leaves them). None for
        any other request, which `__call__` answers its own way."""
        if self.auth is not None:
            return None
        passing = self._passing(scope)
        if passing is None:
            return None
        headers, length = passing
        if length is None or length > limit:
            return None
        scope[HEADERS_SCOPE_KEY] = headers
        return headers

    def _passing(self, scope: Scope) -> tuple[dict[str, str], int | None] | None:
        """The headers and framed length of a request that none of `__call__`'s header checks refuses: no header
        repeated (`__call__` reads those its own way), the Host/Origin policy met, and no declared length over
        the limit. None for any other request."""
        headers = unique_headers(scope)
        if headers is None:
            return None
        if self.policy.check(scope.get("server"), headers.get("host"), headers.get("origin")) is not None:
            return None
        length = _framed_length(headers)
        if length is not None and length > self.max_body_size:
            return None
        return headers, length


def _declared_length(declared: str | None) -> int | None:
    """A `Content-Length` value as a number; None when there is none or it is not one (the server refuses it)."""
    return int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None


def _framed_length(headers: Mapping[str, str]) -> int | None:
    """The length a request's body is framed by: its `Content-Length` (`_declared_length`), or None when a
    `Transfer-Encoding` frames it instead. That one wins over Content-Length (RFC 9112 §6.3), and h11 hands an
    app both: a small declared length must not let a longer chunked body past the limit uncounted."""
    return None if "transfer-encoding" in headers else _declared_length(headers.get("content-length"))


def _repeated_headers(scope: Scope) -> tuple[str | None, str | None, str | None, str | None]:
    """Host, Origin, Content-Length and Authorization of a request that repeats some other header (Host and
    Authorization are never repeated here: `ONCE_ONLY_HEADERS`): the last Origin (as `HostOriginMiddleware`
    reads it) and the first Content-Length (as `BodyLimitMiddleware`), or None with a Transfer-Encoding
    (`_framed_length`)."""
    host = origin = declared = authorization = None
    chunked = False
    for name, value in scope["headers"]:
        if name == b"host":
            host = value.decode("latin-1")
        elif name == b"origin":
            origin = value.decode("latin-1")
        elif name == b"content-length":
            if declared is None:
                declared = value.decode("latin-1")
        elif name == b"authorization" and authorization is None:
            authorization = value.decode("latin-1")
        elif name == b"transfer-encoding":
            chunked = True
    return host, origin, None if chunked else declared, authorization


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

    The rule for both wrappers that authenticate: `BearerAuthMiddleware`, and `RequestChecksMiddleware` given
    one (the endpoint's hot path: the same answers without a wrapper of its own)."""

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
                if token is None:
                    return False
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

    def _admission(self, scope: Scope, send: Send, caller: Principal | None) -> Awaitable[bool] | None:
        scope[AUTH_SCOPE_KEY] = caller
        if self.admit is None:
            return None
        admission = self.admit(scope, caller)
        return None if admission is None else self._admitted(scope, send, admission)

    async def _verified(self, scope: Scope, send: Send, token: str | None) -> bool:
        """The slower look at a token `authenticate` did not know (`verify`), then the admission."""
        try:
            if token is None:
                raise AuthChallengeError(self.message)
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
    admin API's one token and small apps need."""

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

    async def verify(self, scope: Scope, token: str) -> Any:
        caller = await self.confirm(token) if self.confirm is not None else None
        if caller is None:
            raise AuthChallengeError(self.message)
        return caller


class BearerAuthMiddleware:
    """`BearerAuth` around an app: see there. `exempt` names requests that need no credentials (a public
    document, say)."""

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
        self.app = app
        self.exempt = exempt
        chosen = authenticator if hasattr(authenticator, "verify") else TokenTable(authenticator, message=message)
        self.auth = BearerAuth(cast(Authenticator, chosen), realm=realm, message=message, refusal=refusal, admit=admit,
                               rejection=rejection)  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        repeated = repeated_header(scope["headers"])
        if repeated is not None:
            await _refuse_repeated(scope, send, repeated, self.auth.refusal)
            return
        if await self.auth.admitted(scope, send, _authorization(scope)):
            await self.app(scope, receive, send)


def _authorization(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:  # inline, not `header()`: one call less on every request
        if name == b"authorization":
            return bytes(value)
    return None
