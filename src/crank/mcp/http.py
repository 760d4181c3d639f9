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
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from crank import _json, tracing
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
from crank.mcp.calls import authorize_call, authorize_request, call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.changes import (
    LIST_KINDS,
    TooManyListenersError,
    changed_since,
    list_changed_method,
    listener_owner,
    offer_tag,
    relay_changes,
)
from crank.mcp.endpoint_options import EndpointAccess, EndpointOptions
from crank.mcp.protocol import (
    BATCH_PROTOCOL_VERSIONS,
    HANDSHAKE_PROTOCOL_VERSIONS,
    HEADER_MISMATCH,
    MODERN_PROTOCOL_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from crank.mcp.server import Exchange, MCPServer, RequestInfo
from crank.mcp.streams import (
    ResponseStream,
    owner_of,
)
from crank.mcp.tools import CallContext
from crank.mcp.translations import negotiate_language
from crank.types import ASGIApp, JSONObject, JSONValue, Receive, Scope, Send
from crank.wire.asgi import (
    EarlyAnswer,
    hold_long_stream,
    read_body,
    send_response,
    serve_lifespan,
)
from crank.wire.auth import Principal, challenge_header
from crank.wire.checks import Passed, body_too_large_message, json_exchange_refusal
from crank.wire.jsonrpc import (
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
from crank.wire.middleware import AUTH_SCOPE_KEY, BearerAuth, RequestGate, jsonrpc_refusal
from crank.wire.security import HostOriginPolicy

__all__ = ["CatalogProvider", "MCPEndpoint"]

logger = logging.getLogger("crank.mcp")

CatalogProvider = Callable[[Scope], Catalog | Awaitable[Catalog]]
"""Returns the catalog that serves a request (for example the published version of an agent): at once when it has
it at hand, else an awaitable of it."""

UNAUTHORIZED_MESSAGE = "A valid API key is required: Authorization: Bearer <key>"
_ROUTING_HEADERS = frozenset({"mcp-protocol-version", "mcp-method", "mcp-name"})
_PLAIN_ROUTES = ("/tools", "/call")
_ID_TYPES = (str, int)
_STREAMED = Exchange(0, None)
"""What `_mcp_post` returns once the answer went out on an SSE stream: nothing more to send."""


class _StreamEndedError(Exception):
    """A listening stream's catalog is no longer the caller's to see: the stream ends."""


class _BadBodyError(Exception):
    """A body that is not JSON, or too deep (400), with its JSON-RPC code; each route answers it in its own shape."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class MCPEndpoint:
    """An ASGI app serving one catalog (or a provider of catalogs) over MCP Streamable HTTP.

    Parameters:
        catalog: a `Catalog`, or a callable receiving the ASGI scope and returning one, or an awaitable of one
            (`CatalogProvider`: the published version of an agent, say). A provider answers no endpoint here with
            `CatalogNotFoundError` (404), missing credentials with `CatalogUnauthorizedError` (401), and a catalog it
            cannot give now with `DependencyUnavailableError` (503 with its `Retry-After`).
        options: how it serves (`EndpointOptions`: limits, formats, hosts, streams).
        access: what a request must prove and pass (`EndpointAccess`: authentication, admission and limits);
            None serves anyone.

    Every http request takes one path (`_serve`): the request checks (`crank.wire.middleware.RequestGate`, whose
    order is `crank.wire.checks`'), then the route. The common request is fast because that path is short.
    """

    def __init__(
        self,
        catalog: Catalog | CatalogProvider,
        options: EndpointOptions | None = None,
        access: EndpointAccess | None = None,
    ) -> None:
        options = options if options is not None else EndpointOptions()
        self.options = options
        self._provider: CatalogProvider = _fixed(catalog) if isinstance(catalog, Catalog) else catalog
        self.server = MCPServer(
            server_info=options.server_info,
            instructions=options.instructions,
            default_format=options.default_format,
            invalid_arguments=options.invalid_arguments,
            cache_scope=options.cache_scope,
            ttl_ms=options.ttl_ms,
            request_state_secret=options.request_state_secret,
            client_request_timeout=options.client_request_timeout,
            max_pending_requests=options.max_pending_requests,
            relay=options.relay,
            debug=options.debug,
        )
        self._streams = self.server.streams
        self._changes = options.changes
        self._admit = access.admit if access is not None else None
        self.policy = HostOriginPolicy.build(
            options.dns_rebinding_protection, options.allowed_hosts, options.allowed_origins
        )
        auth = None
        if access is not None:
            auth = BearerAuth(access.authenticator, realm="crank", message=UNAUTHORIZED_MESSAGE, refusal=_refusal,
                              admit=access.admit, rejection=_rejection, refused_now=access.refused_now,
                              metadata_url=access.metadata_url)  # fmt: skip
        self._auth = auth
        if options.changes is not None:  # a listening stream ends once its caller's credentials no longer hold
            still_valid = auth.still_valid if auth is not None else None
            self.server.offer_list_changes(options.changes, still_valid=still_valid)
        self._gate = RequestGate(self.policy, options.max_body_size, refusal=_refusal, auth=auth)
        self._tracer = tracing.tracer()  # None unless the OTEL_* variables turn traces on (crank.tracing)
        self.http_app: ASGIApp = self._serve
        """The endpoint for `http` scopes: an app that routes many requests here (the gateway) calls it directly,
        one coroutine level less per request than through `__call__`."""

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        """The 429 of a request whose caller's limit is known to be used up (`refused_now`), from its head alone
        (`crank.wire.asgi.EarlyAnswers`); None for any other request."""
        return self._gate.answer_early(scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._serve(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(receive, send, shutdown=self.aclose)

    async def aclose(self) -> None:
        """Release what the endpoint holds open (listening streams, the answer relay's connections); an app that
        mounts the endpoint calls it at its own shutdown."""
        if self._changes is not None:
            self._changes.close_all()
        await self.server.streams.requests.aclose()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every http request: its checks, then its route, then its answer."""
        entered = self._gate.enter(scope, send)
        checked = entered if isinstance(entered, Passed) else await entered
        if checked is None:  # refused, and answered
            return
        if checked.length is None:  # a streamed body: the gate counts it as it is read
            receive = self._gate.receive_for(checked, receive)
        after = start_after_response()
        route = _route(scope)
        method = scope["method"]
        try:
            if route in ("", "/"):
                if method == "POST":
                    exchange = await self._mcp_post(scope, receive, send, checked)
                elif method == "GET" and self._changes is not None:
                    exchange = await self._listen(scope, receive, send, checked.headers)
                else:
                    allow = b"GET, POST" if self._changes is not None else b"POST"
                    exchange = Exchange(405, None, [(b"allow", allow)])
                if exchange is _STREAMED:
                    return
            elif self.options.plain_http and route == "/tools":
                exchange = await self._plain_tools(scope, checked.headers) if method == "GET" else _not_allowed("GET")
            elif self.options.plain_http and route == "/call":
                posted = method == "POST"
                exchange = await self._plain_call(scope, receive, checked.headers) if posted else _not_allowed("POST")
            else:
                exchange = Exchange(404, _json.dumps({"error": "Not found"}))
        except Exception as exc:
            exchange = self._failure(scope, route, exc)
        body = exchange.body
        if body is None:
            await send_response(send, exchange.status, b"", exchange.headers, content_type=None)
        else:
            await send_response(send, exchange.status, body, exchange.headers)
        if after:
            await run_after_response(after)

    async def _catalog(self, scope: Scope) -> Catalog:
        """The catalog that serves the request: the provider's answer, awaited when it is not at hand."""
        catalog = self._provider(scope)
        return catalog if isinstance(catalog, Catalog) else await catalog

    def _failure(self, scope: Scope, route: str, exc: Exception) -> Exchange:
        """The answer to a request whose handling raised `exc`."""
        if isinstance(exc, CatalogNotFoundError):  # the provider's sentence for the client, or the plain one
            return Exchange(404, _refusal(scope, 404, str(exc) or "No MCP endpoint at this path"))
        if isinstance(exc, CatalogUnauthorizedError):
            return self._challenge(scope, AuthChallengeError(UNAUTHORIZED_MESSAGE))
        if isinstance(exc, AuthChallengeError):  # a call that needs a token, or scopes the token lacks
            return self._challenge(scope, exc)
        if isinstance(exc, RequestTooLargeError):  # a streamed body past the limit (`RequestGate.receive_for`)
            return Exchange(413, _refusal(scope, 413, body_too_large_message(exc.limit)))
        if isinstance(exc, DependencyUnavailableError):  # the provider cannot answer now (a registry, a budget)
            retry = [(b"retry-after", str(exc.retry_after).encode())]
            return Exchange(503, _refusal(scope, 503, exc.message), retry)
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
        catalog = await self._catalog(scope)
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
                    latest = await self._catalog(scope)
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

    async def _mcp_post(self, scope: Scope, receive: Receive, send: Send, checked: Passed) -> Exchange:
        headers = checked.headers
        refused = json_exchange_refusal(headers)
        if refused is not None:
            return _protocol_error(refused.status, INVALID_REQUEST, refused.message)
        try:
            message = _parse_json(await read_body(receive))
        except _BadBodyError as bad:
            return _protocol_error(400, bad.code, str(bad))
        if checked.repeated and (duplicated := _ROUTING_HEADERS & checked.repeated):
            return _protocol_error(400, HEADER_MISMATCH, f"{min(duplicated)} header appears more than once")
        format_query = _format_query(scope) if scope.get("query_string") else None  # most requests have no query
        info = RequestInfo(headers, format_query, scope.get(AUTH_SCOPE_KEY), send, receive, self._streams, None, scope)
        try:
            # `_catalog` without its coroutine: 1.0k instructions a gateway request (docs/benchmarks.md, issue 38)
            catalog = self._provider(scope)
            if not isinstance(catalog, Catalog):
                catalog = await catalog
        except (CatalogNotFoundError, CatalogUnauthorizedError, AuthChallengeError, DependencyUnavailableError):
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
        if self._tracer is not None:  # tracing off: this test is all it costs
            return await self._traced(message, catalog, info)
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

    async def _traced(self, message: JSONObject, catalog: Catalog, info: RequestInfo) -> Exchange:
        """A request as `_mcp_post` answers it, inside its server span (crank.tracing)."""
        assert self._tracer is not None
        headers = info.headers
        known = self.server.serves(message.get("method"))
        version = headers.get("mcp-protocol-version")
        with tracing.server_span(self._tracer, message, headers, version, known=known) as span:
            try:
                exchange = await self.server.handle(message, catalog, info)
            except asyncio.CancelledError:
                if not _closed_by_client(info, message):
                    raise
                tracing.mark_error(span, "cancelled")
                return _STREAMED
            error = _error_type(exchange.body)
            if error is not None:
                tracing.mark_error(span, error)
            if info.stream is None:
                return exchange
            await info.stream.finish(exchange.body)
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
        if len(messages) > self.options.max_batch_items:
            message = f"Invalid request: a batch may carry at most {self.options.max_batch_items} messages"
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
        most = self.options.max_batch_answer_bytes
        answers = await gather_batch(messages[:admitted], one, size=len, refused=_batch_refusal, max_answer_bytes=most)
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
        catalog = await self._catalog(scope)
        catalog = catalog.listed_for(scope.get(AUTH_SCOPE_KEY))  # as `tools/list`: never a tool it cannot call
        language = negotiate_language(headers.get("accept-language"), catalog.languages, catalog.default_language)
        return Exchange(
            200, catalog.listing(language), [(b"content-language", language.encode()), (b"vary", b"Accept-Language")]
        )

    async def _plain_call(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> Exchange:
        try:
            request = _parse_json(await read_body(receive))
        except _BadBodyError as bad:
            return _plain_error(400, bad.code, str(bad))
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            return _plain_error(400, INVALID_REQUEST, 'Invalid request: expected {"name": string, "arguments": object}')
        arguments = request.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _plain_error(400, INVALID_REQUEST, "Invalid request: arguments must be an object")
        catalog = await self._catalog(scope)
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
        # The plain pair's call is a `tools/call` for traces too (its parent from the HTTP headers).
        plain = {"method": "tools/call", "params": {"name": entry.tool.name}}
        active_tracer = self._tracer
        span = tracing.server_span(active_tracer, plain, headers, None) if active_tracer else contextlib.nullcontext()
        try:
            with span as active:
                result = await call_tool(
                    entry,
                    arguments,
                    context,
                    result_format=result_format,
                    invalid_arguments=self.server.invalid_arguments,
                    debug=self.server.debug,
                    observer=catalog.observer,
                )
                if active is not None and result.get("isError") is True:
                    tracing.mark_error(active, "tool_error")
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
    def provide(scope: Scope) -> Catalog:
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
    """A well-formed request with an id: the common message, answered by `MCPServer.handle` at once (anything
    else goes through `_single`, whose envelope rule is `request_envelope_error`'s)."""
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


def _parse_json(body: bytes) -> JSONValue:
    try:
        return _json.loads_bounded(body)
    except _json.JSONDecodeError:
        raise _BadBodyError(PARSE_ERROR, "Parse error: the body is not valid JSON") from None
    except _json.JSONDepthError as deep:
        raise _BadBodyError(INVALID_REQUEST, f"Invalid request: {deep}") from None


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


def _error_type(body: bytes | None) -> str | None:
    """What a traced answer says went wrong: the JSON-RPC error's code, `tool_error` for a tool's `isError`
    result, or None (read only when tracing is on). An error answer is small and read whole; a result is only
    searched, never parsed again."""
    if not body:
        return None
    if body.startswith(b'{"jsonrpc":"2.0"') and b'"error":{' in body[:200]:
        try:
            error = _json.loads(body).get("error")
        except (ValueError, AttributeError):
            return None
        return str(error.get("code")) if isinstance(error, dict) else None
    return "tool_error" if b'"isError":true' in body else None
