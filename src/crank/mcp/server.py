"""The MCP protocol over one catalog, both eras, chosen per request; no transport in here.

Legacy era (2024-11-05 .. 2025-11-25): `initialize`, `notifications/initialized`, `ping`, `tools/list`,
`tools/call`. Modern era (2026-07-28): stateless, `server/discover`, version and client capabilities
in `_meta`, routing headers checked against the body, `resultType` on every result.
The server keeps no session: any replica can answer any request.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from crank import __version__, _json
from crank.exceptions import (
    ArgumentsRejectedError,
    AuthChallengeError,
    InternalError,
    InvalidCursorError,
    InvalidParamsError,
    InvalidRequestStateError,
    MethodNotFoundError,
    RPCError,
    UnknownFormatError,
)
from crank.ids import new_request_id
from crank.mcp.calls import InvalidArgumentsMode, authorize_call, call_tool
from crank.mcp.catalog import Catalog, CatalogEntry
from crank.mcp.formats import DEFAULT_FORMAT, check_format
from crank.mcp.headers import decode_header_value, param_header_mismatch
from crank.mcp.input_required import CAPABILITY_OF_METHOD, InputRequired, RequestStateSigner
from crank.mcp.protocol import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    HANDSHAKE_PROTOCOL_VERSIONS,
    HEADER_MISMATCH,
    LATEST_HANDSHAKE_VERSION,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from crank.mcp.tools import CallContext
from crank.mcp.translations import negotiate_language
from crank.types import JSONObject
from crank.wire.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RequestId,
    encode_error,
    encode_result,
)

__all__ = ["Exchange", "MCPServer", "RequestInfo", "ServerInfo"]

logger = logging.getLogger("crank.mcp")

_ALL_VERSIONS = [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS]
_MODERN_METHODS = frozenset({"server/discover", "tools/list", "tools/call"})
_LEGACY_METHODS = frozenset({"initialize", "ping", "tools/list", "tools/call"})
# 2026-07-28 transports: the HTTP status of each protocol error code; anything else is 200.
_MODERN_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


@dataclass(frozen=True)
class ServerInfo:
    """What `initialize` and `server/discover` report as `serverInfo`: Crank's own version unless given."""

    name: str = "crank"
    version: str = __version__
    title: str | None = None

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {"name": self.name, "version": self.version}
        if self.title is not None:
            wire["title"] = self.title
        return wire


@dataclass(slots=True)
class RequestInfo:
    """What the transport learned from the HTTP request, beyond the JSON-RPC body."""

    headers: Mapping[str, str] = field(default_factory=dict)
    format_query: str | None = None
    caller: Any = None
    """Who calls (`authenticate`'s answer, `scope["crank.auth"]`); passed on to each call's `CallContext`."""


@dataclass(slots=True)
class Exchange:
    """The answer to one message: HTTP status, body (None for 202) and extra response headers."""

    status: int
    body: bytes | None
    headers: Sequence[tuple[bytes, bytes]] = ()


