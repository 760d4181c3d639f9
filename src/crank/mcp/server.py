"""The MCP protocol over one catalog, both eras, chosen per request; no transport in here.

Legacy era (2024-11-05 .. 2025-11-25): `initialize`, `notifications/initialized`, `ping`, `tools/list`,
`tools/call`. Modern era (2026-07-28): stateless, `server/discover`, version and client capabilities
in `_meta`, routing headers checked against the body, `resultType` on every result.
The server keeps no session: any replica can answer any request.
"""

from __future__ import annotations

import functools
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
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
    ToolError,
    UnknownFormatError,
)
from crank.ids import new_request_id
from crank.mcp.calls import InvalidArgumentsMode, authorize_call, call_tool, tool_contents
from crank.mcp.catalog import Catalog, CatalogEntry, ListKind
from crank.mcp.changes import LIST_KINDS, ListChanges, list_changed_method, listener_owner, relay_changes
from crank.mcp.completions import complete
from crank.mcp.formats import DEFAULT_FORMAT, check_format
from crank.mcp.headers import decode_header_value, param_header_mismatch
from crank.mcp.input_required import CAPABILITY_OF_METHOD, InputRequired, NeedsInput, RequestStateSigner
from crank.mcp.prompts import check_prompt_arguments, messages_wire
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
from crank.mcp.resources import contents_wire, typed_variables
from crank.mcp.sessions import SessionIds, log_level_rank
from crank.mcp.streams import (
    DEFAULT_CLIENT_REQUEST_TIMEOUT,
    DEFAULT_MAX_PENDING_REQUESTS,
    LOG_LEVEL_META_KEY,
    Relay,
    RequestInfo,
    ResponseStream,
    ServerRequests,
    StreamSettings,
)
from crank.mcp.tools import CallContext
from crank.mcp.translations import negotiate_language
from crank.types import JSONObject, Scope
from crank.wire.asgi import hold_long_stream
from crank.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RequestId,
    encode_error,
    encode_result,
)

__all__ = ["Era", "Exchange", "Handler", "MCPServer", "RequestInfo", "Route", "ServerInfo"]

logger = logging.getLogger("crank.mcp")

