"""Methods published as MCP tools through the core: filters, roles, transformer, formats, translations."""

from __future__ import annotations

import datetime
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from crank.rpc import MCP, Event, RPCApp
from crank.rpc.method import Method
from crank.server import MCPConfig, RPCService
from crank.sources.rpc import is_published
from mcp import Client
from tests.mcp.wire import modern_headers, modern_request
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
    error = json.loads(missing.content[0].text)
    assert missing.is_error and re.fullmatch("[0-9a-f]{32}", error.pop("request_id"))
    assert error == {"code": -32002, "message": "No product 0", "data": {"exception": "NotFoundError"}}


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
    from crank.schema import describe_method
    from crank.sources.rpc import _annotations

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


async def test_a_service_mounted_below_a_path_hands_each_mcp_path_to_its_own_endpoint_only(
    serve: Callable[..., str],
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app, _ = make_app()
    url = serve(Starlette(routes=[Mount("/shop", app=app)])) + "/shop"  # the outer root path a proxy would set
    assert "new.thing" not in await tool_names(url + "/mcp") and "echo" in await tool_names(url + "/mcp")
    assert "new.thing" in await tool_names(url + "/mcp/v2")
    async with httpx.AsyncClient() as client:
        listed = (await client.get(url + "/mcp/tools")).json()  # the plain pair, below the endpoint's root
        assert "echo" in [tool["name"] for tool in listed["tools"]]
        for elsewhere in ("/mcpx", "/mcp2", "/shop/mcp"):  # never taken for the endpoint at /mcp
            answer = await client.post(url + elsewhere, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert answer.status_code == 404, elsewhere


async def test_an_mcp_endpoint_at_the_root_leaves_the_json_rpc_endpoint_its_path(serve: Callable[..., str]) -> None:
    rpc = RPCApp(title="Root")

    @rpc.method("hello", groups=["mcp"], mcp=MCP())
    async def hello() -> str:
        return "hi"

    url = serve(RPCService(rpc, mcp={"/": MCPConfig(enabled=True)}))
    async with httpx.AsyncClient() as client:
        called = await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "hello"})
        assert called.status_code == 200 and called.json()["result"] == "hi"  # the JSON-RPC endpoint's answer
    assert await tool_names(url) == ["hello"]  # and MCP at the root


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


# One argument rule: the executor's pydantic conversion decides, on /rpc and over MCP alike.
ARGUMENT_SETS: list[tuple[dict[str, Any], bool]] = [
    ({"text": "a", "times": 5}, True),
    ({"text": "a", "times": "5"}, True),  # lax mode converts "5" to 5; a JSON Schema validator would refuse it
    ({"text": "a", "times": 2.0}, True),
    ({"text": "a", "times": "five"}, False),
    ({"text": "a", "times": 2.5}, False),
    ({"text": 5}, False),
    ({}, False),
    ({"text": "a", "extra": 1}, False),
]


