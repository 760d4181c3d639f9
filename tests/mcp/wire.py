"""Raw request helpers for tests that check the wire itself."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

MODERN = "2026-07-28"
JSON_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def modern_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    }


def modern_request(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**(params or {}), "_meta": modern_meta()}}


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    headers = {**JSON_HEADERS, "MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
"""The param a 2026-07-28 request mirrors in `Mcp-Name` (the official SDK's NAME_BEARING_METHODS)."""


def headers_for(request: dict[str, Any]) -> dict[str, str]:
    """`modern_headers` for a 2026-07-28 request body, its `Mcp-Name` taken from the body as a client does."""
    key = NAME_PARAM.get(request["method"])
    name = (request.get("params") or {}).get(key) if key else None
    return modern_headers(request["method"], name if isinstance(name, str) else None)


def legacy_request(method: str, params: dict[str, Any] | None = None, request_id: int | str = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def legacy_headers(version: str = "2025-11-25") -> dict[str, str]:
    return {**JSON_HEADERS, "MCP-Protocol-Version": version}


async def next_message(lines: AsyncIterator[str]) -> dict[str, Any]:
    """The next JSON-RPC message of an SSE stream read line by line (the priming event has no data)."""
    async for line in lines:
        if line.startswith("data: {"):
            message: dict[str, Any] = json.loads(line[6:])
            return message
    raise AssertionError("the stream ended before another message")


async def rest_messages(lines: AsyncIterator[str]) -> list[dict[str, Any]]:
    """Every JSON-RPC message left on an SSE stream, until it ends."""
    return [json.loads(line[6:]) async for line in lines if line.startswith("data: {")]