RESOURCE_NOT_FOUND = -32002
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
_NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""The param each 2026-07-28 request mirrors in its `Mcp-Name` header (transports.mdx; the SDK's NAME_BEARING)."""
_LISTEN_FILTER = {"toolsListChanged": "tools", "resourcesListChanged": "resources", "promptsListChanged": "prompts"}
"""2025-11-25's code for `resources/read` of an unknown URI (2026-07-28 uses -32602, SEP-2164)."""
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
class Exchange:
    """The answer to one message: HTTP status, body (None for 202) and extra response headers."""

    status: int
    body: bytes | None
    headers: Sequence[tuple[bytes, bytes]] = ()


Era = Literal["legacy", "modern"]
"""The handshake era (2024-11-05 .. 2025-11-25) or the stateless one (2026-07-28)."""
Handler = Callable[[RequestId, JSONObject, str, "Catalog", RequestInfo], Any]
"""`(request id, params, protocol version, catalog, request info)`: a result object (wrapped in the envelope
here) or a whole `Exchange` (a list answer built from bytes kept with the catalog), or an awaitable of one.
A handler that answers at once is a plain function, and `tools/call`'s returns the call's own coroutine: the
hot paths pay for no coroutine of the table's."""


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler
    feature: str | None
    """The catalog feature the method needs (`Catalog.features`); None for the lifecycle methods."""
    awaits: bool
    """Whether the handler returns an awaitable (an `async def`, or a function returning a coroutine)."""
    whole: bool
    """Whether the handler answers a whole `Exchange` (the lists, built from bytes kept with the catalog)."""


class MCPServer:
    """Answers MCP JSON-RPC messages for one catalog, through a table of handlers keyed by method.

    Each era has its own table (`register`); a method is found only when the catalog offers the feature its
    handler needs (`Catalog.features`), and the capabilities of `initialize` and `server/discover` are derived
    from the same table: what is registered and offered is declared, nothing else.
    """

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
        client_request_timeout: float = DEFAULT_CLIENT_REQUEST_TIMEOUT,
        max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS,
        relay: Relay | None = None,
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
        questions = ServerRequests(max_pending_requests, relay)
        self.streams = StreamSettings(SessionIds(request_state_secret), requests=questions,
                                      client_request_timeout=client_request_timeout)  # fmt: skip
        self._server_info_wire = server_info.to_wire()
        self._stamp = {SERVER_INFO_META_KEY: self._server_info_wire}
        # What this server adds to a 2026-07-28 `tools/list` page: part of the key of the answers it keeps.
        self._modern_list_tail = _json.dumps([ttl_ms, cache_scope, self._stamp])
        self._legacy_routes: dict[str, Route] = {}
        self._modern_routes: dict[str, Route] = {}
        self._routes: dict[Era, dict[str, Route]] = {"legacy": self._legacy_routes, "modern": self._modern_routes}
        self._declared: list[tuple[Era, str, str, JSONObject]] = []
        self.changes: ListChanges | None = None
        self._still_valid: Callable[[Scope], Awaitable[bool]] | None = None
        self._register_protocol()

    def offer_list_changes(
        self, changes: ListChanges, *, still_valid: Callable[[Scope], Awaitable[bool]] | None = None
    ) -> None:
        """Tell clients when a list changes (`crank.mcp.changes`): `listChanged` is declared for tools, resources
        and prompts, 2026-07-28 clients may send `subscriptions/listen`, and 2025-11-25 clients get a session id,
        which the official clients need before they open the GET stream that carries the notifications.
        `still_valid` says whether a listening request's credentials still hold: its stream ends once not."""
        self.changes = changes
        self._still_valid = still_valid
        self.register("subscriptions/listen", self._listen, eras=("modern",), awaits=True, whole=True)
        for kind in LIST_KINDS:
            self.declare(kind, kind, {"listChanged": True}, eras=("legacy", "modern"))

    def register(
        self,
        method: str,
        handler: Handler,
        *,
        feature: str | None = None,
        eras: tuple[Era, ...] = ("legacy", "modern"),
        capability: tuple[str, JSONObject] | None = None,
        awaits: bool | None = None,
        whole: bool = False,
    ) -> None:
        """Serve `method` with `handler` in `eras`, for catalogs that offer `feature` (None: every catalog); a
        `capability` is declared to clients of a catalog that offers the feature. `awaits` says whether the
        handler's answer is awaited (default: whether it is an `async def`), `whole` that it is an `Exchange`."""
        route = Route(handler, feature, inspect.iscoroutinefunction(handler) if awaits is None else awaits, whole)
        for era in eras:
            self._routes[era][method] = route
            if capability is not None:
                self.declare(feature or "tools", *capability, eras=(era,))

    def serves(self, method: Any) -> bool:
        """Whether `method` is one this server answers, in some era."""
        return any(method in routes for routes in self._routes.values())

    def declare(self, feature: str, name: str, fragment: JSONObject, *, eras: tuple[Era, ...]) -> None:
        """Declare a capability no method answers for (a kind of message the server may send, as `logging`)."""
        self._declared.extend((era, feature, name, fragment) for era in eras)

    def _register_protocol(self) -> None:
        legacy: tuple[Era, ...] = ("legacy",)
        modern: tuple[Era, ...] = ("modern",)
        self.register("initialize", self._initialize, eras=legacy, whole=True)
        self.register("ping", self._ping, eras=legacy)
        self.register("server/discover", self._discover, eras=modern)
        # Every catalog offers tools: their routes need no feature, which spares the hot paths the check.
        self.register("tools/list", self._list_tools, capability=("tools", {"listChanged": False}), whole=True)
        self.register("tools/call", self._call_tool, awaits=True)
        listing = ("resources", {"listChanged": False})
        self.register("resources/list", self._list_resources, feature="resources", capability=listing, whole=True)
        self.register("resources/templates/list", self._list_templates, feature="resources", whole=True)
        self.register("resources/read", self._read_resource, feature="resources")
        # Accepted and never notified: a resource changes only with a new catalog version (no `subscribe`).
        self.register("resources/subscribe", self._accept, feature="resources", eras=legacy)
        self.register("resources/unsubscribe", self._accept, feature="resources", eras=legacy)
        prompts = ("prompts", {"listChanged": False})
        self.register("prompts/list", self._list_prompts, feature="prompts", capability=prompts, whole=True)
        self.register("prompts/get", self._get_prompt, feature="prompts")
        self.register("completion/complete", self._complete, feature="completions", capability=("completions", {}))
        self.register("logging/setLevel", self._set_level, feature="logging", eras=legacy)
        self.declare("logging", "logging", {}, eras=("legacy", "modern"))

    def capabilities(self, catalog: Catalog, era: Era) -> JSONObject:
        """What a client of `catalog` is told the server offers in `era`, derived from the registered table."""
        found: JSONObject = {}
        for declared_era, feature, name, fragment in self._declared:
            if declared_era == era and feature in catalog.features:
                found.setdefault(name, {}).update(fragment)
        return found

    async def handle(self, message: JSONObject, catalog: Catalog, info: RequestInfo) -> Exchange:
        """Answer one request (a dict with an `id`) whose envelope is already known to be valid."""
        request_id: RequestId = message["id"]
        method: str = message["method"]
        params: JSONObject = message.get("params") or {}
        try:
            version = info.headers.get("mcp-protocol-version")
            if version in HANDSHAKE_PROTOCOL_VERSIONS and "_meta" not in params and method != "server/discover":
                modern = False  # a handshake-era request that says so and nothing more: what `_era` would find
            elif version in MODERN_PROTOCOL_VERSIONS:  # `_era`'s first branch, one frame less
                version, modern = _check_modern_envelope(method, params, info.headers), True
            else:
                version = self._era(method, params, info.headers)
                modern = version in MODERN_PROTOCOL_VERSIONS
            route = (self._modern_routes if modern else self._legacy_routes).get(method)
            if route is None or (route.feature is not None and route.feature not in catalog.features):
                raise MethodNotFoundError(f"Method not found: {method}")
            result = route.handler(request_id, params, version, catalog, info)
            if route.awaits:
                result = await result
            if route.whole:
                return result  # type: ignore[no-any-return]
            if modern:
                result.setdefault("resultType", "complete")
                result["_meta"] = self._stamp
            return Exchange(200, encode_result(request_id, result))
        except AuthChallengeError:
            raise  # an HTTP status on the request itself (401/403), never an in-band error: the endpoint's
        except RPCError as error:
            return self._refused(request_id, error, params, info)
        except ArgumentsRejectedError as rejected:  # `invalid_arguments="error"`: -32602
            return self._refused(request_id, rejected.as_invalid_params(), params, info)
        except Exception as exc:
            return Exchange(200, encode_error(request_id, self.internal_error(exc)))

    def _refused(self, request_id: RequestId, error: RPCError, params: JSONObject, info: RequestInfo) -> Exchange:
        status = error.http_status
        if status is None:
            status = _MODERN_STATUS.get(error.code, 200) if self._is_modern(params, info.headers) else 200
        return Exchange(status, encode_error(request_id, error))

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

    # -- lifecycle ----------------------------------------------------------------------------------

    def _initialize(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> Exchange:
        requested = _string_param(params, "protocolVersion", "initialize")
        # lifecycle.mdx: echo a supported version, else offer the latest one we support.
        version = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        result: JSONObject = {
            "protocolVersion": version,
            "capabilities": self.capabilities(catalog, "legacy"),
            "serverInfo": self._server_info_wire,
        }
        if self.instructions:
            result["instructions"] = self.instructions
        features = catalog.features  # a session holds a log level and what the client can answer (sessions.py)
        if "logging" not in features and "asks" not in features and self.changes is None:
            return Exchange(200, encode_result(request_id, result))
        session = self.streams.sessions.issue(params.get("capabilities")).encode()
        return Exchange(200, encode_result(request_id, result), [(b"mcp-session-id", session)])

    def _ping(self, *_: Any) -> JSONObject:
        return {}

    def _accept(self, *_: Any) -> JSONObject:
        return {}

    def _discover(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> JSONObject:
        result: JSONObject = {
            "supportedVersions": list(MODERN_PROTOCOL_VERSIONS),
            "capabilities": self.capabilities(catalog, "modern"),
        }
        if self.instructions:
            result["instructions"] = self.instructions
        result.update(ttlMs=self.ttl_ms, cacheScope=self.cache_scope)
        return result

    def _set_level(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> JSONObject:
        rank = log_level_rank(params.get("level"), "logging/setLevel: params.level")
        session = self.streams.sessions.verified(info.headers.get("mcp-session-id"))
        if session is not None:  # without a session there is no one to remember it for: the default stays
            self.streams.log_levels.set(session, rank)
        return {}

    async def _listen(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> Exchange:
        """2026-07-28 `subscriptions/listen`: a stream that says which of the asked lists change, until the client
        closes it (which cancels this) or the server shuts down (then the result ends it)."""
        assert self.changes is not None  # registered by `offer_list_changes` only
        asked = params.get("notifications")
        if not isinstance(asked, dict):
            raise InvalidParamsError("subscriptions/listen: params.notifications must be an object")
        if info.send is None or not info.accepts_stream():
            raise InvalidParamsError("subscriptions/listen: the client must accept text/event-stream")
        # Every kind asked for is agreed to, offered now or not: a publish may add the first prompt.
        kinds = frozenset(kind for key, kind in _LISTEN_FILTER.items() if asked.get(key) is True)
        client = info.scope.get("client") if info.scope is not None else None
        owner = listener_owner(info.caller, client)
        listener = self.changes.listen(catalog.identity, owner)  # bounded
        tag = {SUBSCRIPTION_ID_META_KEY: request_id}
        stream = info.stream = ResponseStream(info.send, info.receive, cancel_on_close=True)
        try:
            await stream.open()
            if info.scope is not None:
                hold_long_stream(info.scope, owner[0])
            agreed = {key: True for key, kind in _LISTEN_FILTER.items() if kind in kinds}
            ack = {"notifications": agreed, "_meta": tag}  # not `resourceSubscriptions`: see docs/mcp.md
            await stream.message(_notification("notifications/subscriptions/acknowledged", ack))

            async def tell(kind: str) -> None:
                await stream.message(_notification(list_changed_method(kind), {"_meta": tag}))

            still_valid, scope = self._still_valid, info.scope
            admitted = functools.partial(still_valid, scope) if still_valid is not None and scope is not None else None
            await relay_changes(listener, kinds, tell, stream.comment, self.changes.heartbeat, admitted)
        finally:
            self.changes.close(listener)
        return Exchange(200, encode_result(request_id, {"resultType": "complete", "_meta": {**self._stamp, **tag}}))

    # -- tools ---------------------------------------------------------------------------------------

    def _list_tools(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> Exchange:
        modern = version in MODERN_PROTOCOL_VERSIONS
        cursor = _cursor(params, "tools/list")
        if catalog.scoped:  # a tool it cannot call is never listed
            catalog = catalog.listed_for(info.caller)
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
            rest = catalog.derived[key] = self._list_rest(page, next_cursor, modern)
        body = b"".join((b'{"jsonrpc":"2.0","id":', _json.dumps(request_id), b',"result":{"tools":', rest))
        return Exchange(200, body, [(b"content-language", language.encode()), (b"vary", b"Accept-Language")])

    def _list_rest(self, page: bytes, next_cursor: str | None, modern: bool) -> bytes:
        """A list answer after its array: the next cursor, the era's hints and the closing braces."""
        tail: JSONObject = {}
        if next_cursor is not None:
            tail["nextCursor"] = next_cursor
        if modern:
            tail.update(resultType="complete", ttlMs=self.ttl_ms, cacheScope=self.cache_scope, _meta=self._stamp)
        return b"".join((page, b"," + _json.dumps(tail)[1:] if tail else b"}", b"}"))

    def _call_tool(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> Awaitable[JSONObject]:
        """The call's own coroutine, awaited by `handle` (which answers an `ArgumentsRejectedError`): the entry,
        its arguments, the call's context and the result format, found here in one frame."""
        name = _string_param(params, "name", "tools/call")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise InvalidParamsError("tools/call: params.arguments must be an object")
        entry = catalog.get(name)
        if entry is None:
            raise InvalidParamsError(f"Unknown tool: {name}")
        caller = info.caller  # a `Principal` (`crank.wire.auth`) whenever the endpoint authenticates
        tool = entry.tool
        if caller is not None and (tool.required_scopes or caller.anonymous or tool.authorize is not None):
            authorize_call(tool, caller, arguments)  # a scoped tool, an anonymous caller or a tool's own check
        requested = None
        if info.format_query is not None or "x-mcp-format" in info.headers:  # most calls ask for no format
            try:
                requested = self.requested_format(info)
            except UnknownFormatError as exc:
                raise InvalidParamsError(str(exc)) from None
        # Positional, in `CallContext`'s field order: a third cheaper than keywords (docs/benchmarks.md).
        channel = (info, params, "logging" in catalog.features)
        context = CallContext(name, version, info.headers, None, None, None, None, catalog.labels, requested,
                              self.default_format, info.caller, channel)  # fmt: skip
        result_format = context.result_format(entry.tool.format)
        if version in MODERN_PROTOCOL_VERSIONS:
            self._modern_call_context(entry, params, arguments, context)
        return call_tool(
            entry,
            arguments,
            context,
            result_format=result_format,
            invalid_arguments=self.invalid_arguments,
            debug=self.debug,
            on_input_required=self._input_required if version in MODERN_PROTOCOL_VERSIONS else None,
            observer=catalog.observer,
        )

    # -- resources and prompts ----------------------------------------------------------------------

    def _list_resources(self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog,
                              info: RequestInfo) -> Exchange:  # fmt: skip
        return self._surface_list("resources", "resources/list", request_id, params, version, catalog, info)

    def _list_templates(self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog,
                              info: RequestInfo) -> Exchange:  # fmt: skip
        return self._surface_list("resourceTemplates", "resources/templates/list", request_id, params, version,
                                  catalog, info)  # fmt: skip

    def _list_prompts(self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog,
                            info: RequestInfo) -> Exchange:  # fmt: skip
        return self._surface_list("prompts", "prompts/list", request_id, params, version, catalog, info)

    def _surface_list(self, kind: ListKind, method: str, request_id: RequestId, params: JSONObject, version: str,
                      catalog: Catalog, info: RequestInfo) -> Exchange:  # fmt: skip
        cursor = _cursor(params, method)
        if catalog.scoped:  # a resource that a tool the caller cannot call answers is not listed
            catalog = catalog.listed_for(info.caller)
        language = negotiate_language(info.headers.get("accept-language"), catalog.languages, catalog.default_language)
        try:
            page, next_cursor = catalog.list_page(kind, language, cursor)
        except InvalidCursorError as exc:
            raise InvalidParamsError(f"{method}: {exc}") from None
        rest = self._list_rest(page, next_cursor, version in MODERN_PROTOCOL_VERSIONS)
        head = b'{"jsonrpc":"2.0","id":%s,"result":{"%s":' % (_json.dumps(request_id), kind.encode())
        body = head + rest
        return Exchange(200, body, [(b"content-language", language.encode()), (b"vary", b"Accept-Language")])

    async def _read_resource(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> JSONObject:
        uri = _string_param(params, "uri", "resources/read")
        modern = version in MODERN_PROTOCOL_VERSIONS
        context = self._context(uri, request_id, params, version, catalog, info)
        if modern:
            self._input_state(f"resource:{uri}", params, {}, context)
        try:
            contents = await self._contents(uri, catalog, context)
        except NeedsInput as need:  # a reader that asked the client (2026-07-28): the answer comes with a new read
            if not modern:
                raise InternalError(f"Resource {uri[:200]!r} needs input from the client") from None
            return self._input_required(need.value, context, {}, signed_for=f"resource:{uri}")
        except (RPCError, AuthChallengeError):
            raise
        except ToolError as failed:
            raise _as_rpc_error(failed) from None
        result: JSONObject = {"contents": contents}
        if modern:
            result.update(ttlMs=self.ttl_ms, cacheScope=self.cache_scope)
        return result

    async def _contents(self, uri: str, catalog: Catalog, context: CallContext) -> list[JSONObject]:
        """What the reader, or the tool, of `uri` answers; "not found" when nothing has that URI (a fixed
        resource's, or one a template matches)."""
        resource = catalog.resource(uri)
        if resource is not None:
            mime_type, tool = resource.mime_type, resource.tool
            arguments: dict[str, Any] = {}
            if resource.reader is not None:
                return contents_wire(uri, await resource.reader(context), mime_type)
        else:
            matched = catalog.match(uri)
            if matched is None:
                # 2026-07-28 (SEP-2164): -32602 naming the uri; before it, the resource-not-found code -32002.
                code = INVALID_PARAMS if context.modern else RESOURCE_NOT_FOUND
                raise RPCError(f"Resource not found: {uri[:200]}", code=code, data={"uri": uri})
            entry, variables = matched
            template = entry.template
            mime_type, tool = template.mime_type, template.tool
            if template.reader is not None:
                return contents_wire(uri, await template.reader(uri, variables, context), mime_type)
            arguments = typed_variables(variables, entry.kinds) if entry.kinds else variables
        # A tool answers: its whole call, as `tools/call` runs it (scopes, validation, invoker, output check), in
        # JSON. Awaited here, not in a helper: the read costs little more than the call (docs/benchmarks.md).
        found = catalog.reading_entry(tool)  # type: ignore[arg-type]  # a resource has a reader or a tool
        assert found is not None  # checked when the catalog was built
        caller = context.caller
        if caller is not None and (found.tool.required_scopes or caller.anonymous):
            authorize_call(found.tool, caller, arguments)  # only a scoped tool, or an anonymous caller, is refused
        result = await call_tool(found, arguments, context, result_format="json", debug=self.debug,
                                 observer=catalog.observer)  # fmt: skip
        return tool_contents(uri, result, mime_type)

    async def _get_prompt(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> JSONObject:
        name = _string_param(params, "name", "prompts/get")
        prompt = catalog.prompt(name)
        if prompt is None:
            raise InvalidParamsError(f"Unknown prompt: {name[:200]}")
        arguments = check_prompt_arguments(prompt, params.get("arguments"))
        context = self._context(name, request_id, params, version, catalog, info)
        if context.modern:
            self._input_state(f"prompt:{name}", params, arguments, context)
        try:
            value = await self._guarded(prompt.renderer(arguments, context), name)
        except NeedsInput as need:
            value = need.value
        if isinstance(value, InputRequired):
            if not context.modern:
                raise InternalError(f"Prompt {name!r} needs input from the client, which this protocol version "
                                    "cannot carry in a prompt")  # fmt: skip
            return self._input_required(value, context, arguments, signed_for=f"prompt:{name}")
        return messages_wire(value)

    async def _complete(
        self, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog, info: RequestInfo
    ) -> JSONObject:
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise InvalidParamsError("completion/complete: params.ref and params.argument must be objects")
        name, value = argument.get("name"), argument.get("value", "")
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidParamsError("completion/complete: argument.name and argument.value must be strings")
        given = params.get("context")
        given = given.get("arguments") if isinstance(given, dict) else None
        known = {key: text for key, text in given.items() if isinstance(text, str)} if isinstance(given, dict) else {}
        completer = None
        if ref.get("type") == "ref/prompt":
            prompt = catalog.prompt(str(ref.get("name")))
            if prompt is None:
                raise InvalidParamsError(f"Unknown prompt: {str(ref.get('name'))[:200]}")
            declared = prompt.argument(name)
            completer = declared.completions if declared is not None else None
        elif ref.get("type") == "ref/resource":
            template = catalog.template(str(ref.get("uri")))
            if template is None:
                raise InvalidParamsError(f"Unknown resource template: {str(ref.get('uri'))[:200]}")
            completer = template.completions.get(name)
        else:
            raise InvalidParamsError("completion/complete: ref.type must be ref/prompt or ref/resource")
        return {"completion": await complete(completer, value, known)}

    def _context(self, name: str, request_id: RequestId, params: JSONObject, version: str, catalog: Catalog,
                 info: RequestInfo) -> CallContext:  # fmt: skip
        """The context a resource reader or a prompt renderer gets, as a tool's invoker does."""
        context = CallContext(name, version, info.headers, labels=catalog.labels, caller=info.caller,
                              channel=(info, params, "logging" in catalog.features))  # fmt: skip
        if context.modern:
            _read_client_meta(params["_meta"], context)  # present: the modern envelope was checked before dispatch
        return context

    async def _guarded(self, pending: Awaitable[Any], name: str) -> Any:
        """A reader's or renderer's answer; its `ToolError` becomes a JSON-RPC error with the structured error
        as data (these requests have no `isError` result), anything else an internal error."""
        try:
            return await pending
        except (NeedsInput, RPCError, AuthChallengeError):
            raise
        except ToolError as failed:
            raise _as_rpc_error(failed) from None

    def _modern_call_context(
        self, entry: CatalogEntry, params: JSONObject, arguments: JSONObject, context: CallContext
    ) -> None:
        """Per-call 2026-07-28 rules, and what the request tells the invoker about the client."""
        if entry.header_params:
            mismatch = param_header_mismatch(entry.header_params, arguments, context.headers)
            if mismatch is not None:
                raise RPCError(mismatch, code=HEADER_MISMATCH)
        declared = _read_client_meta(params["_meta"], context)  # present: the envelope was checked before dispatch
        if entry.tool.required_client_capabilities:
            _require_capabilities(entry.tool.name, entry.tool.required_client_capabilities, declared)
        if "inputResponses" in params or "requestState" in params:  # only a call that answers an earlier one
            self._input_state(entry.tool.name, params, arguments, context)

    def _input_state(self, signed_for: str, params: JSONObject, arguments: JSONObject, context: CallContext) -> None:
        """The client's answers to an earlier `input_required` and its verified `requestState`, into `context`."""
        responses = params.get("inputResponses")
        if responses is not None and not isinstance(responses, dict):
            raise InvalidParamsError("params.inputResponses must be an object")
        context.input_responses = responses
        token = params.get("requestState")
        if token is not None:
            try:
                if not isinstance(token, str):
                    raise InvalidRequestStateError("not a string")
                context.request_state = self.signer.verify(token, signed_for, arguments)
            except InvalidRequestStateError as exc:
                logger.warning("requestState refused for %s: %s", signed_for, exc)
                raise InvalidParamsError("Invalid or expired requestState") from None

    def _input_required(
        self, value: InputRequired, context: CallContext, arguments: JSONObject, signed_for: str | None = None
    ) -> JSONObject:
        needed = {CAPABILITY_OF_METHOD.get(request.get("method", ""), "") for request in value.input_requests.values()}
        _require_capabilities(context.tool_name, {name: {} for name in needed if name}, context.client_capabilities)
        result: JSONObject = {"resultType": "input_required", "inputRequests": dict(value.input_requests)}
        if value.state is not None:
            result["requestState"] = self.signer.sign(value.state, signed_for or context.tool_name, arguments)
        return result

    @staticmethod
    def requested_format(info: RequestInfo) -> str | None:
        """The format the request asks for: the header, then the query parameter; None for neither."""
        header = info.headers.get("x-mcp-format")
        if header:
            return check_format(header, "the X-Mcp-Format header")
        if info.format_query:
            return check_format(info.format_query, "the format query parameter")
        return None


def _as_rpc_error(failed: ToolError) -> RPCError:
    """A reader's or renderer's `ToolError` as the JSON-RPC error its request answers (these requests have no
    `isError` result): -32603 with the structured error as its data."""
    return RPCError(failed.message, code=INTERNAL_ERROR, data=failed.to_payload(new_request_id()))


def _notification(method: str, params: JSONObject) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "method": method, "params": params})


def _read_client_meta(meta: JSONObject, context: CallContext) -> Any:
    """What a 2026-07-28 request's `_meta` tells a handler's context: the client's capabilities and info; a log
    level is checked here, before anything runs, not at the first log message. Returns the declared
    capabilities as sent."""
    if LOG_LEVEL_META_KEY in meta:
        log_level_rank(meta[LOG_LEVEL_META_KEY], f"_meta.{LOG_LEVEL_META_KEY}")
    declared = meta.get(CLIENT_CAPABILITIES_META_KEY)
    context.client_capabilities = declared if isinstance(declared, dict) else {}
    context.client_info = meta.get(CLIENT_INFO_META_KEY)
    return declared


def _string_param(params: JSONObject, key: str, method: str) -> str:
    """`params[key]`, which the method needs as a string; -32602 naming it otherwise."""
    value = params.get(key)
    if type(value) is not str:
        raise InvalidParamsError(f"{method}: params.{key} must be a string")
    return value


def _cursor(params: JSONObject, method: str) -> str | None:
    cursor = params.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidParamsError(f"{method}: params.cursor must be a string")
    return cursor


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
    named = _NAME_PARAM.get(method)
    if named is not None:
        name = params.get(named)
        if name is not None and decode_header_value(headers.get("mcp-name")) != name:
            raise RPCError(code=HEADER_MISMATCH, message=f"Mcp-Name header does not match params.{named}")
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