async def rpc_answer(http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer: dict[str, Any] = (await http.post(url + "/rpc", json=body)).json()
    return answer


@pytest.mark.parametrize("mode", ["result", "error"])
async def test_rpc_and_mcp_accept_and_refuse_the_same_arguments(serve: Callable[..., str], mode: str) -> None:
    app, ran = make_app(invalid_arguments=mode)
    url = serve(app)
    seen = []
    async with httpx.AsyncClient() as http, Client(url + "/mcp") as client:
        for arguments, expected in ARGUMENT_SETS:
            rpc = await rpc_answer(http, url, "echo", arguments)
            rpc_paths = sorted(v["path"] for v in rpc["error"]["data"]["violations"]) if "error" in rpc else None
            try:
                result = await client.call_tool("echo", arguments)
            except MCPError as exc:  # invalid_arguments="error": JSON-RPC -32602 with every violation
                assert exc.error.code == -32602 and mode == "error"
                mcp_paths = sorted(v["path"] for v in exc.error.data["violations"])
            else:
                mcp_paths = None
                if result.is_error:  # invalid_arguments="result": the structured tool error
                    error = json.loads(result.content[0].text)
                    assert mode == "result" and error["error_code"] == "invalid_arguments", error
                    assert error["error_class"] == "schema_validation" and error["recoverable"] is True
                    assert re.fullmatch("[0-9a-f]{32}", error["request_id"])
                    mcp_paths = sorted(v["path"] for v in error["details"])
                else:
                    assert result.structured_content == {"result": rpc["result"]}
            seen.append((arguments, expected, rpc_paths is None, mcp_paths is None, rpc_paths == mcp_paths))
    assert seen == [(arguments, expected, expected, expected, True) for arguments, expected in ARGUMENT_SETS]
    accepted = sum(expected for _, expected in ARGUMENT_SETS)
    assert len(ran.calls) == 2 * accepted  # a refused call never ran, on either path


async def test_invalid_mcp_arguments_are_refused_by_the_executor(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    events: list[Event] = []
    app.rpc.on("error")(events.append)  # seed 001: every error, validation included, goes through `error`
    async with Client(serve(app) + "/mcp") as client:
        result = await client.call_tool("echo", {"times": "five", "extra": 1})
    error = json.loads(result.content[0].text)
    assert result.is_error and result.structured_content is None
    assert error["message"] == "Invalid arguments for tool 'echo': 3 violation(s)"
    assert {v["path"] for v in error["details"]} == {"$.text", "$.times", "$.extra"}
    assert error["suggested_action"] == "Correct the arguments listed in details and call the tool again."
    assert [(event.source, event.method, event.request_id) for event in events] == [
        ("mcp", "echo", error["request_id"])]  # fmt: skip


def failing_app() -> tuple[RPCService, list[Event]]:
    rpc = RPCApp()
    events: list[Event] = []
    rpc.on("error")(events.append)

    @rpc.method("broken", groups=["mcp"], mcp=MCP())
    async def broken(id: int) -> int:
        raise RuntimeError("no database")

    return RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)}), events


async def test_one_request_id_per_mcp_call_in_logs_events_and_error(
    serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    app, events = failing_app()
    caplog.set_level(logging.DEBUG, logger="crank")
    async with Client(serve(app) + "/mcp") as client:
        result = await client.call_tool("broken", {"id": 7})
    seen = json.loads(result.content[0].text)["request_id"]
    ids = []
    for record in caplog.records:
        ids += re.findall(r"request_id=([0-9a-f]{32})", record.getMessage())
        if hasattr(record, "request_id"):
            ids.append(record.request_id)
    assert len(ids) >= 3 and set(ids) == {seen}  # the executor's debug and error lines, the MCP layer's line
    assert [event.request_id for event in events] == [seen]


async def test_rpc_tool_errors_carry_the_request_id(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    url = serve(app) + "/mcp"
    async with Client(url) as client:
        missing = await client.call_tool("product.get", {"id": 0})
        boom = await client.call_tool("boom", {})
    async with httpx.AsyncClient() as http:
        plain = (await http.post(url + "/call", json={"name": "product.get", "arguments": {"id": 0}})).json()
    ids = [json.loads(missing.content[0].text)["request_id"], json.loads(boom.content[0].text)["request_id"],
           plain["error"]["request_id"]]  # fmt: skip
    assert all(re.fullmatch("[0-9a-f]{32}", request_id) for request_id in ids) and len(set(ids)) == 3
    assert json.loads(boom.content[0].text)["code"] == -32603 and plain["error"]["code"] == -32002


class Line(BaseModel):
    name: str


async def test_violation_paths_point_into_the_arguments_on_both_paths(serve: Callable[..., str]) -> None:
    rpc = RPCApp()

    @rpc.method("order", groups=["mcp"], mcp=MCP())
    async def order(lines: list[Line], by: dict[str, Line], when: datetime.date | int = 0) -> int:
        return len(lines)

    url = serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)}))
    arguments = {"lines": [{"name": "a"}, {"name": 1}], "by": {"a b": {}}, "when": "soon"}
    async with httpx.AsyncClient() as http, Client(url + "/mcp") as client:
        refused = (await rpc_answer(http, url, "order", arguments))["error"]["data"]["violations"]
        result = await client.call_tool("order", arguments)
    expected = {"$.lines[1].name", "$.by['a b'].name", "$.when"}  # not "$.when.date" and "$.when.int"
    assert {violation["path"] for violation in refused} == expected
    assert {violation["path"] for violation in json.loads(result.content[0].text)["details"]} == expected


