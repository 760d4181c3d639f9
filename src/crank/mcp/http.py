"""`MCPEndpoint`: the Streamable HTTP transport (JSON responses) plus seed 002's plain HTTP pair.

Routes, relative to where the endpoint is mounted:

- `POST /`       MCP JSON-RPC (both eras; batches only for 2025-03-26); GET and DELETE are 405 because
                 no server-to-client stream is offered (the server is stateless and answers JSON).
- `GET /tools`   the plain pair's listing: `{"tools": [...]}`
- `POST /call`   the plain pair's call: `{"name": ..., "arguments": {...}}` -> a CallToolResult

The hot path touches raw ASGI only: no framework request objects, no per-request schema work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import parse_qsl

from crank import _json
from crank.mcp.after_response import run_after_response, start_after_response
from crank.mcp.calls import ArgumentsRejectedError, InvalidArgumentsMode, call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.formats import DEFAULT_FORMAT, UnknownFormatError
from crank.mcp.jsonrpc import JSONRPCError, RequestId, encode_error, is_request_id, request_envelope_error
from crank.mcp.protocol import (
    BATCH_PROTOCOL_VERSIONS,
    HANDSHAKE_PROTOCOL_VERSIONS,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MODERN_PROTOCOL_VERSIONS,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from crank.mcp.security import HostOriginPolicy
from crank.mcp.server import Exchange, MCPServer, RequestInfo, ServerInfo
from crank.mcp.tools import CallContext
from crank.mcp.translations import negotiate_language
from crank.types import JSONObject, Receive, Scope, Send

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "CatalogNotFoundError",
    "CatalogProvider",
    "CatalogUnauthorizedError",
    "MCPEndpoint",
    "serve_lifespan",
]

logger = logging.getLogger("crank.mcp")

DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024
CatalogProvider = Callable[[Scope], Awaitable[Catalog]]
"""Returns the catalog that serves a request (for example the published version of an agent)."""

_ROUTING_HEADERS = frozenset({"mcp-protocol-version", "mcp-method", "mcp-name"})
_JSON = b"application/json"


class CatalogNotFoundError(LookupError):
    """Raised by a `CatalogProvider` when no endpoint exists at the requested path (404)."""


class CatalogUnauthorizedError(PermissionError):
    """Raised by a `CatalogProvider` when the request's credentials do not open this endpoint (401)."""


