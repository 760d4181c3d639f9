"""An RPCApp's resources and prompts (`@app.resource`, `@app.prompt`) on its MCP endpoints, through the official
SDK client: published per group, texts along the same translation chain as tools, completions from `Literal`s."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx
import pytest

from crank.exceptions import ConfigurationError
from crank.rpc import RPCApp
from crank.server import RPCService
from crank.sources.rpc import MCPConfig
from mcp import Client, types

pytestmark = pytest.mark.anyio


def shop() -> RPCApp:
    app = RPCApp(title="Shop")

    @app.method("Catalog.ping", groups=["mcp"], mcp=None)
    def ping() -> str:
        return "pong"

    @app.resource("docs://guide", groups=["mcp"], mime_type="text/markdown")
    def guide() -> str:
        """How to use the shop."""
        return "# Guide\nSearch first, then order."

    @app.resource("docs://sheets/{sku}", groups=["mcp"], mime_type="application/json")
    async def sheet(sku: Literal["A-1", "B-2"]) -> str:
        """One product's data sheet."""
        return f'{{"sku": "{sku}"}}'

    @app.resource("docs://internal", groups=["admin"])
    def internal() -> str:
        return "not for the mcp group"

    @app.prompt(groups=["mcp"], completions={"product": lambda value, known: [f"{value}-lamp"]})
    def restock(product: str, urgency: Literal["low", "high"] = "low") -> str:
        """Ask for a restock plan."""
        return f"Plan a {urgency}-urgency restock of {product}."

    return app


@pytest.fixture
def url(serve: Callable[..., str], tmp_path: Path) -> str:
    (tmp_path / "rpc.de.yaml").write_text("restock:\n  description: Einen Nachschubplan erbitten.\n")
    config = MCPConfig(enabled=True, translations=tmp_path)
    return serve(RPCService(shop(), mcp={"/mcp": config})) + "/mcp/"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_rpc_apps_resources_and_prompts_reach_the_sdk_client(url: str, mode: str) -> None:
    async with Client(url, mode=mode, cache=None) as client:
        listed = await client.list_resources()
        assert [str(item.uri) for item in listed.resources] == ["docs://guide"]  # not the admin group's
        assert listed.resources[0].description == "How to use the shop."
        guide = await client.read_resource("docs://guide")
        assert guide.contents[0].text.startswith("# Guide")  # type: ignore[union-attr]
        sheet = await client.read_resource("docs://sheets/B-2")
        assert sheet.contents[0].text == '{"sku": "B-2"}'  # type: ignore[union-attr]
        prompt = await client.get_prompt("restock", {"product": "lamp", "urgency": "high"})
        assert prompt.messages[0].content.text == "Plan a high-urgency restock of lamp."  # type: ignore[union-attr]
        (listed_prompt,) = (await client.list_prompts()).prompts
        assert [(a.name, a.required) for a in listed_prompt.arguments or []] == [("product", True), ("urgency", False)]
        urgency = await client.complete(types.PromptReference(type="ref/prompt", name="restock"),
                                        {"name": "urgency", "value": "h"})  # fmt: skip
        assert urgency.completion.values == ["high"]
        product = await client.complete(types.PromptReference(type="ref/prompt", name="restock"),
                                        {"name": "product", "value": "desk"})  # fmt: skip
        assert product.completion.values == ["desk-lamp"]
        skus = await client.complete(types.ResourceTemplateReference(type="ref/resource", uri="docs://sheets/{sku}"),
                                     {"name": "sku", "value": ""})  # fmt: skip
        assert skus.completion.values == ["A-1", "B-2"]


async def test_a_value_outside_the_literal_is_refused_before_the_function_runs(url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "docs://sheets/C-3"}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    async with httpx.AsyncClient() as client:
        error = (await client.post(url, json=body, headers=headers)).json()["error"]
    assert error["code"] == -32602 and "A-1, B-2" in error["message"]


