"""The `jsonrpc` adapter, with Crank's own example JSON-RPC service as the real upstream on loopback."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from examples.rpc_app import app as rpc_service

from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client
from tests.gateway import upstream

pytestmark = pytest.mark.anyio


async def test_remote_json_rpc_methods_as_tools(registry: Registry, serve: Callable[..., str]) -> None:
    rpc_base, rest_base = serve(rpc_service), serve(upstream.app)
    registry.create_workspace("shop", "Shop")
    query_schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    id_schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    search = {"protocol": "jsonrpc", "target": {"url": rpc_base + "/rpc", "method": "Catalog.search"},
              "description": "Search products.", "output_mapping": {"select": "[].name"},
              "input_schema": query_schema}  # fmt: skip
    get = {"protocol": "jsonrpc", "target": {"url": rpc_base + "/rpc", "method": "Catalog.get"},
           "description": "One product.", "input_schema": id_schema}  # fmt: skip
    # POST /users answers JSON that is no JSON-RPC response (it echoes the body, but has no result or error)
    wrong = {"protocol": "jsonrpc", "target": {"url": rest_base + "/users", "method": "x"}, "description": "Not RPC."}
    for name, spec in (("search", search), ("get", get), ("wrong", wrong)):
        registry.put_operation("shop", name, spec)
    registry.put_agent("shop", "assistant", {"bindings": [{"operation": n} for n in ("search", "get", "wrong")]})
    registry.publish("shop", "assistant")
    url = serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/shop/assistant"

    async with Client(url) as client:
        found = await client.call_tool("search", {"query": "o"})
        missing = await client.call_tool("get", {"id": 99})
        not_rpc = await client.call_tool("wrong", {})
    assert found.structured_content == {"result": ["Kobzar", "Forest Song", "Vinyl: Okean Elzy", "Cossacks"]}
    error = json.loads(missing.content[0].text)
    assert missing.is_error and error["error_code"] == "upstream_rejected" and error["details"] == {"code": -32002}
    assert "No product with id 99" in error["message"]
    assert json.loads(not_rpc.content[0].text)["error_code"] == "upstream_bad_response"
