"""Python rpc methods as a source of MCP tools: one catalog per endpoint, version and set of caller roles.

Every published method of the endpoint's group becomes a tool. A tool call becomes an rpc `Call` and
runs through the same `Executor` as /rpc, under the MCP call's request id; an `RPCError` comes back as a
tool error carrying seed 001's `{code, message, data}` and that `request_id`. A caller sees in `tools/list`
only what its roles may call; a call to anything else is refused with -32001 without running the method.

Arguments have one rule on both paths: the executor's pydantic conversion, which is what the method's code
receives. The catalog's JSON Schema validator does not run first for these tools (it is stricter: it
refuses `"5"` for an `int` that /rpc converts); a conversion failure is answered as any MCP argument
refusal (`invalid_arguments`, every violation with its path, or -32602 per the endpoint's setting).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crank.exceptions import ArgumentsRejectedError, InvalidParamsError, ParamsValidationError, RPCError, RPCToolError
from crank.mcp.after_response import call_after_response
from crank.mcp.calls import InvalidArgumentsMode
from crank.mcp.catalog import Catalog
from crank.mcp.formats import DEFAULT_FORMAT
from crank.mcp.prompts import Prompt, PromptArgument
from crank.mcp.resources import Resource, ResourceTemplate
from crank.mcp.tools import CallContext, Invoker, Tool, ToolAnnotations
from crank.mcp.translations import Translations, load_yaml_translations
from crank.registry.runtime import OAuthPolicy
from crank.rpc.app import RPCApp
from crank.rpc.executor import Call, error_wire
from crank.rpc.method import Method
from crank.rpc.offerings import Argument, PromptSpec, ResourceSpec, call
from crank.schema import describe_output, tool_local, wrap_output
from crank.types import JSONObject, Scope
from crank.wire.auth import Principal
from crank.wire.middleware import AUTH_SCOPE_KEY

__all__ = ["MCPConfig", "RPCSource", "is_published"]

_MAX_CATALOGS = 64


@dataclass(frozen=True)
class MCPConfig:
    """One MCP endpoint over an API group. Publication is off until `enabled=True`."""

    group: str = "mcp"
    enabled: bool = False
    expose_all: bool = False
    exclude_prefixes: tuple[str, ...] = ()
    exclude_methods: tuple[str, ...] = ()
    whitelist_methods: tuple[str, ...] = ()
    apply_rate_limit: bool = False
    default_format: str = DEFAULT_FORMAT
    invalid_arguments: InvalidArgumentsMode = "result"
    translations: Path | None = None
    default_language: str = "en"
    formatter: Callable[[Method, Any], Any] | None = field(default=None, compare=False)
    """Reshapes many methods' MCP results at once; runs after each method's own transformer."""
    oauth: OAuthPolicy | None = None
    """Take OAuth access tokens (docs/security.md, OAuth): the endpoint is the resource `audience` plus its path;
    `agent_scopes["*"]` are the scopes every request needs, `tool_scopes` each tool's (by name, or `read`, `write`,
    `destructive`). A token's scopes are the caller's roles for the methods' `roles`."""


def is_published(method: Method, config: MCPConfig) -> bool:
    """Seed 002's filters, first match wins: `exclude_methods` (deny), `whitelist_methods` (allow), the
    method's own opt-out, deprecated without an explicit opt-in (hidden), `exclude_prefixes` (deny),
    `expose_all` (allow), the method's opt-in (`mcp=MCP(...)`), else hidden. The operator's lists come
    first: whoever deploys has the last word over the developer's decorator."""
    name = method.name
    if name in config.exclude_methods:
        return False
    if name in config.whitelist_methods:
        return True
    if method.mcp is not None and not method.mcp.enabled:
        return False
    if method.deprecated and method.mcp is None:
        return False
    if any(name.startswith(prefix) for prefix in config.exclude_prefixes):
        return False
    if config.expose_all:
        return True
    return method.mcp is not None


