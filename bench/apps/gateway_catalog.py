"""What every gateway target serves: 1,000 tools, each one GET to the upstream (nginx, bench/upstream/).

`get_item` (input `{"id": integer}`) calls `GET <upstream>/items/{id}`; 999 filler tools with the same
schemas call `GET <upstream>/t/NNN/items/{id}`. The upstream answers every such path with the fixed
item below, carrying the requested id. Crank's gateway builds the tools from registry operations, the
FastMCP peer from an OpenAPI document with the same operations, and the simplest proxy from this list.

The upstream's base URL comes from the environment (`BENCH_UPSTREAM`, set by `bench/run.py`).
"""

from __future__ import annotations

import os
from typing import Any

N_TOOLS = 1000
PAGE_SIZE = 100  # Crank's gateway pages tools/list by 100; the peers are configured the same
SMALL_TOOLS = 2  # the agent `small`: issue 19 measured tools/list on an agent of two tools (all per-request work)
SMALL_PROXY_PATH = "/small"  # where the simplest proxies (gateway_proxy.py) serve those two tools
CALL_TOOL = "get_item"
DESCRIPTION = "Fetch one catalog item by its id."
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"id": {"type": "integer", "description": "The item id."}},
    "required": ["id"],
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "price": {"type": "number"},
        "currency": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "in_stock": {"type": "boolean"},
    },
    "required": ["id", "name", "price"],
}


def upstream() -> str:
    return os.environ["BENCH_UPSTREAM"].rstrip("/")


def item(item_id: int) -> dict[str, Any]:
    """The body the upstream returns for any item id (bench/upstream/nginx.conf writes the same JSON)."""
    return {"id": item_id, "name": "widget", "price": 9.5, "currency": "EUR", "tags": ["blue", "small"],
            "in_stock": True}  # fmt: skip


def tool_name(i: int) -> str:
    return CALL_TOOL if i == 0 else f"{CALL_TOOL}_{i:03d}"


def tool_path(i: int) -> str:
    """The upstream path template of tool `i` (`{id}` is the argument)."""
    return "/items/{id}" if i == 0 else f"/t/{i:03d}/items/{{id}}"


def tool_names() -> list[str]:
    return [tool_name(i) for i in range(N_TOOLS)]


def openapi_spec(base_url: str) -> dict[str, Any]:
    """The same 1,000 operations as an OpenAPI 3.1 document (for FastMCP's OpenAPI integration)."""
    paths: dict[str, Any] = {}
    for i in range(N_TOOLS):
        paths[tool_path(i)] = {
            "get": {
                "operationId": tool_name(i),
                "description": DESCRIPTION,
                "parameters": [
                    {
                        "name": "id",
                        "in": "path",
                        "required": True,
                        "description": "The item id.",
                        "schema": {"type": "integer"},
                    },
                ],  # fmt: skip
                "responses": {
                    "200": {"description": "The item.", "content": {"application/json": {"schema": OUTPUT_SCHEMA}}}
                },
            }
        }
    return {"openapi": "3.1.0", "info": {"title": "bench items", "version": "1"}, "servers": [{"url": base_url}],
            "paths": paths}  # fmt: skip
