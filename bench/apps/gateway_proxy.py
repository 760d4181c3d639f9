"""Gateway target: the simplest Python MCP-to-HTTP proxy on httpx, as a raw ASGI app.

Per `tools/call`: parse the JSON-RPC body with orjson, look the tool's upstream path up in a dict, make
one request through a pooled `httpx.AsyncClient` (default settings; the client library Crank's gateway
used before it moved to aiohttp, kept to show why it moved), and wrap the upstream JSON into a
`CallToolResult` (the body as text, the parsed value as `structuredContent: {"result": ...}`, the
shape Crank's gateway returns). No argument validation, no auth, no protocol-version handling.
`tools/list` pages are serialized once at import, 100 tools a page (at `/small`, the one page of two tools).
`gateway_proxy_aiohttp` is the same app with aiohttp as the client, and the reference of the gateway's targets.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from bench.apps.gateway_catalog import (
    DESCRIPTION,
    INPUT_SCHEMA,
    N_TOOLS,
    OUTPUT_SCHEMA,
    PAGE_SIZE,
    SMALL_PROXY_PATH,
    SMALL_TOOLS,
    tool_name,
    tool_path,
    upstream,
)

Fetch = Callable[[str], Awaitable[tuple[int, bytes]]]
"""GET one URL through a pooled client: (status, body)."""

BASE = upstream()
PATHS = {tool_name(i): tool_path(i) for i in range(N_TOOLS)}
_WIRE = [
    {"name": name, "title": name, "description": DESCRIPTION, "inputSchema": INPUT_SCHEMA,
     "outputSchema": {"type": "object", "properties": {"result": OUTPUT_SCHEMA}, "required": ["result"]}}
    for name in PATHS
]  # fmt: skip
PAGES = [
    orjson.dumps({"tools": _WIRE[start : start + PAGE_SIZE], "nextCursor": str(n + 1)})
    if start + PAGE_SIZE < N_TOOLS
    else orjson.dumps({"tools": _WIRE[start:]})
    for n, start in enumerate(range(0, N_TOOLS, PAGE_SIZE))
]
SMALL_PAGE = orjson.dumps({"tools": _WIRE[:SMALL_TOOLS]})  # bench/wrk/gateway_list_small.lua: one page
JSON_HEADERS = [(b"content-type", b"application/json")]


def make_app(fetch: Fetch) -> Callable[..., Awaitable[None]]:
    async def call(params: dict[str, Any]) -> bytes:
        path = PATHS[params["name"]].replace("{id}", quote(str(params["arguments"]["id"]), safe=""))
        status, body = await fetch(BASE + path)
        if status >= 400:
            result: dict[str, Any] = {"content": [{"type": "text", "text": f"HTTP {status}"}], "isError": True}
        else:
            result = {"content": [{"type": "text", "text": body.decode()}],
                      "structuredContent": {"result": orjson.loads(body)}, "isError": False}  # fmt: skip
        return orjson.dumps(result)

    async def respond(request: dict[str, Any], small: bool) -> bytes:
        method = request.get("method")
        if method == "tools/call":
            result = await call(request["params"])
        elif method == "tools/list":
            result = SMALL_PAGE if small else PAGES[int((request.get("params") or {}).get("cursor") or 0)]
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            return orjson.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error})
        return b'{"jsonrpc":"2.0","id":' + orjson.dumps(request["id"]) + b',"result":' + result + b"}"

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        out = await respond(orjson.loads(body), scope["path"] == SMALL_PROXY_PATH)
        headers = [*JSON_HEADERS, (b"content-length", str(len(out)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    return app


client = httpx.AsyncClient()


async def fetch(url: str) -> tuple[int, bytes]:
    response = await client.get(url)
    return response.status_code, response.content


app = make_app(fetch)