class MCPServer:
    """Answers MCP JSON-RPC messages for one catalog."""

    def __init__(
        self,
        *,
        server_info: ServerInfo,
        instructions: str | None = None,
        default_format: str = DEFAULT_FORMAT,
        invalid_arguments: InvalidArgumentsMode = "result",
        cache_scope: Literal["public", "private"] = "public",
        ttl_ms: int = 0,
        request_state_secret: str | bytes | None = None,
        debug: bool = False,
    ) -> None:
        self.server_info = server_info
        self.instructions = instructions
        self.default_format = check_format(default_format, "the endpoint's default_format")
        self.invalid_arguments: InvalidArgumentsMode = invalid_arguments
        self.cache_scope = cache_scope
        self.ttl_ms = ttl_ms
        self.debug = debug
        self.signer = RequestStateSigner(request_state_secret)
        self._server_info_wire = server_info.to_wire()
        self._stamp = {SERVER_INFO_META_KEY: self._server_info_wire}
        # What this server adds to a 2026-07-28 `tools/list` page: part of the key of the answers it keeps.
        self._modern_list_tail = _json.dumps([ttl_ms, cache_scope, self._stamp])

    async def handle(self, message: JSONObject, catalog: Catalog, info: RequestInfo) -> Exchange:
        """Answer one request (a dict with an `id`) whose envelope is already known to be valid."""
        request_id: RequestId = message["id"]
        method: str = message["method"]
        params: JSONObject = message.get("params") or {}
        try:
            version = self._era(method, params, info.headers)
            modern = version in MODERN_PROTOCOL_VERSIONS
            if method not in (_MODERN_METHODS if modern else _LEGACY_METHODS):
                raise MethodNotFoundError(f"Method not found: {method}")
            if method == "tools/call":
                # The call is awaited here, not in a helper coroutine: one await level less per call.
                entry, arguments, context, result_format = self._prepare_call(params, version, catalog, info)
                try:
                    result = await call_tool(
                        entry,
                        arguments,
                        context,
                        result_format=result_format,
                        invalid_arguments=self.invalid_arguments,
                        debug=self.debug,
                        on_input_required=self._input_required if modern else None,
                        observer=catalog.observer,
                    )
                except ArgumentsRejectedError as exc:
                    raise exc.as_invalid_params() from None
            elif method == "tools/list":
                return self._list(request_id, params, modern, catalog, info)
            else:
                result = self._lifecycle(method, params)
            if modern:
                result.setdefault("resultType", "complete")
                result["_meta"] = self._stamp
            return Exchange(200, encode_result(request_id, result))
        except AuthChallengeError:
            raise  # an HTTP status on the request itself (401/403), never an in-band error: the endpoint's
        except RPCError as error:
            status = error.http_status
            if status is None:
                status = _MODERN_STATUS.get(error.code, 200) if self._is_modern(params, info.headers) else 200
            return Exchange(status, encode_error(request_id, error))
        except Exception as exc:
            return Exchange(200, encode_error(request_id, self.internal_error(exc)))

    def internal_error(self, exc: BaseException) -> RPCError:
        """-32603 with a request id that is in the log; details only in debug mode."""
        rid = new_request_id()
        logger.error("internal error (request_id=%s)", rid, exc_info=exc)
        data: JSONObject = {"request_id": rid}
        if self.debug:
            data["exception"] = f"{type(exc).__name__}: {exc}"
            data["trace"] = "".join(traceback.format_exception(exc))
        return InternalError(data=data)

    @staticmethod
    def _is_modern(params: JSONObject, headers: Mapping[str, str]) -> bool:
        meta = params.get("_meta")
        return headers.get("mcp-protocol-version") in MODERN_PROTOCOL_VERSIONS or (
            isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
        )

    def _era(self, method: str, params: JSONObject, headers: Mapping[str, str]) -> str:
        """The protocol version this request speaks; raises the protocol error that refuses it."""
        header_version = headers.get("mcp-protocol-version")
        meta = params.get("_meta")  # `_is_modern`, with the header read once
        modern = header_version in MODERN_PROTOCOL_VERSIONS or (
            isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
        )
        if modern or method == "server/discover":
            return _check_modern_envelope(method, params, headers)
        if header_version is not None and header_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise RPCError(
                f"Unsupported protocol version: {header_version}",
                code=UNSUPPORTED_PROTOCOL_VERSION,
                data={
                    "supported": [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS],
                    "requested": header_version,
                },
                http_status=400,
            )
        return header_version or LATEST_HANDSHAKE_VERSION

    def _lifecycle(self, method: str, params: JSONObject) -> JSONObject:
        """`initialize`, `server/discover` and `ping`."""
        if method == "initialize":
            return self._initialize(params)
        if method == "server/discover":
            result: JSONObject = {"supportedVersions": list(MODERN_PROTOCOL_VERSIONS), "capabilities": {"tools": {}}}
            if self.instructions:
                result["instructions"] = self.instructions
            result.update(ttlMs=self.ttl_ms, cacheScope=self.cache_scope)
            return result
        return {}  # ping

    def _initialize(self, params: JSONObject) -> JSONObject:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise InvalidParamsError("initialize: params.protocolVersion must be a string")
        # lifecycle.mdx: echo a supported version, else offer the latest one we support.
        version = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        result: JSONObject = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": self._server_info_wire,
        }
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    def _list(
        self, request_id: RequestId, params: JSONObject, modern: bool, catalog: Catalog, info: RequestInfo
    ) -> Exchange:
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidParamsError("tools/list: params.cursor must be a string")
        catalog = catalog.listed_for(info.caller)  # a tool it cannot call is never listed
        language = negotiate_language(info.headers.get("accept-language"), catalog.languages, catalog.default_language)
        try:
            index = catalog.page_index(cursor)
        except InvalidCursorError as exc:
            raise InvalidParamsError(f"tools/list: {exc}") from None
        # Everything after the id is built once per catalog version, language, page and era (the page itself
        # is serialized with the catalog): a request costs one copy of the page, not one per piece.
        key = ("tools/list", language, index, self._modern_list_tail if modern else None)
        rest = catalog.derived.get(key)
        if rest is None:
            page, next_cursor = catalog.page_at(language, index)
            tail: JSONObject = {}
            if next_cursor is not None:
                tail["nextCursor"] = next_cursor
            if modern:
                tail.update(resultType="complete", ttlMs=self.ttl_ms, cacheScope=self.cache_scope, _meta=self._stamp)
            rest = catalog.derived[key] = b"".join((page, b"," + _json.dumps(tail)[1:] if tail else b"}", b"}"))
        body = b"".join((b'{"jsonrpc":"2.0","id":', _json.dumps(request_id), b',"result":{"tools":', rest))
        return Exchange(200, body, [(b"content-language", language.encode()), (b"vary", b"Accept-Language")])

    def _prepare_call(
        self, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> tuple[CatalogEntry, JSONObject, CallContext, str]:
        """What `tools/call` runs: the entry, its arguments, the call's context and the result format."""
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParamsError("tools/call: params.name must be a string")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParamsError("tools/call: params.arguments must be an object")
        entry = catalog.get(name)
        if entry is None:
            raise InvalidParamsError(f"Unknown tool: {name}")
        if info.caller is not None:
            authorize_call(entry.tool, info.caller)
        try:
            requested = self.requested_format(info)
        except UnknownFormatError as exc:
            raise InvalidParamsError(str(exc)) from None
        result_format = requested or entry.tool.format or self.default_format
        context = CallContext(name, version, info.headers, labels=catalog.labels, requested_format=requested,
                              caller=info.caller)  # fmt: skip
        if version in MODERN_PROTOCOL_VERSIONS:
            self._modern_call_context(entry, params, arguments, context)
        return entry, arguments, context, result_format

    def _modern_call_context(
        self, entry: CatalogEntry, params: JSONObject, arguments: JSONObject, context: CallContext
    ) -> None:
        """Per-call 2026-07-28 rules, and what the request tells the invoker about the client."""
        if entry.header_params:
            mismatch = param_header_mismatch(entry.header_params, arguments, context.headers)
            if mismatch is not None:
                raise RPCError(mismatch, code=HEADER_MISMATCH)
        meta = params["_meta"]  # present: the modern envelope was checked before dispatch
        declared = meta.get(CLIENT_CAPABILITIES_META_KEY)
        context.client_capabilities = declared if isinstance(declared, dict) else {}
        context.client_info = meta.get(CLIENT_INFO_META_KEY)
        if entry.tool.required_client_capabilities:
            _require_capabilities(entry.tool.name, entry.tool.required_client_capabilities, declared)
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise InvalidParamsError("tools/call: params.inputResponses must be an object")
        context.input_responses = responses
        token = params.get("requestState")
        if token is not None:
            try:
                if not isinstance(token, str):
                    raise InvalidRequestStateError("not a string")
                context.request_state = self.signer.verify(token, entry.tool.name, arguments)
            except InvalidRequestStateError as exc:
                logger.warning("requestState refused for tool %s: %s", entry.tool.name, exc)
                raise InvalidParamsError("Invalid or expired requestState") from None

    def _input_required(self, value: InputRequired, context: CallContext, arguments: JSONObject) -> JSONObject:
        needed = {CAPABILITY_OF_METHOD.get(request.get("method", ""), "") for request in value.input_requests.values()}
        _require_capabilities(context.tool_name, {name: {} for name in needed if name}, context.client_capabilities)
        result: JSONObject = {"resultType": "input_required", "inputRequests": dict(value.input_requests)}
        if value.state is not None:
            result["requestState"] = self.signer.sign(value.state, context.tool_name, arguments)
        return result

    def result_format(self, info: RequestInfo, tool_format: str | None) -> str:
        """Header, then query parameter, then the tool's own format, then the endpoint default."""
        return self.requested_format(info) or tool_format or self.default_format

    @staticmethod
    def requested_format(info: RequestInfo) -> str | None:
        """The format the request asks for: the header, then the query parameter; None for neither."""
        header = info.headers.get("x-mcp-format")
        if header:
            return check_format(header, "the X-Mcp-Format header")
        if info.format_query:
            return check_format(info.format_query, "the format query parameter")
        return None


def _check_modern_envelope(method: str, params: JSONObject, headers: Mapping[str, str]) -> str:
    """The 2026-07-28 request ladder: `_meta` envelope, routing headers, then the version."""
    meta = params.get("_meta")
    if not isinstance(meta, dict) or PROTOCOL_VERSION_META_KEY not in meta or CLIENT_CAPABILITIES_META_KEY not in meta:
        raise InvalidParamsError(
            f"params._meta must carry {PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r}",
        )
    version = meta[PROTOCOL_VERSION_META_KEY]
    if headers.get("mcp-protocol-version") != version:
        raise RPCError(code=HEADER_MISMATCH, message="MCP-Protocol-Version header does not match params._meta")
    if headers.get("mcp-method") != method:
        raise RPCError(code=HEADER_MISMATCH, message="Mcp-Method header does not match the request method")
    if method == "tools/call":
        name = params.get("name")
        if name is not None and decode_header_value(headers.get("mcp-name")) != name:
            raise RPCError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.name")
    if not isinstance(version, str) or version not in MODERN_PROTOCOL_VERSIONS:
        raise RPCError(
            f"Unsupported protocol version: {version}",
            code=UNSUPPORTED_PROTOCOL_VERSION,
            data={"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version},
        )
    return version


def _require_capabilities(tool_name: str, required: JSONObject | None, declared: Any) -> None:
    if not required:
        return
    missing = {key: value for key, value in required.items() if not isinstance(declared, dict) or key not in declared}
    if missing:
        raise RPCError(
            f"Tool {tool_name!r} needs client capabilities: {', '.join(missing)}",
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            data={"requiredCapabilities": missing},
        )
