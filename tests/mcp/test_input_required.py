"""Tools that ask for input inside their result (2026-07-28 input_required), with the official client."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from crank.mcp import CallContext, Catalog, EndpointOptions, InputRequired, MCPEndpoint, Tool, elicitation
from mcp import Client
from tests.mcp.wire import legacy_headers, legacy_request, modern_headers, modern_request

pytestmark = pytest.mark.anyio

seen_states: list[Any] = []


async def greet(arguments: dict[str, Any], context: CallContext) -> Any:
    seen_states.append(context.request_state)
    answer = (context.input_responses or {}).get("who")
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        form = elicitation("Who are you?", {"name": {"type": "string"}}, ["name"])
        return InputRequired({"who": form}, state={"round": 1, "greeting": arguments["greeting"]})
    return f"{context.request_state['greeting']}, {answer['content']['name']}!"


TOOLS = [
    Tool(
        name="greet",
        description="Greets whoever answers.",
        input_schema={"type": "object", "properties": {"greeting": {"type": "string"}}, "required": ["greeting"]},
        invoker=greet,
        format="plain",
    )
]


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    return serve(MCPEndpoint(Catalog(TOOLS)))


async def test_official_client_answers_and_gets_the_final_result(url: str) -> None:
    asked: list[str] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Alice"})

    async with Client(url, elicitation_callback=on_elicit) as client:
        result = await client.call_tool("greet", {"greeting": "Hello"})
    assert asked == ["Who are you?"]
    assert result.content[0].text == "Hello, Alice!"
    assert seen_states[-1] == {"round": 1, "greeting": "Hello"}  # the invoker saw its own state back


async def first_round(url: str) -> dict[str, Any]:
    body = modern_request("tools/call", {"name": "greet", "arguments": {"greeting": "Hi"}})
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    async with httpx.AsyncClient() as client:
        response = await client.post(url, content=json.dumps(body), headers=modern_headers("tools/call", "greet"))
    result: dict[str, Any] = response.json()["result"]
    return result


async def second_round(url: str, state: str, arguments: dict[str, Any]) -> httpx.Response:
    params = {
        "name": "greet",
        "arguments": arguments,
        "inputResponses": {"who": {"action": "accept", "content": {"name": "Bob"}}},
        "requestState": state,
    }
    body = modern_request("tools/call", params)
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    async with httpx.AsyncClient() as client:
        return await client.post(url, content=json.dumps(body), headers=modern_headers("tools/call", "greet"))


async def test_first_round_is_input_required_with_a_signed_state(url: str) -> None:
    result = await first_round(url)
    assert result["resultType"] == "input_required"
    assert result["inputRequests"]["who"]["method"] == "elicitation/create"
    assert isinstance(result["requestState"], str) and "greeting" not in result["requestState"]


@pytest.mark.parametrize(
    ("tamper", "arguments"),
    [
        (lambda state: state + "-TAMPERED", {"greeting": "Hi"}),
        (lambda state: state, {"greeting": "Hey"}),  # the state belongs to other arguments
    ],
)
async def test_altered_or_foreign_state_is_refused(url: str, tamper: Callable[[str], str], arguments: Any) -> None:
    state = (await first_round(url))["requestState"]
    response = await second_round(url, tamper(state), arguments)
    assert response.status_code == 400
    assert response.json()["error"] == {"code": -32602, "message": "Invalid or expired requestState"}


async def test_genuine_state_completes_the_call(url: str) -> None:
    state = (await first_round(url))["requestState"]
    result = (await second_round(url, state, {"greeting": "Hi"})).json()["result"]
    assert result["resultType"] == "complete" and result["content"][0]["text"] == "Hi, Bob!"


async def test_input_request_needs_the_client_capability(url: str) -> None:
    body = modern_request("tools/call", {"name": "greet", "arguments": {"greeting": "Hi"}})
    async with httpx.AsyncClient() as client:
        response = await client.post(url, content=json.dumps(body), headers=modern_headers("tools/call", "greet"))
    assert response.status_code == 400
    assert response.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {}}}


async def test_legacy_era_gets_a_tool_error_instead(url: str) -> None:
    body = legacy_request("tools/call", {"name": "greet", "arguments": {"greeting": "Hi"}})
    async with httpx.AsyncClient() as client:
        result = (await client.post(url, content=json.dumps(body), headers=legacy_headers())).json()["result"]
    assert result["isError"] is True
    assert json.loads(result["content"][0]["text"])["error_code"] == "input_required_unsupported"


async def test_state_from_another_server_secret_is_refused(serve: Callable[..., str]) -> None:
    first = serve(MCPEndpoint(Catalog(TOOLS), EndpointOptions(request_state_secret="one")))
    other = serve(MCPEndpoint(Catalog(TOOLS), EndpointOptions(request_state_secret="two")))
    same = serve(MCPEndpoint(Catalog(TOOLS), EndpointOptions(request_state_secret="one")))
    state = (await first_round(first))["requestState"]
    assert (await second_round(other, state, {"greeting": "Hi"})).status_code == 400
    assert (await second_round(same, state, {"greeting": "Hi"})).status_code == 200


async def test_official_client_without_callback_reports_the_error(url: str) -> None:
    async with Client(url) as client:
        with pytest.raises(MCPError):
            await client.call_tool("greet", {"greeting": "Hello"})