async def test_plain_listing_names_the_roles_a_caller_needs(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    url = serve(app) + "/mcp"
    admin = {"Authorization": "Bearer t-admin"}
    async with httpx.AsyncClient() as http:
        plain = (await http.get(url + "/tools", headers=admin)).json()["tools"]
        listed = (await http.post(url, json=modern_request("tools/list"),
                                  headers={**modern_headers("tools/list"), **admin})).json()  # fmt: skip
    roles = {tool["name"]: tool["roles"] for tool in plain}
    assert roles == {"echo": [], "product.get": [], "slow": [], "limited": [], "boom": [], "admin.purge": ["admin"]}
    assert list(plain[0])[:5] == ["name", "title", "description", "roles", "inputSchema"]  # seed 002's order
    assert len(listed["result"]["tools"]) == len(plain)
    assert all("roles" not in tool for tool in listed["result"]["tools"])  # MCP tools/list never carries them
    async with Client(url) as client:
        tools = (await client.list_tools()).tools
    assert tools and all("roles" not in (tool.model_extra or {}) for tool in tools)


class Tag(BaseModel):
    name: str


class Item(BaseModel):
    id: int
    tags: list[Tag]


def _dereferenced(schema: Any, definitions: dict[str, Any], prefix: str, depth: int = 0) -> Any:
    """`schema` with every `$ref` under `prefix` replaced by its definition (models here are not recursive)."""
    assert depth < 20
    if isinstance(schema, list):
        return [_dereferenced(item, definitions, prefix, depth) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(prefix):
        return _dereferenced(definitions[ref[len(prefix) :]], definitions, prefix, depth + 1)
    return {key: _dereferenced(value, definitions, prefix, depth) for key, value in schema.items() if key != "$defs"}


async def test_openrpc_and_mcp_describe_model_results_alike_once_their_references_are_followed(
    serve: Callable[..., str],
) -> None:
    """What docs/rpc.md says is the same: OpenRPC names a model `#/components/schemas/Item` of its document,
    MCP `#/$defs/Item` of the tool's own schema (self-contained) and wraps it as `{"result": ...}`; followed,
    the two schemas are equal."""
    from crank.rpc import MCP, RPCApp
    from crank.server import MCPConfig, RPCService

    rpc = RPCApp(title="Items")

    @rpc.method("item.get", groups=["mcp"], mcp=MCP())
    def get_item(id: int) -> Item:
        return Item(id=id, tags=[Tag(name="new")])

    @rpc.method("item.list", groups=["mcp"], mcp=MCP())
    def list_items() -> list[Item]:
        return []

    url = serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)}))
    async with httpx.AsyncClient() as client:
        document = (await client.get(url + "/rpc")).json()
        tools = {tool["name"]: tool for tool in (await client.get(url + "/mcp/tools")).json()["tools"]}
    components = document["components"]["schemas"]
    for method in document["methods"]:
        openrpc = _dereferenced(method["result"]["schema"], components, "#/components/schemas/")
        output = tools[method["name"]]["outputSchema"]
        mcp = _dereferenced(output["properties"]["result"], output.get("$defs", {}), "#/$defs/")
        assert openrpc == mcp, method["name"]
        assert "$ref" in json.dumps(method["result"]["schema"]) or "$ref" in json.dumps(output)  # models, referenced


async def test_an_in_process_answer_that_fails_its_output_schema_is_output_schema_mismatch(
    serve: Callable[..., str],
) -> None:
    """As on the gateway: `structuredContent` that fails the published outputSchema never reaches a client."""
    from crank.rpc import MCP, RPCApp
    from crank.server import MCPConfig, RPCService

    rpc = RPCApp(title="Cards")

    @rpc.method("card.get", groups=["mcp"], mcp=MCP(output_schema=Tag, transformer=lambda result: {"name": 1}))
    def get_card(id: int) -> dict[str, Any]:
        return {"id": id}

    url = serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)}))
    async with httpx.AsyncClient() as client:
        answer = (await client.post(url + "/mcp/call", json={"name": "card.get", "arguments": {"id": 1}})).json()
    assert answer["isError"] is True and "structuredContent" not in answer
    assert answer["error"]["error_code"] == "output_schema_mismatch"
