"""Target (a): Crank's MCP endpoint serving the shared benchmark catalog (echo + 999 filler tools)."""

from __future__ import annotations

from typing import Any

from bench.apps.catalog import tool_specs
from crank.mcp import CallContext, Catalog, MCPEndpoint, Tool


async def echo(arguments: dict[str, Any], context: CallContext) -> str:
    return str(arguments["text"])


catalog = Catalog(
    [
        Tool(
            name=spec["name"],
            description=spec["description"],
            input_schema=spec["inputSchema"],
            invoker=echo,
            format="plain",
        )
        for spec in tool_specs()
    ],
    page_size=1000,
)
app = MCPEndpoint(catalog)
