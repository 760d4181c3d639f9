"""Seed 002's plain HTTP pair: GET <base>/tools and POST <base>/call with its status table."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crank.exceptions import CatalogNotFoundError
from crank.mcp import Catalog, EndpointAccess, EndpointOptions, MCPEndpoint
from crank.wire.middleware import TokenTable
from tests.mcp.apps import make_endpoint, make_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    return serve(make_endpoint(max_body_size=2000))


async def call(url: str, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient() as client:
        return await client.post(
            url + "/call", content=content, headers={"Content-Type": "application/json", **headers}
        )


async def test_tools_lists_every_tool_in_the_negotiated_language(url: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.get(url + "/tools", headers={"Accept-Language": "uk"})
    assert response.status_code == 200
    assert response.headers["content-language"] == "uk" and response.headers["vary"] == "Accept-Language"
    tools = response.json()["tools"]
    assert [tool["name"] for tool in tools] == ["echo", "rows", "fail", "crash", "image"]
    assert tools[0]["title"] == "Луна" and "inputSchema" in tools[0]


async def test_call_success(url: str) -> None:
    response = await call(url, {"name": "echo", "arguments": {"text": "hi"}})
    assert response.status_code == 200
    assert response.json() == {
        "content": [{"type": "text", "text": '{"text":"hi"}'}],
        "structuredContent": {"text": "hi"},
        "isError": False,
    }


async def test_call_uses_the_format_header(url: str) -> None:
    response = await call(url, {"name": "rows", "arguments": {"count": 1}}, **{"X-Mcp-Format": "toon"})
    assert response.json()["content"][0]["text"] == "[1]{id,name}:\n  0,n0"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, -32700),
        ([1, 2], 400, -32600),
        ({"arguments": {}}, 400, -32600),
        ({"name": "echo", "arguments": "x"}, 400, -32600),
        ({"name": "nope"}, 404, -32601),
        ({"name": "echo", "arguments": {"text": "x" * 3000}}, 413, -32600),
    ],
)
async def test_status_table(url: str, body: Any, status: int, code: int) -> None:
    response = await call(url, body)
    assert response.status_code == status
    payload = response.json()
    assert payload["isError"] is True
    assert payload["error"]["code"] == code
    assert payload["content"][0]["type"] == "text"


async def test_invalid_arguments_are_200_with_is_error(url: str) -> None:
    response = await call(url, {"name": "echo", "arguments": {"nope": 1}})
    assert response.status_code == 200
    payload = response.json()
    assert payload["isError"] is True
    assert payload["error"]["error_code"] == "invalid_arguments"
    assert {v["path"] for v in payload["error"]["details"]} == {"$.text", "$.nope"}


async def test_invalid_arguments_in_error_mode_are_200_with_32602(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(invalid_arguments="error"))
    response = await call(url, {"name": "echo", "arguments": {}})
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32602


async def test_tool_failure_is_200_with_is_error(url: str) -> None:
    response = await call(url, {"name": "fail"})
    assert response.status_code == 200
    assert response.json()["error"]["error_code"] == "out_of_stock"


async def test_unknown_format_is_400(url: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(url + "/call?format=xml", json={"name": "echo", "arguments": {"text": "a"}})
    assert response.status_code == 400
    assert "allowed: json" in response.json()["error"]["message"]


async def test_wrong_methods_are_405(url: str) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.post(url + "/tools")).status_code == 405
        assert (await client.get(url + "/call")).status_code == 405


async def test_pair_can_be_turned_off(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(plain_http=False))
    async with httpx.AsyncClient() as client:
        assert (await client.get(url + "/tools")).status_code == 404


def plain_error(response: httpx.Response, status: int, code: int) -> str:
    """Asserts the pair's one error shape; returns the message."""
    body = response.json()
    assert response.status_code == status, body
    assert set(body) == {"isError", "error", "content"} and body["isError"] is True
    assert set(body["error"]) >= {"code", "message"} and body["error"]["code"] == code
    assert body["content"] == [{"type": "text", "text": body["error"]["message"]}]
    message: str = body["error"]["message"]
    return message


@pytest.mark.parametrize("route", ["/tools", "/call"])
async def test_every_refusal_of_the_pair_has_its_error_shape(serve: Callable[..., str], route: str) -> None:
    async def provide(scope: dict[str, Any]) -> Any:
        if scope["path_params"]["agent"] == "missing":
            raise CatalogNotFoundError("no such agent")
        return Catalog(make_tools(0))

    endpoint = MCPEndpoint(provide, EndpointOptions(max_body_size=100), EndpointAccess(TokenTable({"key": "key"}.get)))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        agent, _, rest = scope.get("path", "/").removeprefix("/").partition("/")
        scope = {**scope, "root_path": f"/{agent}", "path_params": {"agent": agent}}
        await endpoint(scope, receive, send)

    base = serve(app)
    key = {"Authorization": "Bearer key"}
    right, wrong = ("GET", "POST") if route == "/tools" else ("POST", "GET")
    body = {"name": "echo", "arguments": {"text": "hi"}}
    async with httpx.AsyncClient() as client:
        unauthorized = await client.request(right, f"{base}/agent{route}", json=body)
        missing = await client.request(right, f"{base}/missing{route}", json=body, headers=key)
        not_allowed = await client.request(wrong, f"{base}/agent{route}", headers=key)
        host = await client.request(right, f"{base}/agent{route}", json=body, headers={**key, "Host": "evil.example"})
        origin = await client.request(right, f"{base}/agent{route}", json=body,
                                      headers={**key, "Origin": "http://evil.example"})  # fmt: skip
        too_large = await client.request(right, f"{base}/agent{route}", json={"x": "y" * 200}, headers=key)
    assert "API key" in plain_error(unauthorized, 401, -32600) and "www-authenticate" in unauthorized.headers
    assert plain_error(missing, 404, -32600) == "no such agent"  # the provider's own sentence
    assert plain_error(not_allowed, 405, -32600) == f"Method not allowed: use {right}"
    assert not_allowed.headers["allow"] == right
    assert "Host" in plain_error(host, 421, -32600)
    assert "Origin" in plain_error(origin, 403, -32600)
    assert "exceeds 100 bytes" in plain_error(too_large, 413, -32600)
