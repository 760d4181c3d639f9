"""`MCPEndpoint`: the Streamable HTTP transport (JSON responses) plus seed 002's plain HTTP pair.

Routes, relative to where the endpoint is mounted:

- `POST /`       MCP JSON-RPC (both eras; batches only for 2025-03-26), answered as JSON, or as an SSE stream
                 when the handler sends the client something first (`crank.mcp.streams`); DELETE is 405
                 (no session is stored), and so is GET unless the endpoint tells of list changes
                 (`changes`): then GET opens the 2025-11-25 stream that carries them.
- `GET /tools`   the plain pair's listing: `{"tools": [...]}`
- `POST /call`   the plain pair's call: `{"name": ..., "arguments": {...}}` -> a CallToolResult

The hot path touches raw ASGI only: no framework request objects, no per-request schema work.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal
from urllib.parse import parse_qsl

from crank import _json
from crank.exceptions import (
    ArgumentsRejectedError,
    AuthChallengeError,
    CatalogNotFoundError,
    CatalogUnauthorizedError,
    DependencyUnavailableError,
    InternalError,
    InvalidRequestError,
    LimitReachedError,
    RateLimitedError,
    RequestTooLargeError,
    RPCError,
    UnknownFormatError,
)
from crank.mcp.after_response import run_after_response, start_after_response
from crank.mcp.calls import InvalidArgumentsMode, authorize_call, authorize_request, call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.changes import (
    LIST_KINDS,
    ListChanges,
    TooManyListenersError,
    changed_since,
    list_changed_method,
    listener_owner,
    offer_tag,
    relay_changes,
)
from crank.mcp.formats import DEFAULT_FORMAT
from crank.mcp.protocol import (
    BATCH_PROTOCOL_VERSIONS,
    HANDSHAKE_PROTOCOL_VERSIONS,
    HEADER_MISMATCH,
    MODERN_PROTOCOL_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from crank.mcp.server import Exchange, MCPServer, RequestInfo, ServerInfo
from crank.mcp.streams import (
    DEFAULT_CLIENT_REQUEST_TIMEOUT,
    DEFAULT_MAX_PENDING_REQUESTS,
    Relay,
    ResponseStream,
    owner_of,
)
from crank.mcp.tools import CallContext
from crank.mcp.translations import negotiate_language
from crank.types import ASGIApp, JSONObject, Message, Receive, Scope, Send
from crank.wire.asgi import (
    DEFAULT_MAX_BODY_SIZE,
    JSON_CONTENT_TYPE_HEADER,
    EarlyAnswer,
    hold_long_stream,
    read_body,
    read_headers,
    send_response,
    serve_lifespan,
)
from crank.wire.auth import Authenticator, Principal, challenge_header
from crank.wire.http import accepts_json, is_json_media_type
from crank.wire.jsonrpc import (
    DEFAULT_MAX_BATCH_ANSWER_BYTES,
    DEFAULT_MAX_BATCH_ITEMS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RequestId,
    encode_error,
    gather_batch,
    id_of,
    request_envelope_error,
)
from crank.wire.middleware import (
    AUTH_SCOPE_KEY,
    Admission,
    BearerAuth,
    KnownRefusal,
    RequestChecksMiddleware,
    jsonrpc_refusal,
)
from crank.wire.security import HostOriginPolicy

__all__ = ["CatalogProvider", "MCPEndpoint"]

logger = logging.getLogger("crank.mcp")

CatalogProvider = Callable[[Scope], Awaitable[Catalog]]
"""Returns the catalog that serves a request (for example the published version of an agent)."""

UNAUTHORIZED_MESSAGE = "A valid API key is required: Authorization: Bearer <key>"
_ROUTING_HEADERS = frozenset({"mcp-protocol-version", "mcp-method", "mcp-name"})
_PLAIN_ROUTES = ("/tools", "/call")
_ID_TYPES = (str, int)
_COMMON_MAX_BODY = 64 * 1024
"""The largest body `_serve_common` reads: a larger one goes to the general path unread, so that a body it hands
on after reading (a batch, say) is never parsed twice at more than this size."""
_STREAMED = Exchange(0, None)
"""What `_mcp_post` returns once the answer went out on an SSE stream: nothing more to send."""


class _StreamEndedError(Exception):
    """A listening stream's catalog is no longer the caller's to see: the stream ends."""


class _NotJSONError(Exception):
    """A body that is not JSON (400); each route answers it in its own shape."""


class MCPEndpoint:
    """An ASGI app serving one catalog (or a provider of catalogs) over MCP Streamable HTTP.

    Parameters:
        catalog: a `Catalog`, or an async callable receiving the ASGI scope and returning one.
        server_info: name and version reported to clients.
        instructions: optional guidance for the model, sent on `initialize` and `server/discover`.
        default_format: result format when neither the request nor the tool chooses one.
        invalid_arguments: "result" (tool execution error, the default) or "error" (JSON-RPC -32602).
        max_body_size: requests with a larger body get 413.
        max_batch_items / max_batch_answer_bytes: a longer batch is refused whole (400, -32600); once its
            answers pass the byte limit, the items not started are answered -32600 and never run.
        dns_rebinding_protection: True, False, or None (on when the server socket is loopback).
        allowed_hosts / allowed_origins: accepted besides the loopback names and same-origin requests.
        cache_scope / ttl_ms: the 2026-07-28 caching hints on `tools/list` and `server/discover`.
        request_state_secret: signs the `requestState` of `InputRequired` results and the legacy session ids;
            give every replica the same one (default: a random secret per process).
        client_request_timeout: seconds a 2025-11-25 server request (`CallContext.elicit`, `sample`) waits for
            the client's answer POST before the call fails with `client_request_timeout`.
        max_pending_requests: server requests one process waits on at once; past it a question fails at once
            (`client_requests_busy`).
        relay: carries a client's answer POST that reaches this replica to the one that asked and waits for it
            (`crank.state.relay.RedisRelay` for replicas that share a Redis); without one, answers must come
            back to the process that asked.
        changes: tell clients when what a catalog offers changes (`crank.mcp.changes`): `listChanged` is declared,
            2025-11-25 clients get a GET stream and a session id, 2026-07-28 clients `subscriptions/listen`. The
            source that replaces catalogs calls `changes.changed`.
        plain_http: serve the plain `GET /tools` and `POST /call` pair beside the MCP endpoint.
        authenticator: when given, every request's bearer token goes through it (`crank.wire.auth`): a
            `Principal`, or 401/403 with a `WWW-Authenticate: Bearer` challenge (`BearerAuth`). The provider
            finds the principal in `scope["crank.auth"]`; `tools/list` shows a scope-limited principal only the
            tools whose `required_scopes` it holds, and `tools/call` of another is 403 `insufficient_scope`.
        metadata_url: the URL of the protected resource metadata (RFC 9728) of the request's resource, named
            in every challenge; None for endpoints that offer no OAuth.
        admit: gets each authenticated request (its scope and caller) before its body is read, and may refuse
            it with `RateLimitedError`: 429 with `Retry-After` (the gateway's workspace limits). Each item of a
            JSON-RPC batch after the first counts as one request more (`_admit_batch`).
        refused_now: the refusal `admit` would give, when it is known at once without counting (a used-up
            limit): what `answer_early` answers from a request's head.
        debug: put exception details in error data. Never in production.
    """

    def __init__(
        self,
        catalog: Catalog | CatalogProvider,
        *,
        server_info: ServerInfo | None = None,
        instructions: str | None = None,
        default_format: str = DEFAULT_FORMAT,
        invalid_arguments: InvalidArgumentsMode = "result",
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_batch_items: int = DEFAULT_MAX_BATCH_ITEMS,
        max_batch_answer_bytes: int = DEFAULT_MAX_BATCH_ANSWER_BYTES,
        dns_rebinding_protection: bool | None = None,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        cache_scope: Literal["public", "private"] = "public",
        ttl_ms: int = 0,
        request_state_secret: str | bytes | None = None,
        client_request_timeout: float = DEFAULT_CLIENT_REQUEST_TIMEOUT,
        max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS,
        relay: Relay | None = None,
        changes: ListChanges | None = None,
        plain_http: bool = True,
        authenticator: Authenticator | None = None,
        metadata_url: Callable[[Scope], str | None] | None = None,
        admit: Admission | None = None,
        refused_now: KnownRefusal | None = None,
        debug: bool = False,
    ) -> None:
        # A fixed catalog skips the provider call on the hot path.
        self._catalog = catalog if isinstance(catalog, Catalog) else None
        self._provider: CatalogProvider = _fixed(catalog) if isinstance(catalog, Catalog) else catalog
        self.server = MCPServer(
            server_info=server_info or ServerInfo(),
            instructions=instructions,
            default_format=default_format,
            invalid_arguments=invalid_arguments,
            cache_scope=cache_scope,
            ttl_ms=ttl_ms,
            request_state_secret=request_state_secret,
            client_request_timeout=client_request_timeout,
            max_pending_requests=max_pending_requests,
            relay=relay,
            debug=debug,
        )
        self._streams = self.server.streams
        self._changes = changes
        self.max_body_size = max_body_size
        self._admit = admit if authenticator is not None else None
        self.max_batch_items = max_batch_items
        self.max_batch_answer_bytes = max_batch_answer_bytes
        self.policy = HostOriginPolicy.build(dns_rebinding_protection, allowed_hosts, allowed_origins)
        self.plain_http = plain_http
        # The checks wrap the endpoint in one wrapper (one pass over the headers): Host/Origin, the body limit (a
        # body is refused by its declared length before anything reads it), then the credentials when the
        # endpoint needs them. A request that reaches `_serve` passed them all.
        auth = None
        if authenticator is not None:
            auth = BearerAuth(authenticator, realm="crank", message=UNAUTHORIZED_MESSAGE, refusal=_refusal,
                              admit=admit, rejection=_rejection, refused_now=refused_now,
                              metadata_url=metadata_url)  # fmt: skip
        self._auth = auth
        if changes is not None:  # a listening stream ends once its caller's credentials no longer hold
            self.server.offer_list_changes(changes, still_valid=auth.still_valid if auth is not None else None)
        self._checks = RequestChecksMiddleware(self._serve, self.policy, max_body_size, refusal=_refusal, auth=auth)
        self.http_app: ASGIApp = self._serve_common if auth is None and self._catalog is not None else self._checks
        """The endpoint for `http` scopes, checks included: an app that routes many requests here (the
        gateway) calls it directly, one coroutine level less per request than through `__call__`. It is
        `_serve_common` for an endpoint that authenticates no one and serves a fixed catalog, else the checks
        around `_serve`."""

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        """The 429 of a request whose caller's limit is known to be used up (`refused_now`), from its head alone
        (`crank.wire.asgi.EarlyAnswers`); None for any other request."""
        return self._checks.answer_early(scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.http_app(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(receive, send, shutdown=self.aclose)

    async def aclose(self) -> None:
        """Release what the endpoint holds open (listening streams, the answer relay's connections); an app that
        mounts the endpoint calls it at its own shutdown."""
        if self._changes is not None:
            self._changes.close_all()
        await self.server.streams.requests.aclose()

    async def _serve_common(self, scope: Scope, receive: Receive, send: Send) -> None:
        """`http_app` of an endpoint that authenticates no one and serves a fixed catalog (the in-process case).

        The common request, a JSON-RPC request POSTed to the endpoint's root with a declared length (at most
        `_COMMON_MAX_BODY`) and no query, is answered here in one coroutine, where `self._checks`, `_serve` and
        `_mcp_post` take three (docs/benchmarks.md). The wire's checks are theirs (`straight_through`), then
        `_serve`'s route and `_mcp_post`'s media types, body and envelope; a request that one of them would not
        let through as the common one goes to the general path unchanged, its body replayed once it was read.
        The protocol is `MCPServer.handle` on both paths, and a failure is answered by `_failure` on both.
        tests/mcp/test_http_common.py holds the two paths to the same answers."""
        # A body over _COMMON_MAX_BODY goes to the general path unread: it is parsed once, by `_mcp_post`.
        headers = self._checks.straight_through(scope, _COMMON_MAX_BODY)
        route: str = scope["path"]
        root = scope.get("root_path")
        if root and route.startswith(root):  # `_route`, inline on the hot path
            route = route[len(root) :]
        if (
            headers is None
            or scope["method"] != "POST"
            or scope.get("query_string")
            or route not in ("", "/")
            or not accepts_json(headers.get("accept"))
            or not is_json_media_type(headers.get("content-type"))
        ):
            await self._checks(scope, receive, send)
            return
        after = start_after_response()
        catalog = self._catalog
        assert catalog is not None  # `http_app` is this method only for a fixed catalog
        try:
            body = await read_body(receive)
        except Exception as exc:  # a failing `receive`: what `_serve` answers for any failure
            exchange = self._failure(scope, route, exc)
        else:
            try:
                message = _json.loads_bounded(body)
            except Exception:  # not JSON, too deep, or failing: answered by `_mcp_post`
                message = None
            if type(message) is not dict or not _is_plain_request(message):
                await self._checks(scope, _replaying(body, receive), send)
                return
            info = RequestInfo(headers, None, scope.get(AUTH_SCOPE_KEY), send, receive, self._streams, None, scope)
            try:  # as `_mcp_post` answers a plain request, and `_serve` its failure
                try:
                    exchange = await self.server.handle(message, catalog, info)
                except asyncio.CancelledError:
                    if not _closed_by_client(info, message):
                        raise
                    return
                if info.stream is not None:
                    await info.stream.finish(exchange.body)  # the answer ends the stream a handler opened
                    return
            except Exception as exc:
                exchange = self._failure(scope, route, exc)
        answer = exchange.body
        if answer is None:
            await send_response(send, exchange.status, b"", exchange.headers, content_type=None)
        else:  # as `_serve` sends it
            await send(_json_start(exchange, answer))
            await send({"type": "http.response.body", "body": answer})
        if after:
            await run_after_response(after)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        after = start_after_response()
        headers, duplicated = read_headers(scope, _ROUTING_HEADERS)  # as RequestChecksMiddleware decoded them
        route: str = scope["path"]
        root = scope.get("root_path")
        if root and route.startswith(root):  # `_route`, inline on the hot path
            route = route[len(root) :]
        method = scope["method"]
        try:
            if route in ("", "/"):
                if method == "POST":
                    exchange = await self._mcp_post(scope, receive, send, headers, duplicated)
                elif method == "GET" and self._changes is not None:
                    exchange = await self._listen(scope, receive, send, headers)
                else:
                    allow = b"GET, POST" if self._changes is not None else b"POST"
                    await send_response(send, 405, b"", [(b"allow", allow)], content_type=None)
                    return
                if exchange is _STREAMED:
                    return
            elif self.plain_http and route == "/tools":
                exchange = await self._plain_tools(scope, headers) if method == "GET" else _not_allowed("GET")
            elif self.plain_http and route == "/call":
                exchange = await self._plain_call(scope, receive, headers) if method == "POST" else _not_allowed("POST")
            else:
                exchange = Exchange(404, _json.dumps({"error": "Not found"}))
        except Exception as exc:
            exchange = self._failure(scope, route, exc)
        body = exchange.body
        if body is None:
            await send_response(send, exchange.status, b"", exchange.headers, content_type=None)
        else:  # `send_response`, inline: one coroutine less per answer (docs/benchmarks.md)
            await send(_json_start(exchange, body))
            await send({"type": "http.response.body", "body": body})
        if after:
            await run_after_response(after)

    def _failure(self, scope: Scope, route: str, exc: Exception) -> Exchange:
        """The answer to a request whose handling raised `exc` (`_serve` and `_serve_common`)."""
        if isinstance(exc, CatalogNotFoundError):  # the provider's sentence for the client, or the plain one
            return Exchange(404, _refusal(scope, 404, str(exc) or "No MCP endpoint at this path"))
        if isinstance(exc, CatalogUnauthorizedError):
            return self._challenge(scope, AuthChallengeError(UNAUTHORIZED_MESSAGE))
        if isinstance(exc, AuthChallengeError):  # a call that needs a token, or scopes the token lacks
            return self._challenge(scope, exc)
        if isinstance(exc, RequestTooLargeError):
            raise exc  # answered by RequestChecksMiddleware, around this app
        # A server fault is a JSON-RPC error with HTTP 200, as the official SDK sends it (seed 002 agrees for the
        # plain pair); the request id in its data is also in the log.
        error = self.server.internal_error(exc)
        if route in _PLAIN_ROUTES:
            return _plain_error(200, error.code, error.message, error.data)
        return _internal(None, error)

    def _challenge(self, scope: Scope, refused: AuthChallengeError) -> Exchange:
        """A 401 or 403 with its Bearer challenge, as the request's checks answer one."""
        if self._auth is not None:
            status, headers, body = self._auth.challenge(scope, refused)
            return Exchange(status, body, headers[1:])  # the content type is send_response's
        header = challenge_header(refused)
        return Exchange(refused.status, _refusal(scope, refused.status, refused.description),
                        [(b"www-authenticate", header)])  # fmt: skip

    # -- MCP ---------------------------------------------------------------------------------------

    async def _listen(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> Exchange:
        """2025-11-25's GET stream: the catalog's list changes (`crank.mcp.changes`), until the client leaves or the
        server shuts down. Event ids carry the lists' fingerprints, so a client that reconnects (`Last-Event-ID`)
        is told of exactly the lists that changed while it was away."""
        changes = self._changes
        assert changes is not None
        if "text/event-stream" not in headers.get("accept", ""):
            return _protocol_error(406, INVALID_REQUEST, "Accept must allow text/event-stream")
        catalog = self._catalog if self._catalog is not None else await self._provider(scope)
        owner = listener_owner(scope.get(AUTH_SCOPE_KEY), scope.get("client"))
        try:
            listener = changes.listen(catalog.identity, owner)
        except TooManyListenersError as busy:
            return Exchange(429, encode_error(None, busy), [(b"retry-after", b"30")])
        kinds = frozenset(LIST_KINDS)
        stream = ResponseStream(send, receive, cancel_on_close=True)
        stream.prefix = offer_tag(catalog.offers())  # what a resuming client sends back: see `changed_since`
        try:
            await stream.open()
            hold_long_stream(scope, owner[0])

            async def tell(kind: str) -> None:
                try:  # the agent as this caller sees it now: an agent no longer served ends the stream
                    latest = self._catalog if self._catalog is not None else await self._provider(scope)
                except Exception:
                    raise _StreamEndedError from None
                stream.prefix = offer_tag(latest.offers())
                await stream.message(_json.dumps({"jsonrpc": "2.0", "method": list_changed_method(kind)}))

            resumed = headers.get("last-event-id")
            with contextlib.suppress(_StreamEndedError):
                if resumed:
                    for kind in changed_since(resumed[:200], catalog.offers()):
                        await tell(kind)
                admitted = functools.partial(self._auth.still_valid, scope) if self._auth is not None else None
                await relay_changes(listener, kinds, tell, stream.comment, changes.heartbeat, admitted)
            await stream.finish(None)
        except asyncio.CancelledError:
            if not stream.closed_by_client:
                raise
        finally:
            changes.close(listener)
        return _STREAMED

    async def _mcp_post(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], duplicated: str | None
    ) -> Exchange:
        if not accepts_json(headers.get("accept")):
            return _protocol_error(406, INVALID_REQUEST, "Accept must allow application/json")
        if not is_json_media_type(headers.get("content-type")):
            return _protocol_error(415, INVALID_REQUEST, "Content-Type must be application/json")
        try:
            message = _parse_json(await read_body(receive))
        except _NotJSONError as bad:
            return _protocol_error(400, PARSE_ERROR, str(bad))
        except _json.JSONDepthError as deep:
            return _protocol_error(400, INVALID_REQUEST, f"Invalid request: {deep}")
        if duplicated is not None:
            return _protocol_error(400, HEADER_MISMATCH, f"{duplicated} header appears more than once")
        format_query = _format_query(scope) if scope.get("query_string") else None  # most requests have no query
        info = RequestInfo(headers, format_query, scope.get(AUTH_SCOPE_KEY), send, receive, self._streams, None, scope)
        try:
            catalog = self._catalog if self._catalog is not None else await self._provider(scope)
        except (CatalogNotFoundError, CatalogUnauthorizedError, AuthChallengeError):
            raise
        except Exception as exc:  # answered with the request's own id, so the client can match it
            return _internal(id_of(message), self.server.internal_error(exc))
        if isinstance(message, list):
            info.send = None  # a batch's items are answered together, as JSON: none can open a stream
            return await self._batch(scope, message, catalog, info)
        if not isinstance(message, dict):
            return _protocol_error(400, INVALID_REQUEST, "Invalid request: the body must be a JSON-RPC object")
        if not _is_plain_request(message):  # the common case is checked in one expression
            info.send = None  # a notification, a client's answer or an odd envelope: answered as JSON
            exchange = await self._single(message, catalog, info)
            return exchange or Exchange(202, None)
        # Awaited here, not in a helper: one coroutine level less per request (docs/benchmarks.md).
        try:
            exchange = await self.server.handle(message, catalog, info)
        except asyncio.CancelledError:
            if not _closed_by_client(info, message):
                raise
            return _STREAMED
        if info.stream is None:
            return exchange
        await info.stream.finish(exchange.body)  # the answer ends the stream a handler opened
        return _STREAMED

    async def _single(self, message: JSONObject, catalog: Catalog, info: RequestInfo) -> Exchange | None:
        """One message; None when it needs no answer (a notification or a client's response: 202)."""
        if "method" not in message and "id" in message and ("result" in message or "error" in message):
            if info.headers.get("mcp-protocol-version") in MODERN_PROTOCOL_VERSIONS:
                return _protocol_error(400, INVALID_REQUEST, "Clients must not send responses in 2026-07-28")
            # The answer to a question a tool asked on a stream: it counts only from the caller it was asked of.
            if not await self.server.streams.requests.answer(message, owner_of(info.caller)):
                logger.debug("a client's response to no waiting request (id %r)", message.get("id"))
            return None
        invalid = request_envelope_error(message)
        if invalid is not None:
            return Exchange(400, encode_error(message.get("id") if "id" in message else None, invalid))
        if "id" not in message:
            requested = info.headers.get("mcp-protocol-version")
            known = (
                requested is None or requested in MODERN_PROTOCOL_VERSIONS or requested in HANDSHAKE_PROTOCOL_VERSIONS
            )
            if not known:
                return _protocol_error(400, UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version: {requested}")
            return None
        return await self.server.handle(message, catalog, info)

    async def _batch(self, scope: Scope, messages: list[Any], catalog: Catalog, info: RequestInfo) -> Exchange:
        version = info.headers.get("mcp-protocol-version")
        if version is not None and version not in BATCH_PROTOCOL_VERSIONS:
            return _protocol_error(
                400, INVALID_REQUEST, "JSON-RPC batches are only allowed in protocol version 2025-03-26"
            )
        if not messages:
            return _protocol_error(400, INVALID_REQUEST, "Invalid request: empty batch")
        if len(messages) > self.max_batch_items:
            message = f"Invalid request: a batch may carry at most {self.max_batch_items} messages"
            return _protocol_error(400, INVALID_REQUEST, message)

        async def one(item: Any) -> bytes | None:
            if not isinstance(item, dict):
                return encode_error(None, InvalidRequestError("Invalid request: batch items must be objects"))
            if item.get("method") == "initialize":
                error = InvalidRequestError("initialize must not be part of a batch")
                return encode_error(id_of(item), error)
            exchange = await self._single(item, catalog, info)
            return exchange.body if exchange is not None else None

        if info.caller is not None:  # every item's authorization first: a refusal (401/403) answers the whole
            for item in messages:  # batch before any item has run, never after some took effect
                if isinstance(item, dict):
                    authorize_request(item.get("method"), item.get("params"), catalog, info.caller)
        admitted, refusal = await self._admit_batch(scope, info.caller, len(messages))
        answers = await gather_batch(
            messages[:admitted], one, size=len, refused=_batch_refusal, max_answer_bytes=self.max_batch_answer_bytes
        )
        if refusal is not None:  # the rest, never run; a notification or a client's response gets no answer, as ever
            answers += [_refused_item(item, refusal) for item in messages[admitted:] if _is_answered(item)]
        answers = [body for body in answers if body]
        if not answers:
            return Exchange(202, None)
        return Exchange(200, b"[" + b",".join(answers) + b"]")

    async def _admit_batch(self, scope: Scope, caller: Principal | None, items: int) -> tuple[int, RPCError | None]:
        """Each item after the first counts as one request more against `admit` (the first was counted with the
        HTTP request, before its body was read), so that a limit of N requests a second means N JSON-RPC
        requests, batched or not. Returns how many items may run, and the error the others are answered with
        once one was refused (the rest are not counted: a used-up limit refuses them all)."""
        if self._admit is None or caller is None:
            return items, None
        for index in range(1, items):
            pending = self._admit(scope, caller)
            if pending is None:
                continue
            try:
                await pending
            except RateLimitedError as limited:
                return index, limited
            except DependencyUnavailableError as unavailable:  # cannot count the item: not admitted
                return index, InternalError(unavailable.message, data={"retry_after": unavailable.retry_after})
        return items, None

    # -- the plain HTTP pair (seed 002) ------------------------------------------------------------

    async def _plain_tools(self, scope: Scope, headers: dict[str, str]) -> Exchange:
        catalog = self._catalog if self._catalog is not None else await self._provider(scope)
        catalog = catalog.listed_for(scope.get(AUTH_SCOPE_KEY))  # as `tools/list`: never a tool it cannot call
        language = negotiate_language(headers.get("accept-language"), catalog.languages, catalog.default_language)
        return Exchange(
            200, catalog.listing(language), [(b"content-language", language.encode()), (b"vary", b"Accept-Language")]
        )

    async def _plain_call(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> Exchange:
        try:
            request = _parse_json(await read_body(receive))
        except _NotJSONError as bad:
            return _plain_error(400, PARSE_ERROR, str(bad))
        except _json.JSONDepthError as deep:
            return _plain_error(400, INVALID_REQUEST, f"Invalid request: {deep}")
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            return _plain_error(400, INVALID_REQUEST, 'Invalid request: expected {"name": string, "arguments": object}')
        arguments = request.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _plain_error(400, INVALID_REQUEST, "Invalid request: arguments must be an object")
        catalog = self._catalog if self._catalog is not None else await self._provider(scope)
        entry = catalog.get(request["name"])
        if entry is None:
            return _plain_error(404, METHOD_NOT_FOUND, f"Unknown tool: {request['name']}")
        authorize_call(entry.tool, scope.get(AUTH_SCOPE_KEY), arguments)
        try:
            requested = self.server.requested_format(RequestInfo(headers, _format_query(scope)))
        except UnknownFormatError as exc:
            return _plain_error(400, INVALID_PARAMS, str(exc))
        context = CallContext(
            tool_name=entry.tool.name, protocol_version="plain", headers=headers, labels=catalog.labels,
            requested_format=requested, default_format=self.server.default_format, caller=scope.get(AUTH_SCOPE_KEY),
        )  # fmt: skip
        result_format = context.result_format(entry.tool.format)
        try:
            result = await call_tool(
                entry,
                arguments,
                context,
                result_format=result_format,
                invalid_arguments=self.server.invalid_arguments,
                debug=self.server.debug,
                observer=catalog.observer,
            )
        except ArgumentsRejectedError as exc:
            error = exc.as_invalid_params()
            return _plain_error(200, error.code, error.message, error.data)
        if result.get("isError") and result["content"] and result["content"][0].get("type") == "text":
            try:
                result["error"] = _json.loads(result["content"][0]["text"])
            except _json.JSONDecodeError:
                pass  # a tool's own error text that is not JSON: content alone says it
            else:
                return _plain_failure(result)
        return Exchange(200, _json.dumps(result))


def _json_start(exchange: Exchange, body: bytes) -> Message:
    """The start of a JSON answer: its length, its type, and the exchange's own headers."""
    head = [(b"content-length", b"%d" % len(body)), JSON_CONTENT_TYPE_HEADER]
    if exchange.headers:
        head.extend(exchange.headers)
    return {"type": "http.response.start", "status": exchange.status, "headers": head}


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for a request whose body was already read: that body first, then whatever comes next (the
    client leaving)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _closed_by_client(info: RequestInfo, message: JSONObject) -> bool:
    """2026-07-28: whether the cancellation is the client closing its stream (which cancels the call); if so,
    the task's cancellation is taken back, as nothing else asked for it, and the log says so."""
    task = asyncio.current_task()
    if info.stream is None or not info.stream.closed_by_client or task is None:
        return False
    task.uncancel()
    logger.info("call cancelled: the client closed its stream (method %s)", message.get("method"))
    return True


def _plain_failure(result: JSONObject) -> Exchange:
    """A failed call on the plain pair: 200, or 429 when a limit refused it; and `Retry-After` whenever the
    structured error says when to retry (`details.retry_after`: a limit, a busy or rate-limiting upstream)."""
    error = result["error"]
    details = error.get("details") if isinstance(error, dict) else None
    retry_after = details.get("retry_after") if isinstance(details, dict) else None
    if type(retry_after) is not int:
        return Exchange(200, _json.dumps(result))
    status = 429 if error.get("error_code") == LimitReachedError.default_code else 200
    return Exchange(status, _json.dumps(result), [(b"retry-after", str(retry_after).encode())])


def _fixed(catalog: Catalog) -> CatalogProvider:
    async def provide(scope: Scope) -> Catalog:
        return catalog

    return provide


def _not_allowed(allow: str) -> Exchange:
    """A plain-pair route asked with another HTTP method."""
    body = _plain_error_body(INVALID_REQUEST, f"Method not allowed: use {allow}")
    return Exchange(405, body, [(b"allow", allow.encode())])


def _internal(request_id: RequestId | None, error: RPCError) -> Exchange:
    return Exchange(200, encode_error(request_id, error))


def _protocol_error(status: int, code: int, message: str) -> Exchange:
    return Exchange(status, encode_error(None, RPCError(message, code=code)))


def _plain_error(status: int, code: int, message: str, data: Any = None) -> Exchange:
    return Exchange(status, _plain_error_body(code, message, data))


def _plain_error_body(code: int, message: str, data: Any = None) -> bytes:
    error = RPCError(message, code=code, data=data).to_wire()
    return _json.dumps({"isError": True, "error": error, "content": [{"type": "text", "text": message}]})


def _is_plain_request(message: JSONObject) -> bool:
    """A well-formed request with an id: what `request_envelope_error` accepts (its inline fast path, for the
    common case: anything else goes through that one rule)."""
    params = message.get("params")
    return (
        type(message.get("id")) in _ID_TYPES
        and type(message.get("method")) is str
        and message.get("jsonrpc") == "2.0"
        and (params is None or type(params) is dict)
    )


def _format_query(scope: Scope) -> str | None:
    query: bytes = scope.get("query_string", b"")
    if not query or query.find(b"format=") < 0:  # (`in` on bytes first tries an int and drops the error)
        return None
    return dict(parse_qsl(query.decode("latin-1"))).get("format")


def _parse_json(body: bytes) -> Any:
    try:
        return _json.loads_bounded(body)
    except _json.JSONDecodeError:
        raise _NotJSONError("Parse error: the body is not valid JSON") from None


def _is_answered(item: Any) -> bool:
    """Whether a batch item gets an answer: not a notification (a method without an id), nor a client's
    response (an id with a result or an error, no method)."""
    if not isinstance(item, dict):
        return True
    if "method" in item:
        return "id" in item
    return not ("id" in item and ("result" in item or "error" in item))


def _refused_item(item: Any, error: RPCError) -> bytes:
    """A batch item that is not run, answered with `error` and its id (when it has a valid one)."""
    return encode_error(id_of(item), error)


def _batch_refusal(item: Any, reason: str) -> bytes:
    return _refused_item(item, InvalidRequestError(f"Invalid request: {reason}"))


def _route(scope: Scope) -> str:
    """The path below where the endpoint is mounted."""
    route: str = scope["path"]
    root = scope.get("root_path")
    if root and route.startswith(root):
        route = route[len(root) :]
    return route


def _rejection(scope: Scope, error: RPCError) -> bytes:
    """A refusal with its own code and data (a workspace's rate limit) in the shape of its route."""
    if _route(scope) in _PLAIN_ROUTES:
        return _plain_error_body(error.code, error.message, error.data)
    return encode_error(None, error)


def _refusal(scope: Scope, status: int, message: str) -> bytes:
    """A refused request in the shape of its route: the plain pair's, or a JSON-RPC error."""
    if _route(scope) in _PLAIN_ROUTES:
        return _plain_error_body(INTERNAL_ERROR if status >= 500 else INVALID_REQUEST, message)
    return jsonrpc_refusal(scope, status, message)
