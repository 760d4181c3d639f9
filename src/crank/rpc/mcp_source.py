"""The rpc layer as a source of MCP tools: one catalog per endpoint, version and set of caller roles.

Every published method of the endpoint's group becomes a tool. A tool call becomes an rpc `Call` and
runs through the same `Executor` as /rpc; an `RPCError` comes back as a tool error carrying seed
001's `{code, message, data}`. A caller sees in `tools/list` only what its roles may call; a call to
anything else is refused with -32001 without running the method.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from crank.exceptions import RPCError, ToolError
from crank.mcp import CallContext, Catalog, MCPEndpoint, ServerInfo, Tool, ToolAnnotations, Translations
from crank.mcp.after_response import call_after_response
from crank.mcp.tools import new_request_id
from crank.rpc.executor import Call, error_data
from crank.rpc.method import Method
from crank.rpc.publication import MCPConfig, is_published
from crank.rpc.translations import load_translations
from crank.schema import describe_output, tool_local, wrap_output
from crank.types import JSONObject, Scope

if TYPE_CHECKING:
    from crank.rpc.app import RPCApp

__all__ = ["MCPSource", "RPCToolError"]


class RPCToolError(ToolError):
    """An rpc error as a tool error: the client reads seed 001's `{code, message, data}`."""

    error_class = "rpc"

    def __init__(self, error: RPCError, *, debug: bool) -> None:
        super().__init__(error.message, error_code=str(error.code))
        cause = error.__cause__ if error.__cause__ is not error else None
        self.wire = {"code": error.code, "message": error.message, "data": error_data(error, cause, debug=debug)}

    def to_payload(self, request_id: str) -> dict[str, Any]:
        return self.wire


class MCPSource:
    def __init__(self, app: RPCApp, config: MCPConfig, version: str) -> None:
        self.app = app
        self.config = config
        self.version = version
        self.methods = [
            method
            for method in app.methods_in(version)
            if config.group in method.groups and is_published(method, config)
        ]
        if config.translations is not None:
            self.translations = load_translations(config.translations, config.group, config.default_language)
        else:
            self.translations = Translations(default_language=config.default_language)
        self._outputs = {method.name: self._mcp_output(method) for method in self.methods}
        self._catalogs: dict[frozenset[str], Catalog] = {}
        self.catalog_for(frozenset())  # build now: a bad definition fails at start, not at the first request

    def endpoint(self) -> MCPEndpoint:
        private = any(method.roles for method in self.methods)
        return MCPEndpoint(
            self.provide,
            server_info=ServerInfo(self.app.title, self.app.version),
            default_format=self.config.default_format,
            invalid_arguments=self.config.invalid_arguments,
            cache_scope="private" if private else "public",
            debug=self.app.debug,
        )

    async def provide(self, scope: Scope) -> Catalog:
        return self.catalog_for(await self.app.resolve_roles(scope))

    def catalog_for(self, roles: frozenset[str]) -> Catalog:
        catalog = self._catalogs.get(roles)
        if catalog is None:
            tools = [self._tool(method, roles) for method in self.methods]
            catalog = self._catalogs[roles] = Catalog(tools, version=self.version, translations=self.translations)
        return catalog

    def _tool(self, method: Method, roles: frozenset[str]) -> Tool:
        settings = method.mcp
        schemas = method.schemas
        output = self._outputs[method.name]
        return Tool(
            name=method.name,
            title=settings.title if settings else None,
            description=(settings.description if settings else None) or method.text,
            input_schema=tool_local(schemas.input_schema, schemas.components),
            output_schema=tool_local(wrap_output(output), schemas.components) if output is not None else None,
            wrap_result=True,  # seed 001: an rpc result always travels as {"result": ...}
            annotations=_annotations(method),
            format=settings.format if settings else None,
            listed=not method.roles or bool(method.roles & roles),
            invoker=self._invoker(method, roles),
        )

    def _mcp_output(self, method: Method) -> JSONObject | None:
        """What MCP clients see: `MCP(output_schema=...)` if given; none when a transformer or formatter
        reshapes the result (clients validate `structuredContent` against it); else the method's own."""
        settings = method.mcp
        if settings is not None and settings.output_schema is not None:
            name, app = method.name, self.app
            return describe_output(name, settings.output_schema, method.schemas.components, app.datetime_format)
        if (settings is not None and settings.transformer is not None) or self.config.formatter is not None:
            return None
        return method.schemas.output_schema

    def _invoker(self, method: Method, roles: frozenset[str]) -> Any:
        app, config, version = self.app, self.config, self.version
        transformer = method.mcp.transformer if method.mcp else None

        async def invoke(arguments: dict[str, Any], context: CallContext) -> Any:
            call = Call(method, arguments, version, "mcp", new_request_id(), roles, config.apply_rate_limit,
                        call_after_response)  # fmt: skip
            try:
                result = (await app.executor.run(call)).result
            except RPCError as error:
                raise RPCToolError(error, debug=app.debug) from None
            if transformer is not None:
                result = transformer(result)
            if config.formatter is not None:
                result = config.formatter(method, result)
            return result

        return invoke


def _annotations(method: Method) -> ToolAnnotations | None:
    """Explicit hints win; a cached method is read-only and idempotent where those were left unset."""
    annotations = method.mcp.annotations if method.mcp and method.mcp.annotations else ToolAnnotations()
    if method.cache_ttl:
        annotations = replace(
            annotations,
            read_only_hint=True if annotations.read_only_hint is None else annotations.read_only_hint,
            idempotent_hint=True if annotations.idempotent_hint is None else annotations.idempotent_hint,
        )
    return annotations if annotations.to_wire() is not None else None
