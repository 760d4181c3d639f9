"""Target (b): the official `mcp` SDK's low-level `Server`, stateless JSON-response mode."""

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from bench.apps.catalog import tool_specs

TOOLS = [types.Tool.model_validate(spec) for spec in tool_specs()]
SCHEMAS = {tool.name: tool.input_schema for tool in TOOLS}


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    text = (params.arguments or {}).get("text")
    if params.name not in SCHEMAS or not isinstance(text, str):
        return types.CallToolResult(content=[types.TextContent(type="text", text="bad call")], is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server(
    "bench-sdk-lowlevel",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    # Lets the 2026-07-28 path look up a tool's schema for Mcp-Param header checks
    # instead of running tools/list (1,000 tools) on every tools/call.
    get_tool_input_schema=SCHEMAS.get,
)
app = server.streamable_http_app(streamable_http_path="/", json_response=True, stateless_http=True)