class _BadBodyError(Exception):
    """A body too large (413) or not JSON (400); each route answers it in its own shape."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class MCPEndpoint:
    """An ASGI app serving one catalog (or a provider of catalogs) over MCP Streamable HTTP.

    Parameters:
        catalog: a `Catalog`, or an async callable receiving the ASGI scope and returning one.
        server_info: name and version reported to clients.
        instructions: optional guidance for the model, sent on `initialize` and `server/discover`.
        default_format: result format when neither the request nor the tool chooses one.
        invalid_arguments: "result" (tool execution error, the default) or "error" (JSON-RPC -32602).
        max_body_size: requests with a larger body get 413.
        dns_rebinding_protection: True, False, or None (on when the server socket is loopback).
        allowed_hosts / allowed_origins: accepted besides the loopback names and same-origin requests.
        cache_scope / ttl_ms: the 2026-07-28 caching hints on `tools/list` and `server/discover`.
        request_state_secret: signs the `requestState` of `InputRequired` results; give every replica the
            same one (default: a random secret per process).
        plain_http: serve the plain `GET /tools` and `POST /call` pair beside the MCP endpoint.
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
        dns_rebinding_protection: bool | None = None,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        cache_scope: Literal["public", "private"] = "public",
        ttl_ms: int = 0,
        request_state_secret: str | bytes | None = None,
        plain_http: bool = True,
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
            debug=debug,
        )
        self.max_body_size = max_body_size
        self.policy = HostOriginPolicy.build(dns_rebinding_protection, allowed_hosts, allowed_origins)
        self.plain_http = plain_http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        after = start_after_response()
        headers, duplicated = _read_headers(scope)
        refused = self.policy.check(scope.get("server"), headers.get("host"), headers.get("origin"))
        if refused is not None:
            await _send(send, refused, _json.dumps({"error": "Forbidden host or origin"}))
            return
        route = scope["path"]
        root = scope.get("root_path")
        if root and route.startswith(root):
            route = route[len(root) :]
        method = scope["method"]
        try:
            if route in ("", "/"):
                if method != "POST":
                    await _send(send, 405, b"", [(b"allow", b"POST")], content_type=None)
                    return
                exchange = await self._mcp_post(scope, receive, headers, duplicated)
            elif self.plain_http and route == "/tools":
                exchange = await self._plain_tools(scope, headers) if method == "GET" else _not_allowed(b"GET")
            elif self.plain_http and route == "/call":
                exchange = (
                    await self._plain_call(scope, receive, headers) if method == "POST" else _not_allowed(b"POST")
                )
            else:
                exchange = Exchange(404, _json.dumps({"error": "Not found"}))
        except CatalogNotFoundError:
            exchange = Exchange(404, encode_error(None, JSONRPCError(INVALID_REQUEST, "No MCP endpoint at this path")))
        except CatalogUnauthorizedError:
            error = JSONRPCError(INVALID_REQUEST, "A valid API key is required: Authorization: Bearer <key>")
            exchange = Exchange(401, encode_error(None, error), [(b"www-authenticate", b'Bearer realm="crank"')])
        except Exception as exc:
            # A server fault is a JSON-RPC error with HTTP 200, as the official SDK sends it (seed 002 agrees
            # for the plain pair); the request id in its data is also in the log.
            error = self.server.internal_error(exc)
            plain = route in ("/tools", "/call")
            exchange = _plain_error(200, error.code, error.message, error.data) if plain else _internal(None, error)
        if exchange.body is None:
            await _send(send, exchange.status, b"", exchange.headers, content_type=None)
        else:
            await _send(send, exchange.status, exchange.body, exchange.headers)
        if after:
            await run_after_response(after)

    # -- MCP ---------------------------------------------------------------------------------------

    async def _mcp_post(
        self, scope: Scope, receive: Receive, headers: dict[str, str], duplicated: str | None
    ) -> Exchange:
        if not _accepts_json(headers.get("accept")):
            return _protocol_error(406, INVALID_REQUEST, "Accept must allow application/json")
        if not _is_json(headers.get("content-type")):
            return _protocol_error(415, INVALID_REQUEST, "Content-Type must be application/json")
        try:
            message = await _read_json(scope, receive, headers, self.max_body_size)
        except _BadBodyError as bad:
            return _protocol_error(bad.status, bad.code, str(bad))
        if duplicated is not None:
            return _protocol_error(400, HEADER_MISMATCH, f"{duplicated} header appears more than once")
        info = RequestInfo(headers, _format_query(scope))
        try:
            catalog = self._catalog if self._catalog is not None else await self._provider(scope)
        except (CatalogNotFoundError, CatalogUnauthorizedError):
            raise
        except Exception as exc:  # answered with the request's own id, so the client can match it
            request_id = message.get("id") if isinstance(message, dict) and is_request_id(message.get("id")) else None
            return _internal(request_id, self.server.internal_error(exc))
        if isinstance(message, list):
            return await self._batch(message, catalog, info)
        if not isinstance(message, dict):
            return _protocol_error(400, INVALID_REQUEST, "Invalid request: the body must be a JSON-RPC object")
        if _is_plain_request(message):  # the common case, checked in one expression
            return await self.server.handle(message, catalog, info)
        exchange = await self._single(message, catalog, info)
        return exchange or Exchange(202, None)

    async def _single(self, message: JSONObject, catalog: Catalog, info: RequestInfo) -> Exchange | None:
        """One message; None when it needs no answer (a notification or a client's response: 202)."""
        if "method" not in message and "id" in message and ("result" in message or "error" in message):
            if info.headers.get("mcp-protocol-version") in MODERN_PROTOCOL_VERSIONS:
                return _protocol_error(400, INVALID_REQUEST, "Clients must not send responses in 2026-07-28")
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

    async def _batch(self, messages: list[Any], catalog: Catalog, info: RequestInfo) -> Exchange:
        version = info.headers.get("mcp-protocol-version")
        if version is not None and version not in BATCH_PROTOCOL_VERSIONS:
            return _protocol_error(
                400, INVALID_REQUEST, "JSON-RPC batches are only allowed in protocol version 2025-03-26"
            )
        if not messages:
            return _protocol_error(400, INVALID_REQUEST, "Invalid request: empty batch")

        async def one(item: Any) -> bytes | None:
            if not isinstance(item, dict):
                return encode_error(None, JSONRPCError(INVALID_REQUEST, "Invalid request: batch items must be objects"))
            if item.get("method") == "initialize":
                error = JSONRPCError(INVALID_REQUEST, "initialize must not be part of a batch")
                return encode_error(item.get("id"), error)
            exchange = await self._single(item, catalog, info)
            return exchange.body if exchange is not None else None

        answers = [body for body in await asyncio.gather(*(one(item) for item in messages)) if body]
        if not answers:
            return Exchange(202, None)
        return Exchange(200, b"[" + b",".join(answers) + b"]")

    # -- the plain HTTP pair (seed 002) ------------------------------------------------------------

    async def _plain_tools(self, scope: Scope, headers: dict[str, str]) -> Exchange:
        catalog = self._catalog if self._catalog is not None else await self._provider(scope)
        language = negotiate_language(headers.get("accept-language"), catalog.languages, catalog.default_language)
        return Exchange(
            200, catalog.listing(language), [(b"content-language", language.encode()), (b"vary", b"Accept-Language")]
        )

    async def _plain_call(self, scope: Scope, receive: Receive, headers: dict[str, str]) -> Exchange:
        try:
            request = await _read_json(scope, receive, headers, self.max_body_size)
        except _BadBodyError as bad:
            return _plain_error(bad.status, bad.code, str(bad))
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
        try:
            result_format = self.server.result_format(RequestInfo(headers, _format_query(scope)), entry.tool.format)
        except UnknownFormatError as exc:
            return _plain_error(400, INVALID_PARAMS, str(exc))
        context = CallContext(
            tool_name=entry.tool.name, protocol_version="plain", headers=headers, labels=catalog.labels
        )
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
            data = {"violations": [violation.to_wire() for violation in exc.violations]}
            return _plain_error(200, INVALID_PARAMS, str(exc), data)
        if result.get("isError") and result["content"] and result["content"][0].get("type") == "text":
            try:
                result["error"] = _json.loads(result["content"][0]["text"])
            except _json.JSONDecodeError:
                pass  # a tool's own error text that is not JSON: content alone says it
        return Exchange(200, _json.dumps(result))


