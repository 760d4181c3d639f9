"""A method's `ctx: Context`: the MCP call's own context through the official SDK client in both eras (progress, log
messages, questions to the user and to the model), and over /rpc a context that sends nothing and cannot ask."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio.from_thread
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from crank.exceptions import ConfigurationError
from crank.rpc import MCP, Context, RPCApp
from crank.server import RPCService
from crank.sources.rpc import MCPConfig
from mcp import Client, types

pytestmark = pytest.mark.anyio

MODES = ["auto", "legacy"]
FORM = {"type": "object", "properties": {"drafts": {"type": "boolean"}}, "required": ["drafts"]}


def reports(runs: list[str]) -> RPCApp:
    app = RPCApp(title="Reports")

    @app.method("build", groups=["mcp"], mcp=MCP())
    async def build(year: int, ctx: Context) -> str:
        """Build the year's report.

        Args:
            year: the report's year.
        """
        runs.append(f"build {year} {ctx.request_id}")
        await ctx.progress(0, 2, "started")
        await ctx.log("info", f"building {year}")
        await ctx.progress(2, 2, "done")
        return f"report {year}"

    @app.method("publish", groups=["mcp"], mcp=MCP())
    async def publish(year: int, ctx: Context) -> str:
        answer = await ctx.elicit(f"Publish the {year} report with drafts?", FORM)
        runs.append(f"publish {answer['action']}")  # after the question: in 2026-07-28 the method runs twice
        if answer["action"] != "accept":
            return "not published"
        return f"published, drafts={answer['content']['drafts']}"

    @app.method("summarize", groups=["mcp"], mcp=MCP())
    async def summarize(text: str, ctx: Context) -> str:
        reply = await ctx.sample(f"Summarize: {text}", max_tokens=50)
        return f"summary: {reply['content']['text']}"

    @app.method("count", groups=["mcp"], mcp=MCP())
    def count(to: int, ctx: Context) -> int:
        """A sync method, in a worker thread, reaches its context's coroutines through anyio."""
        for step in range(1, to + 1):
            anyio.from_thread.run(ctx.progress, step, to)
        return to

    @app.method("can_ask", groups=["mcp"], mcp=MCP())
    def can_ask(ctx: Context) -> bool:
        return ctx.can_ask("elicitation")

    return app


@pytest.fixture
def runs() -> list[str]:
    return []


@pytest.fixture
def url(serve: Callable[..., str], runs: list[str]) -> str:
    return serve(RPCService(reports(runs), mcp={"/mcp": MCPConfig(enabled=True, expose_all=True)}))


def _accepting(action: str, seen: list[Any]) -> Any:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action=action, content={"drafts": True} if action == "accept" else None)  # type: ignore[arg-type]

    return on_elicit


async def test_the_context_is_no_argument_in_either_schema(url: str) -> None:
    async with Client(url + "/mcp/", mode="auto") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert tools["build"].input_schema["properties"].keys() == {"year"}
    assert tools["build"].input_schema["required"] == ["year"]
    assert "properties" not in tools["can_ask"].input_schema or not tools["can_ask"].input_schema["properties"]
    async with httpx.AsyncClient() as client:
        document = (await client.get(url + "/rpc")).json()
        refused = await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "build",
                                                        "params": {"year": 2026, "ctx": "mine"}})  # fmt: skip
    build = next(method for method in document["methods"] if method["name"] == "build")
    assert [param["name"] for param in build["params"]] == ["year"]
    assert refused.json()["error"]["code"] == -32602  # a client cannot pass a context of its own


@pytest.mark.parametrize("mode", MODES)
async def test_a_methods_progress_and_log_messages_reach_the_client(url: str, runs: list[str], mode: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    messages: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        messages.append(params.data)

    level = "info" if mode == "auto" else None  # 2026-07-28: the request asks; 2025-11-25: the session's default
    async with Client(url + "/mcp/", mode=mode, logging_callback=on_log, log_level=level) as client:  # type: ignore[arg-type]
        result = await client.call_tool("build", {"year": 2026}, progress_callback=on_progress)
    assert result.structured_content == {"result": "report 2026"}
    assert progress == [(0, 2, "started"), (2, 2, "done")]
    assert messages == ["building 2026"]
    assert runs[0].startswith("build 2026 ") and len(runs[0]) > len("build 2026 ")  # the MCP call's request id


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_a_method_asks_the_user_in_both_eras(url: str, runs: list[str], mode: str, action: str) -> None:
    seen: list[str] = []
    async with Client(url + "/mcp/", mode=mode, elicitation_callback=_accepting(action, seen)) as client:
        result = await client.call_tool("publish", {"year": 2026})
    assert seen == ["Publish the 2026 report with drafts?"]
    expected = "published, drafts=True" if action == "accept" else "not published"
    assert result.structured_content == {"result": expected}
    assert runs == [f"publish {action}"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_method_asks_the_clients_model(url: str, mode: str) -> None:
    async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked = params.messages[0].content.text  # type: ignore[union-attr]
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text=asked.upper()),
                                         model="test")  # fmt: skip

    async with Client(url + "/mcp/", mode=mode, sampling_callback=on_sample) as client:
        result = await client.call_tool("summarize", {"text": "short"})
    assert result.structured_content == {"result": "summary: SUMMARIZE: SHORT"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_be_asked_gets_a_structured_error(url: str, runs: list[str], mode: str) -> None:
    async with Client(url + "/mcp/", mode=mode) as client:  # no elicitation callback: the capability is not declared
        asked = await client.call_tool("can_ask", {})
        if mode == "auto":  # 2026-07-28: the protocol's own error for a missing client capability
            with pytest.raises(MCPError, match="needs client capabilities: elicitation"):
                await client.call_tool("publish", {"year": 2026})
        else:
            result = await client.call_tool("publish", {"year": 2026})
            assert result.is_error
            assert json.loads(result.content[0].text)["error_code"] == "client_request_unavailable"  # type: ignore[union-attr]
    assert asked.structured_content == {"result": False}
    assert runs == []  # the method stopped at its question


@pytest.mark.parametrize("mode", MODES)
async def test_a_sync_method_reports_progress_from_its_thread(url: str, mode: str) -> None:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(url + "/mcp/", mode=mode) as client:
        result = await client.call_tool("count", {"to": 3}, progress_callback=on_progress)
    assert result.structured_content == {"result": 3}
    assert progress == [1, 2, 3]


async def test_over_rpc_the_context_sends_nothing_and_cannot_ask(url: str, runs: list[str]) -> None:
    async with httpx.AsyncClient() as client:
        built = await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "build",
                                                      "params": {"year": 2025}})  # fmt: skip
        counted = await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 2, "method": "count",
                                                        "params": {"to": 2}})  # fmt: skip
        asked = await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 3, "method": "can_ask"})
        published = await client.post(url + "/rpc", json={"jsonrpc": "2.0", "id": 4, "method": "publish",
                                                          "params": {"year": 2025}})  # fmt: skip
    assert built.headers["content-type"].startswith("application/json")
    assert built.json()["result"] == "report 2025"
    assert counted.json()["result"] == 2
    assert asked.json()["result"] is False
    error = published.json()["error"]
    assert error["code"] == -32000 and "over /rpc" in error["message"]
    assert runs[0].startswith("build 2025 ") and "publish" not in " ".join(runs)


def test_a_method_takes_one_context_at_most() -> None:
    app = RPCApp()
    with pytest.raises(ConfigurationError, match="one parameter may take the call's context"):

        @app.method("twice")
        def twice(first: Context, second: Context) -> None: ...
