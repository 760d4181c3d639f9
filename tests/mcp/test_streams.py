"""Response streams on the wire: JSON unless a handler sends something first; then SSE with a priming event,
`retry` and `X-Accel-Buffering: no`; each era's rules; questions that wait for the client, bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crank.exceptions import RequestTooLargeError
from crank.mcp import CallContext, Catalog, EndpointOptions, MCPEndpoint, Tool
from crank.mcp.streams import ResponseStream, ServerRequests
from crank.types import Message
from tests.mcp.wire import (
    JSON_HEADERS,
    legacy_headers,
    legacy_request,
    modern_headers,
    modern_request,
    next_message,
    rest_messages,
)

pytestmark = pytest.mark.anyio

cancelled: list[str] = []
started = asyncio.Event()


async def quiet(arguments: dict[str, Any], context: CallContext) -> Any:
    return {"done": True}


async def reports(arguments: dict[str, Any], context: CallContext) -> Any:
    await context.progress(1, 2, "half")
    await context.log("info", "working")
    return {"done": True}


async def forever(arguments: dict[str, Any], context: CallContext) -> Any:
    await context.progress(0, 1)
    started.set()
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        cancelled.append(context.protocol_version)
        raise
    return {"done": True}


async def asks(arguments: dict[str, Any], context: CallContext) -> Any:
    answer = await context.elicit("Sure?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    return {"answer": answer}


def tool(name: str, invoker: Any) -> Tool:
    return Tool(name=name, invoker=invoker, input_schema={"type": "object"})


CATALOG = Catalog([tool("quiet", quiet), tool("reports", reports), tool("forever", forever), tool("asks", asks)],
                  logging=True)  # fmt: skip


def events(body: str) -> list[dict[str, str]]:
    """The SSE events of a body, each as its fields."""
    found = []
    for block in body.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        found.append(fields)
    return found


def with_token(params: dict[str, Any], token: Any = "p-1", **meta: Any) -> dict[str, Any]:
    return {**params, "_meta": {"progressToken": token, **meta}}


async def post(url: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(url, json=body, headers=headers)


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    return serve(MCPEndpoint(CATALOG, EndpointOptions(client_request_timeout=2, max_pending_requests=1))) + "/"


async def test_a_handler_that_sends_nothing_is_answered_as_json(url: str) -> None:
    params = with_token({"name": "quiet", "arguments": {}})
    response = await post(url, legacy_request("tools/call", params), legacy_headers())
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["structuredContent"] == {"done": True}


async def test_the_first_message_opens_a_primed_event_stream_that_ends_with_the_answer(url: str) -> None:
    params = with_token({"name": "reports", "arguments": {}})
    response = await post(url, legacy_request("tools/call", params, request_id=7), legacy_headers())
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["cache-control"] == "no-cache"
    priming, *rest = events(response.text)
    assert priming["id"] and priming["retry"].isdigit() and priming["data"] == ""
    messages = [json.loads(event["data"]) for event in rest]
    assert [message.get("method") for message in messages] == ["notifications/progress", "notifications/message", None]
    assert messages[0]["params"] == {"progressToken": "p-1", "progress": 1, "total": 2, "message": "half"}
    assert messages[-1]["id"] == 7 and messages[-1]["result"]["structuredContent"] == {"done": True}
    assert len({event["id"] for event in [priming, *rest]}) == len(rest) + 1  # every event its own id


async def test_without_a_progress_token_or_a_stream_nothing_is_sent_before_the_answer(url: str) -> None:
    plain = await post(
        url, legacy_request("tools/call", {"name": "reports"}), {**legacy_headers(), "Accept": "application/json"}
    )
    assert plain.headers["content-type"] == "application/json"  # the client takes no stream: messages dropped
    assert plain.json()["result"]["isError"] is False


async def test_2026_sends_log_messages_only_at_the_level_the_request_asks(url: str) -> None:
    def call(**meta: Any) -> dict[str, Any]:
        body = modern_request("tools/call", {"name": "reports", "arguments": {}})
        body["params"]["_meta"].update(meta)
        return body

    silent = await post(url, call(), modern_headers("tools/call", "reports"))
    assert silent.headers["content-type"] == "application/json"  # no token, no level: nothing to stream
    loud = await post(
        url, call(**{"io.modelcontextprotocol/logLevel": "debug"}), modern_headers("tools/call", "reports")
    )
    methods = [json.loads(event["data"]).get("method") for event in events(loud.text)[1:]]
    assert methods == ["notifications/message", None]
    bad = await post(url, call(**{"io.modelcontextprotocol/logLevel": "loud"}), modern_headers("tools/call", "reports"))
    assert "must be one of" in bad.text


async def test_2026_closing_the_stream_cancels_the_call(url: str) -> None:
    cancelled.clear()
    started.clear()
    body = modern_request("tools/call", {"name": "forever", "arguments": {}})
    body["params"]["_meta"]["progressToken"] = 1
    async with httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url, json=body, headers=modern_headers("tools/call", "forever")) as response:
            assert response.headers["content-type"] == "text/event-stream"
            await asyncio.wait_for(started.wait(), 5)
    for _ in range(100):
        if cancelled:
            break
        await asyncio.sleep(0.05)
    assert cancelled == ["2026-07-28"]


async def test_a_legacy_question_waits_for_the_answer_post_and_a_stray_answer_is_accepted(url: str) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        stray = await client.post(
            url, json={"jsonrpc": "2.0", "id": "crank-nobody-1", "result": {}}, headers=legacy_headers()
        )
        assert stray.status_code == 202
        async with client.stream(
            "POST", url, json=legacy_request("tools/call", {"name": "asks"}), headers=legacy_headers()
        ) as response:
            lines = response.aiter_lines()
            question = await next_message(lines)
            assert question["method"] == "elicitation/create"
            assert question["params"]["message"] == "Sure?"
            answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"ok": True}}}
            accepted = await client.post(url, json=answer, headers=legacy_headers())
            assert accepted.status_code == 202
            final = (await rest_messages(lines))[-1]
    assert final["result"]["structuredContent"]["answer"] == {"action": "accept", "content": {"ok": True}}


async def test_questions_waiting_at_once_are_bounded(url: str) -> None:
    """`max_pending_requests=1`: while one question waits, the next call's question fails at once."""
    async with httpx.AsyncClient(timeout=10) as client:
        async with client.stream(
            "POST", url, json=legacy_request("tools/call", {"name": "asks"}), headers=legacy_headers()
        ) as first:
            await next_message(first.aiter_lines())  # the first question waits
            second = await client.post(
                url, json=legacy_request("tools/call", {"name": "asks"}, 2), headers=legacy_headers()
            )
    text = second.text
    assert "client_requests_busy" in text


