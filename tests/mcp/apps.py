"""Tools and endpoints shared by the MCP tests."""

from __future__ import annotations

import logging
from typing import Any

from crank.exceptions import ToolError
from crank.mcp import (
    CallContext,
    Catalog,
    EndpointOptions,
    MCPEndpoint,
    Tool,
    ToolAnnotations,
    ToolResult,
    Translations,
)

calls: list[dict[str, Any]] = []


async def echo(arguments: dict[str, Any], context: CallContext) -> Any:
    calls.append(arguments)
    return {"text": arguments["text"]}


async def rows(arguments: dict[str, Any], context: CallContext) -> Any:
    return [{"id": i, "name": f"n{i}"} for i in range(arguments.get("count", 2))]


async def fail(arguments: dict[str, Any], context: CallContext) -> Any:
    raise ToolError("Out of stock", error_code="out_of_stock", recoverable=True, suggested_action="Try tomorrow.")


async def crash(arguments: dict[str, Any], context: CallContext) -> Any:
    raise RuntimeError("secret database password is hunter2")


async def image(arguments: dict[str, Any], context: CallContext) -> Any:
    return ToolResult([{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}])


ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}


def make_tools(extra: int = 0) -> list[Tool]:
    tools = [
        Tool(
            name="echo",
            title="Echo",
            description="Repeat the text.",
            input_schema=ECHO_SCHEMA,
            output_schema={"type": "object", "properties": {"text": {"type": "string"}}},
            annotations=ToolAnnotations(read_only_hint=True),
            invoker=echo,
        ),
        Tool(
            name="rows",
            description="Some rows.",
            input_schema={
                "type": "object",
                "properties": {"count": {"type": "integer"}},
                "additionalProperties": False,
            },
            output_schema={"type": "object", "properties": {"result": {"type": "array"}}, "required": ["result"]},
            wrap_result=True,
            invoker=rows,
        ),
        Tool(name="fail", description="Always fails.", invoker=fail),
        Tool(name="crash", description="Raises an unexpected exception.", invoker=crash),
        Tool(name="image", description="Returns an image.", invoker=image),
    ]
    tools += [Tool(name=f"t{i:04d}", description=f"Tool {i}", invoker=echo) for i in range(extra)]
    return tools


TRANSLATIONS = Translations(
    {"uk": {"echo": {"title": "Луна", "description": "Повторити текст."}}},
    default_language="en",
)


def make_endpoint(**options: Any) -> MCPEndpoint:
    page_size = options.pop("page_size", 100)
    extra = options.pop("extra", 0)
    catalog = Catalog(make_tools(extra), translations=TRANSLATIONS, page_size=page_size)
    return MCPEndpoint(catalog, EndpointOptions(**options))


logging.getLogger("crank.mcp").setLevel(logging.INFO)
