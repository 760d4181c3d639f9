"""Gateway target: FastMCP's OpenAPI integration fronting the same upstream (runs under bench/.venv-peers).

`FastMCP.from_openapi` over the OpenAPI document of the same 1,000 operations
(`gateway_catalog.openapi_spec`), with one pooled `httpx2.AsyncClient` (FastMCP 4's client library;
default settings) for the upstream. Served by its Streamable HTTP app in stateless JSON-response mode
(`stateless_http=True, json_response=True`, the same mode as the SDK targets), so that a single POST
with no `initialize` and no session is answered with `application/json`. `list_page_size=100` pages
`tools/list` as Crank's gateway does. Everything else is FastMCP's default (including validating the
upstream's answer against the operation's response schema).
"""

from __future__ import annotations

import httpx2
from fastmcp import FastMCP

from bench.apps.gateway_catalog import PAGE_SIZE, openapi_spec, upstream

server = FastMCP.from_openapi(
    openapi_spec(upstream()),
    client=httpx2.AsyncClient(base_url=upstream()),
    name="bench-fastmcp-openapi",
    list_page_size=PAGE_SIZE,
)
app = server.http_app(path="/", stateless_http=True, json_response=True)