async def test_prompt_texts_follow_the_translation_files(url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2025-11-25", "Accept-Language": "de"}
    async with httpx.AsyncClient() as client:
        prompts = (await client.post(url, json=body, headers=headers)).json()["result"]["prompts"]
    assert prompts[0]["description"] == "Einen Nachschubplan erbitten."


def test_a_template_whose_parameters_are_not_its_variables_is_refused() -> None:
    app = RPCApp()
    with pytest.raises(ConfigurationError, match="must be the template's variables"):

        @app.resource("docs://sheets/{sku}")
        def sheet(code: str) -> str:
            return code


def test_bad_offerings_are_refused_when_registered() -> None:
    app = RPCApp()

    @app.resource("docs://one")
    def one() -> str:
        return "1"

    with pytest.raises(ConfigurationError, match="registered twice"):
        app.resource("docs://one")(one)

    @app.prompt()
    def ask(topic: str) -> str:
        return topic

    with pytest.raises(ConfigurationError, match="registered twice"):
        app.prompt("ask")(ask)
    with pytest.raises(ConfigurationError, match="args and"):
        app.prompt("spread")(lambda *parts: "")
    with pytest.raises(ConfigurationError, match="must be a str or a Literal"):

        @app.prompt()
        def counted(times: int) -> str:
            return str(times)

    with pytest.raises(ConfigurationError, match="unknown arguments"):
        app.prompt("other", completions={"nope": lambda value, known: []})(ask)
    with pytest.raises(ConfigurationError, match="type hints"):

        @app.prompt()
        def unresolvable(topic: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
            return topic

    app.build()
    with pytest.raises(ConfigurationError, match="before the app serves"):
        app.resource("docs://late")(one)


async def test_a_resource_or_prompt_with_roles_is_seen_only_by_callers_with_one(serve: Callable[..., str]) -> None:
    from tests.mcp.wire import legacy_headers, legacy_request

    app = RPCApp(title="Shop", roles={"staff-token-0123456789": ["staff"]})

    @app.resource("docs://margins", groups=["mcp"], roles=["staff", "finance"])
    def margins() -> str:
        return "margins are 40%"

    @app.resource("docs://margins/{sku}", groups=["mcp"], roles=["staff"])
    def margin(sku: str) -> str:
        return f"{sku}: 40%"

    @app.prompt(groups=["mcp"], roles=["staff"])
    def reprice() -> str:
        return "Reprice the catalog."

    @app.resource("docs://guide", groups=["mcp"])
    def guide() -> str:
        return "open to all"

    url = serve(RPCService(app, mcp={"/mcp": MCPConfig(enabled=True)})) + "/mcp/"

    async def ask(method: str, params: dict[str, object] | None = None, token: str | None = None) -> dict[str, object]:
        headers = {**legacy_headers(), **({"Authorization": f"Bearer {token}"} if token else {})}
        async with httpx.AsyncClient() as http:
            return (await http.post(url, json=legacy_request(method, params), headers=headers)).json()  # type: ignore[no-any-return]

    staff = "staff-token-0123456789"
    anonymous = [entry["uri"] for entry in (await ask("resources/list"))["result"]["resources"]]  # type: ignore[index]
    listed = [entry["uri"] for entry in (await ask("resources/list", token=staff))["result"]["resources"]]  # type: ignore[index]
    assert anonymous == ["docs://guide"] and sorted(listed) == ["docs://guide", "docs://margins"]
    assert (await ask("resources/templates/list"))["result"]["resourceTemplates"] == []  # type: ignore[index]
    # This caller's catalog has no prompt at all: it offers no prompts (the capabilities follow the catalog).
    assert (await ask("prompts/list"))["error"]["code"] == -32601  # type: ignore[index]
    assert [p["name"] for p in (await ask("prompts/list", token=staff))["result"]["prompts"]] == ["reprice"]  # type: ignore[index]
    refused = await ask("resources/read", {"uri": "docs://margins"})
    assert refused["error"]["code"] == -32002 and "margins" in refused["error"]["message"]  # type: ignore[index]
    assert (await ask("resources/read", {"uri": "docs://margins/A-1"}))["error"]  # the template is not there either
    assert (await ask("prompts/get", {"name": "reprice"}))["error"]["code"] == -32601  # type: ignore[index]
    read = await ask("resources/read", {"uri": "docs://margins/A-1"}, token=staff)
    assert read["result"]["contents"][0]["text"] == "A-1: 40%"  # type: ignore[index]
    got = await ask("prompts/get", {"name": "reprice"}, token=staff)
    assert got["result"]["messages"][0]["content"]["text"] == "Reprice the catalog."  # type: ignore[index]