async def test_a_question_without_a_stream_is_a_clear_tool_error(url: str) -> None:
    headers = {**legacy_headers(), "Accept": "application/json"}
    response = await post(url, legacy_request("tools/call", {"name": "asks"}), headers)
    result = response.json()["result"]
    assert result["isError"] is True and "client_request_unavailable" in result["content"][0]["text"]


async def test_2026_questions_come_back_as_input_required(url: str) -> None:
    body = modern_request("tools/call", {"name": "asks", "arguments": {}})
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    first = (await post(url, body, modern_headers("tools/call", "asks"))).json()["result"]
    assert first["resultType"] == "input_required"
    ((key, request),) = first["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    body["params"].update(inputResponses={key: {"action": "decline"}}, requestState=first["requestState"])
    second = (await post(url, body, modern_headers("tools/call", "asks"))).json()["result"]
    assert second["structuredContent"] == {"answer": {"action": "decline"}}


async def test_only_endpoints_that_log_hand_out_session_ids(serve: Callable[..., str]) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    quiet_url = serve(MCPEndpoint(Catalog([tool("quiet", quiet)]))) + "/"
    logging_url = serve(MCPEndpoint(CATALOG)) + "/"
    assert "mcp-session-id" not in (await post(quiet_url, legacy_request("initialize", params), JSON_HEADERS)).headers
    answered = await post(logging_url, legacy_request("initialize", params), JSON_HEADERS)
    assert answered.json()["result"]["capabilities"]["logging"] == {}
    session = answered.headers["mcp-session-id"]
    assert session.isascii() and session.isprintable() and "." in session


async def test_only_the_caller_a_question_was_asked_of_can_answer_it() -> None:
    requests = ServerRequests()
    request_id, future = await requests.open(owner="key-a")
    process, count, secret = request_id.removeprefix("crank-").split("-", 2)
    assert count == "1" and len(secret) >= 20  # unguessable: a counter alone would let anyone try the next id
    answer = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept"}}
    assert await requests.answer(answer, owner="key-b") is False and not future.done()
    guessed = {**answer, "id": f"crank-{process}-1"}
    assert await requests.answer(guessed, owner="key-a") is False and not future.done()
    assert await requests.answer(answer, owner="key-a") is True
    assert future.result()["result"] == {"action": "accept"}
    assert await requests.answer(answer, owner="key-a") is False  # answered once


@pytest.mark.anyio
async def test_a_client_sending_more_body_than_the_limit_on_an_open_stream_has_left_it() -> None:
    """A stream's watcher reads the request's counted `receive`: a body past the limit ends the exchange (and the
    call it serves) as a client closing its stream does, instead of leaving the watch and the call running."""
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        raise RequestTooLargeError(100)

    async def call() -> None:
        stream = ResponseStream(send, receive, cancel_on_close=True)
        await stream.open()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(call())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert sent and sent[0]["type"] == "http.response.start"