def _fixed(catalog: Catalog) -> CatalogProvider:
    async def provide(scope: Scope) -> Catalog:
        return catalog

    return provide


def _not_allowed(allow: bytes) -> Exchange:
    return Exchange(405, b"", [(b"allow", allow)])


def _internal(request_id: RequestId | None, error: JSONRPCError) -> Exchange:
    return Exchange(200, encode_error(request_id, error))


def _protocol_error(status: int, code: int, message: str) -> Exchange:
    return Exchange(status, encode_error(None, JSONRPCError(code, message)))


def _plain_error(status: int, code: int, message: str, data: Any = None) -> Exchange:
    error: JSONObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = {"isError": True, "error": error, "content": [{"type": "text", "text": message}]}
    return Exchange(status, _json.dumps(body))


def _is_plain_request(message: JSONObject) -> bool:
    """A well-formed request with an id: what `request_envelope_error` accepts, without building errors."""
    request_id = message.get("id")
    params = message.get("params")
    return (
        type(request_id) in (str, int)
        and type(message.get("method")) is str
        and message.get("jsonrpc") == "2.0"
        and (params is None or type(params) is dict)
    )


def _read_headers(scope: Scope) -> tuple[dict[str, str], str | None]:
    """Headers as a dict (ASGI names are lowercase), and the name of a routing header sent twice, if any."""
    raw = scope["headers"]
    try:
        # UTF-8 first: it is the faster codec here and agrees with latin-1 on the ASCII that headers carry.
        headers = {name.decode(): value.decode() for name, value in raw}
    except UnicodeDecodeError:
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in raw}
    if len(headers) == len(raw):
        return headers, None
    # Rare: a repeated header. Join the values as HTTP does, and note a repeated routing header.
    headers = {}
    duplicated: str | None = None
    for raw_name, raw_value in raw:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name in headers:
            duplicated = name if name in _ROUTING_HEADERS else duplicated
            headers[name] = headers[name] + ", " + value
        else:
            headers[name] = value
    return headers, duplicated


def _format_query(scope: Scope) -> str | None:
    query: bytes = scope.get("query_string", b"")
    if not query or b"format=" not in query:
        return None
    return dict(parse_qsl(query.decode("latin-1"))).get("format")


@lru_cache(maxsize=256)
def _accepts_json(accept: str | None) -> bool:
    # A missing Accept is taken as "anything"; a present one must allow JSON.
    if accept is None:
        return True
    for item in accept.split(","):
        media = item.split(";", 1)[0].strip().lower()
        if media in ("application/json", "application/*", "*/*"):
            return True
    return False


def _is_json(content_type: str | None) -> bool:
    if content_type == "application/json":
        return True
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json"


async def _read_json(scope: Scope, receive: Receive, headers: dict[str, str], limit: int) -> Any:
    body = await _read_body(scope, receive, headers, limit)
    try:
        return _json.loads(body)
    except _json.JSONDecodeError:
        raise _BadBodyError(400, PARSE_ERROR, "Parse error: the body is not valid JSON") from None


async def _read_body(scope: Scope, receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BadBodyError(413, INVALID_REQUEST, f"Request body exceeds {limit} bytes")
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):  # the whole body at once
        body: bytes = message.get("body", b"")
        if len(body) > limit:
            raise _BadBodyError(413, INVALID_REQUEST, f"Request body exceeds {limit} bytes")
        return body
    chunks: list[bytes] = []
    size = 0
    while True:
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BadBodyError(413, INVALID_REQUEST, f"Request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
        message = await receive()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send(
    send: Send,
    status: int,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    content_type: bytes | None = _JSON,
) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_lifespan(
    receive: Receive,
    send: Send,
    *,
    startup: Callable[[], None] | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Answer an ASGI lifespan scope, running `startup` and `shutdown` (if any) at their messages."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if startup is not None:
                startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if shutdown is not None:
                await shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
