"""Discovery mode: an agent too big for any token budget served as three fixed tools.

- `search_operations {query, limit}`: the agent's operations that match some words, best first (BM25 over
  a full-text index, `crank.sources.search`), as names and one-line summaries only;
- `get_operation_schema {name}`: one operation's description, full input schema and hints;
- `call_operation {name, arguments}`: runs the operation.

Each operation is still compiled to the `Tool` a direct agent would publish (`crank.sources.agents`), in a
`Catalog` of its own that is never listed: `call_operation` looks the operation up there and runs
`crank.mcp.calls.call_tool` on its entry, so a call through discovery is validated against the
operation's schema (violations with their paths), confirmed when destructive, deduplicated by its
idempotency key, mapped, answered with the same structured errors, and counted in the metrics under
the operation's name, exactly as a direct tool's call is. Only a call that names no operation of the
agent (or is malformed itself) is counted under `call_operation`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from crank.exceptions import ToolError, UnknownOperationError
from crank.mcp.calls import authorize_call, call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.input_required import InputRequired, NeedsInput
from crank.mcp.tools import CallContext, CallObserver, Tool, ToolAnnotations, ToolResult
from crank.sources.search import IndexedOperation, OperationIndex
from crank.types import JSONObject
from crank.wire.auth import Principal

__all__ = [
    "CALL_TOOL",
    "DEFAULT_SEARCH_LIMIT",
    "MAX_QUERY_LENGTH",
    "MAX_SEARCH_LIMIT",
    "SCHEMA_TOOL",
    "SEARCH_TOOL",
    "TOOL_NAMES",
    "Discovery",
    "observer_for",
]

SEARCH_TOOL: Final = "search_operations"
SCHEMA_TOOL: Final = "get_operation_schema"
CALL_TOOL: Final = "call_operation"
TOOL_NAMES: Final = frozenset({SEARCH_TOOL, SCHEMA_TOOL, CALL_TOOL})
"""Discovery mode's own tools: no document or prompt of an agent may take one of their names (or texts)."""
DEFAULT_SEARCH_LIMIT: Final = 5
MAX_SEARCH_LIMIT: Final = 20
MAX_QUERY_LENGTH: Final = 500

