"""What an MCP client needs to reach an agent: its configuration (the `mcpServers` entry most clients read), a
Python snippet for the official SDK, and the MCP Inspector's command line. `crank serve --openapi`, `crank demo` and
the console's agent page print them."""

from __future__ import annotations

from crank import _json

__all__ = ["PYTHON_SNIPPET", "client_config", "client_setups"]


def client_config(url: str, key: str, *, name: str) -> str:
    """The `mcpServers` entry most MCP clients accept (Claude Code's .mcp.json, Cursor, VS Code...)."""
    entry = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {key}"}}
    return _json.dumps_pretty({"mcpServers": {name: entry}}).decode()


def client_setups(url: str, key: str, *, name: str) -> str:
    """Ready-to-use client setups for an MCP endpoint and its key: the JSON client configuration, a Python
    snippet for the official MCP SDK, and the MCP Inspector's command line."""
    config = client_config(url, key, name=name)
    return "\n".join([
        "Client configuration (Claude Code's .mcp.json, Cursor, VS Code, ...):",
        "",
        config,
        "",
        "Python, with the official MCP SDK (pip install mcp):",
        "",
        PYTHON_SNIPPET.format(url=url, key=key).rstrip(),
        "",
        "MCP Inspector, on the command line:",
        "",
        f'npx @modelcontextprotocol/inspector --cli {url} --transport http --header "Authorization: Bearer {key}" '
        "--method tools/list",
    ])  # fmt: skip


PYTHON_SNIPPET = """\
import asyncio

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = "{url}"
KEY = "{key}"


async def main() -> None:
    async with httpx2.AsyncClient(headers={{"Authorization": f"Bearer {{KEY}}"}}) as http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            tools = (await client.list_tools()).tools
            print(f"{{len(tools)}} tools:", ", ".join(tool.name for tool in tools[:10]))


asyncio.run(main())
"""
"""The official MCP Python SDK's client (2.x), sending the key on every request."""
