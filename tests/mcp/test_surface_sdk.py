"""The whole surface through the official MCP Python SDK client, in its auto (2026-07-28) and legacy modes:
resources, templates, prompts, completions, progress, log messages, and questions to the user and the model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from examples.conformance_app import catalog

from crank.mcp import EndpointOptions, MCPEndpoint
from mcp import Client, types

pytestmark = pytest.mark.anyio

MODES = ["auto", "legacy"]


def endpoint(**options: Any) -> MCPEndpoint:
    return MCPEndpoint(catalog, EndpointOptions(**options))


@pytest.mark.parametrize("mode", MODES)
async def test_client_lists_and_reads_resources_and_templates(serve: Callable[..., str], mode: str) -> None:
    async with Client(serve(endpoint()) + "/", mode=mode, cache=None) as client:
        assert client.server_capabilities.resources is not None
        listed = await client.list_resources()
        assert {str(item.uri) for item in listed.resources} >= {"test://static-text", "test://static-binary"}
        templates = await client.list_resource_templates()
        assert [item.uri_template for item in templates.resource_templates] == ["test://template/{id}/data"]
        text = await client.read_resource("test://static-text")
        assert text.contents[0].text == "This is the content of the static text resource."  # type: ignore[union-attr]
        binary = await client.read_resource("test://static-binary")
        assert binary.contents[0].mime_type == "image/png" and binary.contents[0].blob  # type: ignore[union-attr]
        data = await client.read_resource("test://template/42/data")
        assert '"id":"42"' in data.contents[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_client_gets_prompts_and_completions(serve: Callable[..., str], mode: str) -> None:
    async with Client(serve(endpoint()) + "/", mode=mode, cache=None) as client:
        prompts = await client.list_prompts()
        assert all(prompt.description for prompt in prompts.prompts)
        got = await client.get_prompt("test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"})
        assert got.messages[0].content.text == "Prompt with arguments: arg1='hello', arg2='world'"  # type: ignore[union-attr]
        reference = types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments")
        completed = await client.complete(reference, {"name": "arg1", "value": "par"})
        assert completed.completion.values == ["paris", "park", "party"]
        template = types.ResourceTemplateReference(type="ref/resource", uri="test://template/{id}/data")
        ids = await client.complete(template, {"name": "id", "value": "4"})
        assert ids.completion.values == ["456"]


@pytest.mark.parametrize("mode", MODES)
async def test_progress_reaches_the_callers_callback(serve: Callable[..., str], mode: str) -> None:
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with Client(serve(endpoint()) + "/", mode=mode) as client:
        result = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
    assert not result.is_error
    assert seen == [(0, 100), (50, 100), (100, 100)]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # logging: deprecated, served
async def test_legacy_log_messages_follow_the_sessions_level(serve: Callable[..., str]) -> None:
    messages: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        messages.append(params)

    async with Client(serve(endpoint()) + "/", mode="legacy", logging_callback=on_log) as client:
        assert client.server_capabilities.logging is not None
        await client.set_logging_level("debug")
        await client.call_tool("test_tool_with_logging", {})
        assert [message.data for message in messages] == [
            "Tool execution started", "Tool processing data", "Tool execution completed",
        ]  # fmt: skip
        await client.set_logging_level("warning")  # info messages are now below the session's level
        await client.call_tool("test_tool_with_logging", {})
    assert len(messages) == 3


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize(("level", "expected"), [(None, 0), ("info", 3), ("error", 0)])
async def test_modern_log_messages_only_when_the_request_asks(
    serve: Callable[..., str], level: Any, expected: int
) -> None:
    messages: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        messages.append(params)

    async with Client(serve(endpoint()) + "/", mode="auto", logging_callback=on_log, log_level=level) as client:
        assert client.protocol_version == "2026-07-28"
        await client.call_tool("test_tool_with_logging", {})
    assert len(messages) == expected


def _answer_with(action: str, seen: list[Any]) -> Any:
    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        content = {"username": "ada", "email": "ada@example.org"} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return on_elicit


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["accept", "decline"])
async def test_elicitation_asks_the_user_in_both_eras(serve: Callable[..., str], mode: str, action: str) -> None:
    seen: list[Any] = []
    async with Client(serve(endpoint()) + "/", mode=mode, elicitation_callback=_answer_with(action, seen)) as client:
        result = await client.call_tool("test_elicitation", {"message": "Who are you?"})
    assert len(seen) == 1 and seen[0].message == "Who are you?"
    text = result.content[0].text  # type: ignore[union-attr]
    assert f'"action": "{action}"' in text
    assert ("ada@example.org" in text) is (action == "accept")


@pytest.mark.parametrize("mode", MODES)
async def test_sampling_asks_the_clients_model(serve: Callable[..., str], mode: str) -> None:
    async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked = params.messages[0].content.text  # type: ignore[union-attr]
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"echo {asked}"), model="test"
        )

    async with Client(serve(endpoint()) + "/", mode=mode, sampling_callback=on_sample) as client:
        result = await client.call_tool("test_sampling", {"prompt": "2+2?"})
    assert result.content[0].text == "LLM response: echo 2+2?"  # type: ignore[union-attr]


async def test_a_question_nobody_answers_times_out_as_a_tool_error(serve: Callable[..., str]) -> None:
    never = asyncio.Event()

    async def silent(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await never.wait()  # the user walked away
        raise AssertionError("unreachable")

    url = serve(endpoint(client_request_timeout=0.5)) + "/"
    async with Client(url, mode="legacy", elicitation_callback=silent, read_timeout_seconds=10) as client:
        result = await client.call_tool("test_elicitation", {"message": "Anyone?"})
    assert result.is_error
    assert "client_request_timeout" in result.content[0].text  # type: ignore[union-attr]
