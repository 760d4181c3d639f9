"""Human confirmation through the client: a destructive gateway call asks the user (elicitation) when the client
can, in both eras, through the official SDK client; the upstream records whether the DELETE arrived."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from crank.admin.actions import check_runtime
from crank.gateway.safety import CONFIRMATION_ARGUMENT
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client, types
from tests.gateway.test_safety import Upstream

pytestmark = pytest.mark.anyio
MODES = ["auto", "legacy"]


def publish(registry: Registry, base: str, *, discovery: bool = False) -> None:
    by_id = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    registry.create_workspace("acme", "Acme")
    registry.put_operation("acme", "delete_record", {
        "protocol": "http", "target": {"method": "DELETE", "url": base + "/records/{id}"},
        "description": "Deletes a record.", "input_schema": by_id, "execution_config": {"confirmation_ttl": 1},
    })  # fmt: skip
    registry.put_operation("acme", "purge_record", {
        "protocol": "http", "target": {"method": "DELETE", "url": base + "/records/{id}"},
        "description": "Purges a record.", "input_schema": by_id,
        "execution_config": {"confirmation": "human", "confirmation_ttl": 1},
    })  # fmt: skip
    bindings = [{"operation": "delete_record"}, {"operation": "purge_record"}]
    registry.put_agent("acme", "desk", {"bindings": bindings})
    registry.put_agent("acme", "finder", {"bindings": bindings, "mode": "discovery"})
    for agent in ("desk", "finder"):
        registry.publish("acme", agent, check=check_runtime)


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def gateway(registry: Registry, serve: Callable[..., str], upstream: Upstream) -> str:
    publish(registry, serve(upstream.app))
    return serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/acme/"


def answering(action: str, confirm: bool = True, seen: list[Any] | None = None) -> Any:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if seen is not None:
            seen.append(params)
        if action == "never":
            await asyncio.sleep(3)  # longer than the confirmation_ttl of 1 s: the server gives up first
        content = {"confirm": confirm} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return on_elicit


def error_of(result: types.CallToolResult) -> dict[str, Any]:
    assert result.is_error
    return json.loads(result.content[0].text)  # type: ignore[union-attr,no-any-return]


@pytest.mark.parametrize("mode", MODES)
async def test_an_accepted_question_runs_the_delete_once(gateway: str, upstream: Upstream, mode: str) -> None:
    seen: list[Any] = []
    async with Client(gateway + "desk", mode=mode, elicitation_callback=answering("accept", seen=seen)) as client:
        result = await client.call_tool("delete_record", {"id": "7"})
    assert not result.is_error and result.structured_content == {"deleted": "7"}
    assert upstream.deleted == ["7"]
    message = seen[0].message
    assert "delete_record" in message and "DELETE " in message and "/records/{id}" in message and '"7"' in message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("action", "confirm"), [("decline", True), ("cancel", True), ("accept", False)])
async def test_a_declined_question_sends_nothing(
    gateway: str, upstream: Upstream, mode: str, action: str, confirm: bool
) -> None:
    async with Client(gateway + "desk", mode=mode, elicitation_callback=answering(action, confirm)) as client:
        result = await client.call_tool("delete_record", {"id": "7"})
    assert error_of(result)["error_code"] == "confirmation_declined"
    assert upstream.deleted == []


async def test_a_question_nobody_answers_times_out_and_sends_nothing(gateway: str, upstream: Upstream) -> None:
    async with Client(gateway + "desk", mode="legacy", elicitation_callback=answering("never")) as client:
        result = await client.call_tool("delete_record", {"id": "7"})
    assert error_of(result)["error_code"] == "confirmation_timeout"
    assert upstream.deleted == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_ask_keeps_the_two_step_token(gateway: str, upstream: Upstream, mode: str) -> None:
    async with Client(gateway + "desk", mode=mode) as client:
        first = error_of(await client.call_tool("delete_record", {"id": "7"}))
        assert first["error_code"] == "confirmation_required" and upstream.deleted == []
        token = first["details"]["confirmation_token"]
        second = await client.call_tool("delete_record", {"id": "7", CONFIRMATION_ARGUMENT: token})
    assert not second.is_error and upstream.deleted == ["7"]


@pytest.mark.parametrize("mode", MODES)
async def test_confirmation_human_refuses_a_client_that_cannot_ask(gateway: str, upstream: Upstream, mode: str) -> None:
    async with Client(gateway + "desk", mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert CONFIRMATION_ARGUMENT not in tools["purge_record"].input_schema["properties"]
        refused = error_of(await client.call_tool("purge_record", {"id": "7"}))
        assert refused["error_code"] == "confirmation_unavailable"
        forged = error_of(await client.call_tool("purge_record", {"id": "7", CONFIRMATION_ARGUMENT: "x"}))
        assert forged["error_code"] == "confirmation_unavailable"
    assert upstream.deleted == []
    async with Client(gateway + "desk", mode=mode, elicitation_callback=answering("accept")) as client:
        assert not (await client.call_tool("purge_record", {"id": "8"})).is_error
    assert upstream.deleted == ["8"]


@pytest.mark.parametrize("mode", MODES)
async def test_discovery_asks_the_user_for_the_operation_it_calls(gateway: str, upstream: Upstream, mode: str) -> None:
    async with Client(gateway + "finder", mode=mode, elicitation_callback=answering("accept")) as client:
        arguments = {"name": "delete_record", "arguments": {"id": "9"}}
        result = await client.call_tool("call_operation", arguments)
    assert not result.is_error, result.content
    assert upstream.deleted == ["9"]


async def test_a_2026_answer_sent_again_runs_nothing_more(gateway: str, upstream: Upstream) -> None:
    """The accepted answer and its requestState, replayed by hand: the DELETE already ran once, never twice."""
    import httpx

    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": "delete_record"}  # fmt: skip
    params: dict[str, Any] = {"name": "delete_record", "arguments": {"id": "5"}, "_meta": meta}
    async with httpx.AsyncClient() as client:
        asked = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        first = (await client.post(gateway + "desk", json=asked, headers=headers)).json()["result"]
        (key,) = first["inputRequests"]
        params.update(inputResponses={key: {"action": "accept", "content": {"confirm": True}}},
                      requestState=first["requestState"])  # fmt: skip
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        answers = [(await client.post(gateway + "desk", json=body, headers=headers)).json()["result"] for _ in range(2)]
    assert answers[0]["isError"] is False
    assert json.loads(answers[1]["content"][0]["text"])["error_code"] == "confirmation_invalid"
    assert upstream.deleted == ["5"]


async def test_made_up_2026_answers_without_the_signed_state_run_nothing(gateway: str, upstream: Upstream) -> None:
    """An accept the client makes up (no requestState, or another call's) is asked again, never obeyed."""
    import httpx

    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}
    accept = {"crank-input-0": {"action": "accept", "content": {"confirm": True}}}
    async with httpx.AsyncClient() as client:
        for tool in ("delete_record", "purge_record"):
            params = {"name": tool, "arguments": {"id": "6"}, "_meta": meta, "inputResponses": accept}
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            answer = await client.post(gateway + "desk", json=body, headers={**headers, "Mcp-Name": tool})
            assert answer.json()["result"]["resultType"] == "input_required"  # asked again
    assert upstream.deleted == []
