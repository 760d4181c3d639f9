"""Target (c): the official `mcp` SDK's high-level `MCPServer` (FastMCP's successor), stateless JSON mode."""

from mcp.server.mcpserver import MCPServer

from bench.apps.catalog import ECHO_DESCRIPTION, ECHO_NAME, N_TOOLS, filler_description, filler_name


def echo(text: str) -> str:
    return text


server = MCPServer("bench-sdk-mcpserver", log_level="WARNING")
server.add_tool(echo, name=ECHO_NAME, description=ECHO_DESCRIPTION, structured_output=False)
for i in range(1, N_TOOLS):
    server.add_tool(echo, name=filler_name(i), description=filler_description(i), structured_output=False)
app = server.streamable_http_app(streamable_http_path="/", json_response=True, stateless_http=True)
