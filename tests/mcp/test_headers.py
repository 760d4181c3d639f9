"""`Mcp-Param-*` headers declared with `x-mcp-header`, the base64 sentinel, required client capabilities."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crank.exceptions import ConfigurationError
from crank.mcp import CallContext, Catalog, MCPEndpoint, Tool
from crank.mcp.headers import decode_header_value
from tests.mcp.wire import modern_headers, modern_request

pytestmark = pytest.mark.anyio


async def echo(arguments: dict[str, Any], context: CallContext) -> Any:
    return arguments


SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
    },
}


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    tools = [
        Tool(name="routed", description="Routed.", input_schema=SCHEMA, invoker=echo),
        Tool(
            name="samples", description="Needs sampling.", invoker=echo, required_client_capabilities={"sampling": {}}
        ),
    ]
    return serve(MCPEndpoint(Catalog(tools)))


async def call(url: str, name: str, arguments: dict[str, Any], headers: dict[str, str], caps: Any = None) -> Any:
    body = modern_request("tools/call", {"name": name, "arguments": arguments})
    if caps is not None:
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps
    async with httpx.AsyncClient() as client:
        response = await client.post(
            url, content=json.dumps(body), headers={**modern_headers("tools/call", name), **headers}
        )
    return response


@pytest.mark.parametrize(
    ("arguments", "headers", "ok"),
    [
        ({"region": "eu", "count": 3}, {"Mcp-Param-Region": "eu", "Mcp-Param-Count": "3"}, True),
        ({"region": "eu", "count": 3}, {"Mcp-Param-Region": "eu", "Mcp-Param-Count": "3.0"}, True),
        ({"region": "Hello"}, {"Mcp-Param-Region": "=?base64?SGVsbG8=?="}, True),
        ({}, {}, True),
        ({"region": "eu"}, {}, False),
        ({"region": "eu"}, {"Mcp-Param-Region": "us"}, False),
        ({}, {"Mcp-Param-Region": "eu"}, False),
        ({"region": "Hello"}, {"Mcp-Param-Region": "=?base64?SGVsbG8?="}, False),
    ],
)
async def test_param_headers_must_agree_with_arguments(
    url: str, arguments: dict[str, Any], headers: dict[str, str], ok: bool
) -> None:
    response = await call(url, "routed", arguments, headers)
    if ok:
        assert response.status_code == 200 and response.json()["result"]["isError"] is False
    else:
        assert response.status_code == 400 and response.json()["error"]["code"] == -32020


async def test_missing_client_capability_is_32021(url: str) -> None:
    response = await call(url, "samples", {}, {}, caps={})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32021 and error["data"] == {"requiredCapabilities": {"sampling": {}}}
    assert response.json()["id"] == 1


async def test_declared_client_capability_is_accepted(url: str) -> None:
    response = await call(url, "samples", {}, {}, caps={"sampling": {}})
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "object", "x-mcp-header": "A"}}},
            "string, integer or boolean",
        ),
        ({"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "bad header"}}}, "token"),
        (
            {
                "type": "object",
                "properties": {
                    "a": {"type": "string", "x-mcp-header": "A"},
                    "b": {"type": "string", "x-mcp-header": "a"},
                },
            },
            "declared twice",
        ),
    ],
)
def test_bad_header_declarations_are_refused_at_build(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Catalog([Tool(name="t", description="T.", input_schema=schema, invoker=echo)])


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("plain", "plain"),
        ("  padded  ", "padded"),
        ("=?base64?w7w=?=", "ü"),
        ("=?base64?w7w?=", None),
        ("=?base64?!!?=", None),
        ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),
        (None, None),
    ],
)
def test_header_value_sentinel(raw: str | None, decoded: str | None) -> None:
    assert decode_header_value(raw) == decoded
