"""Methods published as MCP tools through the core: filters, roles, transformer, formats, translations."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from crank.mcp.rpc_source import is_published
from crank.rpc import MCP, RPCApp
from crank.rpc.method import Method
from crank.server import MCPConfig, RPCService
from mcp import Client
from tests.rpc.apps import make_app

pytestmark = pytest.mark.anyio


async def tool_names(url: str, **headers: str) -> list[str]:
    async with httpx.AsyncClient() as client:
        return [tool["name"] for tool in (await client.get(url + "/tools", headers=headers)).json()["tools"]]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_official_client_lists_and_calls(serve: Callable[..., str], mode: str) -> None:
    app, _ = make_app()
    async with Client(serve(app) + "/mcp", mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        echoed = await client.call_tool("echo", {"text": "hi", "times": 2})
        missing = await client.call_tool("product.get", {"id": 0})
    assert list(tools) == ["echo", "product.get", "slow", "limited", "boom"]
    assert tools["echo"].description == "Repeat the text."
    assert tools["echo"].input_schema["properties"]["text"] == {"description": "What to repeat.", "type": "string"}
    assert tools["echo"].output_schema == {"type": "object", "properties": {"result": {"type": "string"}},
                                           "required": ["result"]}  # fmt: skip
    assert echoed.structured_content == {"result": "hihi"}
    assert missing.is_error and json.loads(missing.content[0].text) == {
        "code": -32002, "message": "No product 0", "data": {"exception": "NotFoundError"}}  # fmt: skip


async def test_openrpc_and_mcp_output_schemas_agree(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    url = serve(app)
    async with httpx.AsyncClient() as client:
        document = (await client.get(url + "/rpc")).json()
        tools = {tool["name"]: tool for tool in (await client.get(url + "/mcp/tools")).json()["tools"]}
    for method in document["methods"]:
        if method["name"] in tools and "outputSchema" in tools[method["name"]]:
            assert tools[method["name"]]["outputSchema"]["properties"]["result"] == method["result"]["schema"]


async def test_transformer_changes_only_what_mcp_sees(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    url = serve(app)
    async with httpx.AsyncClient() as client:
        mcp = (await client.post(url + "/mcp/call", json={"name": "product.get", "arguments": {"id": 3}})).json()
        rpc = (await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "product.get",
                                                     "params": {"id": 3}})).json()  # fmt: skip
    assert mcp["structuredContent"] == {"result": {"id": 3, "name": "p3"}}
    assert rpc["result"] == {"id": 3, "name": "p3", "secret": "s3cret"}


async def test_cached_method_gets_read_only_and_idempotent_hints(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    async with Client(serve(app) + "/mcp") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert tools["product.get"].annotations is not None
    assert tools["product.get"].annotations.read_only_hint and tools["product.get"].annotations.idempotent_hint
    assert tools["echo"].annotations is None


def test_explicit_false_hint_is_kept() -> None:
    from crank.mcp.rpc_source import _annotations
    from crank.schema import describe_method

    def method() -> None: ...

    schemas = describe_method(method, name="m")
    settings = MCP(read_only_hint=False)
    annotations = _annotations(Method("m", method, schemas, (), ("v1",), cache_ttl=10, mcp=settings))
    assert annotations is not None and annotations.read_only_hint is False and annotations.idempotent_hint is True


async def test_roles_decide_what_is_listed_and_callable(serve: Callable[..., str]) -> None:
    app, ran = make_app()
    url = serve(app) + "/mcp"
    assert "admin.purge" not in await tool_names(url)
    assert "admin.purge" in await tool_names(url, Authorization="Bearer t-admin")
    async with httpx.AsyncClient() as client:
        refused = (await client.post(url + "/call", json={"name": "admin.purge"})).json()
        allowed = (await client.post(url + "/call", json={"name": "admin.purge"},
                                     headers={"Authorization": "Bearer t-admin"})).json()  # fmt: skip
    assert refused["isError"] and refused["error"]["code"] == -32001
    assert allowed["structuredContent"] == {"result": True}
    assert ran.calls.count(("admin.purge", None)) == 1  # the refused call never ran


async def test_versions_have_their_own_endpoints(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    url = serve(app)
    assert "new.thing" not in await tool_names(url + "/mcp")
    assert "new.thing" in await tool_names(url + "/mcp/v2")


async def test_hidden_tool_is_404_on_the_plain_pair_and_32602_on_mcp(serve: Callable[..., str]) -> None:
    app, ran = make_app()
    url = serve(app) + "/mcp"
    async with httpx.AsyncClient() as client:
        assert (await client.post(url + "/call", json={"name": "hidden"})).status_code == 404
    async with Client(url) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("hidden", {})
    assert caught.value.error.code == -32602


async def test_publication_is_off_until_enabled(serve: Callable[..., str]) -> None:
    app = RPCApp()

    @app.method("m", groups=["mcp"], mcp=MCP())
    async def method() -> int:
        return 1

    url = serve(RPCService(app, mcp={"/mcp": MCPConfig()}))
    async with httpx.AsyncClient() as client:
        assert (await client.get(url + "/mcp/tools")).status_code == 404


async def test_rate_limit_applies_to_mcp_only_when_enabled(serve: Callable[..., str]) -> None:
    for apply, expect_error in ((False, False), (True, True)):
        app, _ = make_app(apply_rate_limit=apply)
        url = serve(app) + "/mcp"
        async with httpx.AsyncClient() as client:
            results = [(await client.post(url + "/call", json={"name": "limited"})).json() for _ in range(3)]
        assert results[-1]["isError"] is expect_error
        if expect_error:
            assert results[-1]["error"]["code"] == -32003 and results[-1]["error"]["data"]["retry_after"] >= 1


async def test_endpoint_formatter_reshapes_many_methods(serve: Callable[..., str]) -> None:
    app, _ = make_app(formatter=lambda method, result: {"method": method.name, "value": result})
    async with httpx.AsyncClient() as client:
        result = (await client.post(serve(app) + "/mcp/call", json={"name": "echo", "arguments": {"text": "x"}})).json()
    assert result["structuredContent"] == {"result": {"method": "echo", "value": "x"}}


async def test_translations_from_yaml(serve: Callable[..., str], tmp_path: Path) -> None:
    (tmp_path / "rpc").mkdir()
    (tmp_path / "rpc.uk.yaml").write_text("echo:\n  title: Луна\n  description: Базовий опис\n", encoding="utf-8")
    (tmp_path / "rpc" / "mcp.uk.yaml").write_text("echo:\n  description: Опис для агента\n", encoding="utf-8")
    app, _ = make_app(translations=tmp_path)
    async with httpx.AsyncClient() as client:
        response = await client.get(serve(app) + "/mcp/tools", headers={"Accept-Language": "uk"})
    echo = response.json()["tools"][0]
    assert response.headers["content-language"] == "uk"
    assert echo["title"] == "Луна" and echo["description"] == "Опис для агента"


def method_named(name: str, *, mcp: MCP | None = None, deprecated: bool = False) -> Method:
    from crank.schema import describe_method

    def func() -> None: ...

    return Method(name, func, describe_method(func, name=name), ("mcp",), ("v1",), deprecated=deprecated, mcp=mcp)


@pytest.mark.parametrize(
    ("method", "config", "published"),
    [
        (method_named("a", mcp=MCP()), MCPConfig(exclude_methods=("a",)), False),  # operator deny beats opt-in
        (method_named("a", mcp=MCP(enabled=False)), MCPConfig(whitelist_methods=("a",)), True),  # allow beats opt-out
        (method_named("a", mcp=MCP(enabled=False)), MCPConfig(expose_all=True), False),  # opt-out beats expose_all
        (method_named("a", deprecated=True), MCPConfig(expose_all=True), False),  # deprecated, no opt-in
        (method_named("a", mcp=MCP(), deprecated=True), MCPConfig(), True),  # deprecated with opt-in
        (method_named("x.a", mcp=MCP()), MCPConfig(exclude_prefixes=("x.",)), False),  # prefix deny beats opt-in
        (method_named("a"), MCPConfig(expose_all=True), True),
        (method_named("a", mcp=MCP()), MCPConfig(), True),
        (method_named("a"), MCPConfig(), False),
    ],
)
def test_publication_filters_first_match_wins(method: Method, config: MCPConfig, published: bool) -> None:
    assert is_published(method, config) is published


async def test_other_groups_are_not_published(serve: Callable[..., str]) -> None:
    app, _ = make_app(expose_all=True)
    names = await tool_names(serve(app) + "/mcp")
    assert "other.group" not in names and "hidden" in names


async def test_example_tokens_give_roles(serve: Callable[..., str]) -> None:
    from examples.rpc_app import app

    url = serve(app) + "/mcp/v2"
    assert "user.delete" not in await tool_names(url)
    assert "user.delete" in await tool_names(url, Authorization="Bearer admin-token")


async def test_no_output_schema_for_none_or_a_bare_list(serve: Callable[..., str]) -> None:
    rpc = RPCApp()

    @rpc.method("nothing", groups=["mcp"], mcp=MCP())
    async def nothing() -> None: ...

    @rpc.method("rows", groups=["mcp"], mcp=MCP())
    async def rows() -> list:  # type: ignore[type-arg]
        return [1, "a"]

    @rpc.method("numbers", groups=["mcp"], mcp=MCP())
    async def numbers() -> list[int]:
        return [1]

    url = serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)})) + "/mcp"
    async with Client(url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        mixed = await client.call_tool("rows", {})
    async with httpx.AsyncClient() as http:
        plain = {tool["name"]: tool for tool in (await http.get(url + "/tools")).json()["tools"]}
    assert tools["nothing"].output_schema is None and "outputSchema" not in plain["nothing"]
    assert tools["rows"].output_schema is None and "outputSchema" not in plain["rows"]
    assert tools["numbers"].output_schema == plain["numbers"]["outputSchema"] == {
        "type": "object", "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
        "required": ["result"]}  # fmt: skip
    assert mixed.structured_content == {"result": [1, "a"]}