class RPCSource:
    """The tools of one MCP endpoint of an `RPCApp` (its config's group) at one API version; `provide` is its
    `CatalogProvider` (the catalog for the caller's roles). `crank.server.RPCService` serves it."""

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
            self.translations = load_yaml_translations(config.translations, config.group, config.default_language)
        else:
            self.translations = Translations(default_language=config.default_language)
        self._outputs = {method.name: self._mcp_output(method) for method in self.methods}
        offered = [spec for spec in app.resources if config.group in spec.groups]
        # Each with the roles a caller needs for it (none: everyone), kept for the catalog of each set of roles.
        self.resources = [(spec.roles, _resource(spec)) for spec in offered if not spec.is_template]
        self.templates = [(spec.roles, _template(spec)) for spec in offered if spec.is_template]
        self.prompts = [(spec.roles, _prompt(spec)) for spec in app.prompts if config.group in spec.groups]
        self._catalogs: dict[frozenset[str], Catalog] = {}
        everyone = self.catalog_for(frozenset())  # built now: a bad definition fails at start, not at the first call
        self._no_roles = None if app.resolves_roles else everyone
        """The one catalog of an app whose callers have no roles (no role resolver): every caller's."""

    @property
    def reaches_client(self) -> bool:
        """Whether some method takes the call's `Context`: it may send log messages and ask the user, so the
        endpoint declares `logging` and 2025-11-25 clients get a session that carries their capabilities."""
        return any(method.schemas.context_parameter is not None for method in self.methods)

    @property
    def private(self) -> bool:
        """Whether what a caller sees depends on who asks (some method, resource or prompt needs roles)."""
        offered = (*self.resources, *self.templates, *self.prompts)
        return any(method.roles for method in self.methods) or any(roles for roles, _ in offered)

    def provide(self, scope: Scope) -> Catalog | Awaitable[Catalog]:
        """The `CatalogProvider` of the group's endpoint: the catalog of the caller's roles, at once unless the app
        has a role resolver to ask."""
        caller = scope.get(AUTH_SCOPE_KEY)
        if isinstance(caller, Principal) and caller.scopes is not None:
            return self.catalog_for(caller.scopes)  # an access token's scopes are its roles
        if self._no_roles is not None:
            return self._no_roles
        return self._resolved(scope)

    async def _resolved(self, scope: Scope) -> Catalog:
        return self.catalog_for(await self.app.resolve_roles(scope))

    def catalog_for(self, roles: frozenset[str]) -> Catalog:
        catalog = self._catalogs.get(roles)
        if catalog is None:
            if len(self._catalogs) >= _MAX_CATALOGS:  # bounded: a token's scopes are its roles, any set of them
                self._catalogs = {frozenset(): self._catalogs[frozenset()]} if frozenset() in self._catalogs else {}
            tools = [self._tool(method, roles) for method in self.methods]
            catalog = self._catalogs[roles] = Catalog(
                tools, version=self.version, translations=self.translations,
                resources=[item for needed, item in self.resources if opens(needed, roles)],
                resource_templates=[item for needed, item in self.templates if opens(needed, roles)],
                prompts=[item for needed, item in self.prompts if opens(needed, roles)],
                logging=self.reaches_client, asks=self.reaches_client,
                anonymous_scopes=self.config.oauth.agent_needs("*") if self.config.oauth is not None else frozenset(),
            )  # fmt: skip
        return catalog

    def _tool(self, method: Method, roles: frozenset[str]) -> Tool:
        settings = method.mcp
        schemas = method.schemas
        output = self._outputs[method.name]
        annotations = _annotations(method)
        scopes: frozenset[str] = frozenset()
        if self.config.oauth is not None:
            read_only = annotations is not None and annotations.read_only_hint is True
            destructive = annotations is not None and annotations.destructive_hint is True
            scopes = self.config.oauth.tool_needs("*", method.name, read_only=read_only, destructive=destructive)
        return Tool(
            name=method.name,
            title=settings.title if settings else None,
            description=(settings.description if settings else None) or method.text,
            input_schema=tool_local(schemas.input_schema, schemas.components),
            output_schema=tool_local(wrap_output(output), schemas.components) if output is not None else None,
            wrap_result=True,  # seed 001: an rpc result always travels as {"result": ...}
            annotations=annotations,
            format=settings.format if settings else None,
            required_scopes=scopes,
            listed=opens(method.roles, roles),
            plain_fields={"roles": sorted(method.roles)},  # seed 002: /mcp/tools says what a caller needs
            invoker=self._invoker(method, roles),
            validate_arguments=False,  # the executor's conversion is the rule (module docstring)
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

    def _invoker(self, method: Method, roles: frozenset[str]) -> Invoker:
        app, config, version = self.app, self.config, self.version
        transformer = method.mcp.transformer if method.mcp else None

        async def invoke(arguments: dict[str, Any], context: CallContext) -> Any:
            call = Call(method, arguments, version, "mcp", context, roles, config.apply_rate_limit, call_after_response)
            try:
                result = await app.executor.run(call)
            except ParamsValidationError as error:
                raise ArgumentsRejectedError(method.name, error.violations) from None
            except RPCError as error:
                raise RPCToolError(error, error_wire(error, debug=app.debug)) from None
            if transformer is not None:
                result = transformer(result)
            if config.formatter is not None:
                result = config.formatter(method, result)
            return result

        return invoke


def opens(needed: frozenset[str], roles: frozenset[str]) -> bool:
    """The one rule for what a caller's roles open: a method, resource or prompt that needs none, or one of
    whose roles the caller has."""
    return not needed or bool(needed & roles)


def _resource(spec: ResourceSpec) -> Resource:
    async def read(context: CallContext) -> Any:
        return await call(spec.func, {})

    return Resource(spec.uri, spec.name, read, title=spec.title, description=spec.description, mime_type=spec.mime_type)


def _template(spec: ResourceSpec) -> ResourceTemplate:
    async def read(uri: str, variables: Mapping[str, str], context: CallContext) -> Any:
        return await call(spec.func, _allowed(spec.arguments, variables, f"resource {uri!r}"))

    completions = {argument.name: _completer(argument) for argument in spec.arguments if _completer(argument)}
    return ResourceTemplate(spec.uri, spec.name, read, title=spec.title, description=spec.description,
                            mime_type=spec.mime_type, completions=completions)  # fmt: skip


def _prompt(spec: PromptSpec) -> Prompt:
    async def render(arguments: Mapping[str, str], context: CallContext) -> Any:
        return await call(spec.func, _allowed(spec.arguments, arguments, f"prompt {spec.name!r}"))

    arguments = tuple(PromptArgument(argument.name, argument.description, argument.required,
                                     completions=_completer(argument)) for argument in spec.arguments)  # fmt: skip
    return Prompt(spec.name, render, title=spec.title, description=spec.description, arguments=arguments)


def _completer(argument: Argument) -> Any:
    return argument.complete if argument.complete is not None else argument.values


def _allowed(arguments: tuple[Argument, ...], given: Mapping[str, str], what: str) -> dict[str, str]:
    """The function's arguments, each within its `Literal` values when it has them."""
    for argument in arguments:
        value = given.get(argument.name)
        if argument.values is not None and value is not None and value not in argument.values:
            raise InvalidParamsError(f"{what}: {argument.name} must be one of {', '.join(argument.values)}")
    return dict(given)


def _annotations(method: Method) -> ToolAnnotations | None:
    """Explicit hints win; a cached method is read-only and idempotent where those were left unset."""
    settings = method.mcp
    read_only = settings.read_only_hint if settings else None
    idempotent = settings.idempotent_hint if settings else None
    if method.cache_ttl:
        read_only = True if read_only is None else read_only
        idempotent = True if idempotent is None else idempotent
    annotations = ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=settings.destructive_hint if settings else None,
        idempotent_hint=idempotent,
        open_world_hint=settings.open_world_hint if settings else None,
    )
    return annotations if annotations.to_wire() is not None else None