_SEARCH_DESCRIPTION = (
    "Find the operations of {api} that do a task. Give a few words saying what you want done (e.g. "
    "'delete a repository'); the answer lists operation names with one-line summaries, best match first. "
    f"Then read one's input schema with {SCHEMA_TOOL} and run it with {CALL_TOOL}."
)
_SCHEMA_DESCRIPTION = (
    f"Get one operation's description, full input schema and hints, by the name {SEARCH_TOOL} gave. "
    f"Read it before calling the operation with {CALL_TOOL}."
)
_CALL_DESCRIPTION = (
    f"Run one operation by name with its arguments: an object matching the inputSchema from {SCHEMA_TOOL}. "
    "Invalid arguments come back with the path of each problem. A destructive operation first returns a "
    "confirmation token and changes nothing: to run it, repeat the same call with the token added to "
    "arguments as _crank_confirmation_token."
)
_NAME = {"type": "string", "minLength": 1, "maxLength": 128, "description": f"An operation name from {SEARCH_TOOL}."}
_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class Discovery:
    """The three discovery tools over one agent version's operations: `operations` is their unlisted catalog,
    `indexed` what the search index reads of each (its name, description, URL path and parameters).

    Built once per published version, like any catalog: the full-text index and each operation's
    schema answer are made here; a call then looks things up."""

    def __init__(self, operations: Catalog, indexed: Iterable[IndexedOperation], *, api: str | None = None) -> None:
        self.operations = operations
        self.index = OperationIndex(indexed)
        self._api = api

    def tools(self) -> list[Tool]:
        api = f"this API ({self._api.strip().rstrip('.')})" if self._api and self._api.strip() else "this API"
        return [
            Tool(
                name=SEARCH_TOOL,
                title="Search operations",
                description=_SEARCH_DESCRIPTION.format(api=api),
                input_schema=_object(
                    {
                        "query": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_QUERY_LENGTH,
                            "description": "What you want to do, in a few words.",
                        },
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_SEARCH_LIMIT,
                            "default": DEFAULT_SEARCH_LIMIT,
                            "description": "How many operations to list.",
                        },
                    },  # fmt: skip
                    ["query"],
                ),
                annotations=_READ_ONLY,
                invoker=self._search,
            ),
            Tool(
                name=SCHEMA_TOOL,
                title="Get an operation's schema",
                description=_SCHEMA_DESCRIPTION,
                input_schema=_object({"name": _NAME}, ["name"]),
                annotations=_READ_ONLY,
                invoker=self._schema,
            ),
            Tool(
                name=CALL_TOOL,
                title="Call an operation",
                description=_CALL_DESCRIPTION,
                input_schema=_object(
                    {"name": _NAME, "arguments": {"type": "object", "description": "The operation's arguments."}},
                    ["name"],
                ),
                invoker=self._call,
                authorize=self._authorize,  # a batch checks the operation's scopes before any item runs
            ),
        ]

    async def _search(self, arguments: dict[str, Any], context: CallContext) -> Any:
        limit = arguments.get("limit", DEFAULT_SEARCH_LIMIT)
        caller = context.caller
        if not isinstance(caller, Principal) or caller.scopes is None:
            found = self.index.search(arguments["query"], limit)
        else:  # the same policy as `tools/list`: an operation the caller cannot call is never shown
            found = [op for op in self.index.search(arguments["query"], limit * 4) if self._may_call(op.name, caller)]
            found = found[:limit]
        return {"operations": [{"name": op.name, "summary": op.summary} for op in found]}

    def _may_call(self, name: str, caller: Principal) -> bool:
        entry = self.operations.get(name)
        return entry is not None and not caller.lacks(entry.tool.required_scopes)

    async def _schema(self, arguments: dict[str, Any], context: CallContext) -> Any:
        name = arguments["name"]
        entry = self.operations.get(name)
        caller = context.caller
        if entry is None or (isinstance(caller, Principal) and caller.lacks(entry.tool.required_scopes)):
            raise _unknown(name)
        # What a direct agent would list for it (in the default language), made when asked: decoding every
        # operation's entry up front would cost seconds on a large API (Stripe's schemas are ~90 MB of JSON).
        listed = self.operations.tool_entry(name, self.operations.default_language) or {}
        return {key: listed[key] for key in _DESCRIBED if key in listed}

    def _authorize(self, arguments: Mapping[str, Any], caller: Principal | None) -> None:
        """`call_operation`'s `Tool.authorize`: the scopes of the operation it names, as a direct tool's call checks
        them (the MCP core asks before the call runs, and before any item of a batch runs)."""
        name = arguments.get("name")
        entry = self.operations.get(name) if isinstance(name, str) else None
        if entry is not None:
            authorize_call(entry.tool, caller)

    async def _call(self, arguments: dict[str, Any], context: CallContext) -> Any:
        name = arguments["name"]
        entry = self.operations.get(name)
        if entry is None:
            raise _unknown(name)
        inner = CallContext(
            tool_name=name,
            protocol_version=context.protocol_version,
            headers=context.headers,
            client_info=context.client_info,
            client_capabilities=context.client_capabilities,
            labels=context.labels,
            requested_format=context.requested_format,
            default_format=context.default_format,
            caller=context.caller,
            channel=context.channel,  # an operation that asks the user asks through the same request
            input_responses=context.input_responses,
            request_state=context.request_state,
        )
        result_format = context.result_format(entry.tool.format)  # the endpoint's default too
        # The operation's own pipeline: its validator, invoker, result shaping and observer (its metrics label).
        # A question it asks (2026-07-28) ends call_operation's own call with `input_required`: `_ask_outside`.
        result = await call_tool(entry, arguments.get("arguments") or {}, inner, result_format=result_format,
                                 observer=self.operations.observer, on_input_required=_ask_outside)  # fmt: skip
        if "structuredContent" in result:
            return ToolResult(result["content"], result["structuredContent"], is_error=result["isError"])
        return ToolResult(result["content"], is_error=result["isError"])


def _ask_outside(value: InputRequired, context: CallContext, arguments: dict[str, Any]) -> JSONObject:
    """An operation's question goes out as `call_operation`'s own `input_required` (signed for its arguments,
    which hold the operation's): the client's answer comes back with the same `call_operation` call."""
    raise NeedsInput(value)


def observer_for(observer: CallObserver | None) -> CallObserver | None:
    """The discovery catalog's observer: a `call_operation` that ran an operation was counted under that
    operation already (its own call_tool told the operations' observer), so it is not counted twice."""
    if observer is None:
        return None

    def observe(
        tool: str, error: ToolError | None, seconds: float, request_id: str | None, caller: Principal | None,
        arguments: Mapping[str, Any], /,
    ) -> None:  # fmt: skip
        if tool == CALL_TOOL and error is None:
            return
        observer(tool, error, seconds, request_id, caller, arguments)

    return observe


_DESCRIBED = ("name", "title", "description", "inputSchema", "annotations")
"""The fields of a tool's listing entry that `get_operation_schema` answers (its output schema is left out: the
model learns it from the answer)."""


def _object(properties: JSONObject, required: list[str]) -> JSONObject:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _unknown(name: str) -> UnknownOperationError:
    return UnknownOperationError(
        f"This agent has no operation named {name!r}.",
        recoverable=True,
        suggested_action=f"Find the operation's exact name with {SEARCH_TOOL}, then call again with it.",
        details=[{"path": "$.name", "message": "no such operation"}],
    )
