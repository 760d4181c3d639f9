"""Response streams in a deployment: through the project's nginx configuration, events arrive as they are sent
(never buffered until the answer); and with two replicas behind nginx sharing a Redis relay, a legacy question's
answer POST that lands on the other replica still completes the call."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from crank.mcp import CallContext, Catalog, EndpointOptions, MCPEndpoint, Tool
from crank.state.relay import RedisRelay
from tests import services
from tests.cluster import Nginx
from tests.mcp.wire import legacy_headers, legacy_request, next_message, rest_messages

pytestmark = pytest.mark.anyio
release = asyncio.Event()


async def slow_progress(arguments: dict[str, Any], context: CallContext) -> Any:
    await context.progress(1, 2)
    await asyncio.wait_for(release.wait(), 20)  # answered only once the test has read the progress event
    return {"done": True}


async def asks(arguments: dict[str, Any], context: CallContext) -> Any:
    return {"answer": await context.elicit("Delete it?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})}


def catalog() -> Catalog:
    tools = [Tool(name="slow_progress", invoker=slow_progress), Tool(name="asks", invoker=asks)]
    return Catalog(tools)


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Callable[[list[int]], str]]:
    started: list[Nginx] = []

    def start(ports: list[int]) -> str:
        proxy = Nginx(tmp_path / "nginx", services.free_port())
        proxy.configure(ports)
        proxy.start()
        started.append(proxy)
        return proxy.url

    yield start
    for proxy in started:
        proxy.stop()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


async def test_nginx_passes_a_stream_on_event_by_event(serve: Callable[..., str], nginx: Any) -> None:
    release.clear()
    base = nginx([port_of(serve(MCPEndpoint(catalog(), EndpointOptions(allowed_hosts=["127.0.0.1:*"]))))])
    params = {"name": "slow_progress", "arguments": {}, "_meta": {"progressToken": "t"}}
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream(
            "POST", base + "/", json=legacy_request("tools/call", params), headers=legacy_headers()
        ) as response:
            assert response.headers["content-type"] == "text/event-stream"
            lines = response.aiter_lines()
            # The progress event arrives while the tool still waits for `release`: nginx did not hold it back.
            assert (await next_message(lines))["method"] == "notifications/progress"
            release.set()
            answers = await rest_messages(lines)
    assert answers[-1]["result"]["structuredContent"] == {"done": True}


async def test_an_answer_that_lands_on_the_other_replica_completes_the_call(
    serve: Callable[..., str], nginx: Any, redis_url: str
) -> None:
    prefix = f"test-relay-{uuid.uuid4().hex}:"
    replicas = [
        serve(
            MCPEndpoint(
                catalog(),
                EndpointOptions(relay=RedisRelay(redis_url, channel_prefix=prefix), allowed_hosts=["127.0.0.1:*"]),
            )
        )
        for _ in range(2)
    ]
    base = nginx([port_of(url) for url in replicas])
    async with httpx.AsyncClient(timeout=30) as client:
        call = legacy_request("tools/call", {"name": "asks", "arguments": {}})
        async with client.stream("POST", base + "/", json=call, headers=legacy_headers()) as response:
            lines = response.aiter_lines()
            question = await next_message(lines)
            assert question["method"] == "elicitation/create"
            answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"ok": True}}}
            # Straight to each replica in turn: one of them is the one that asked, the other relays.
            for url in replicas:
                posted = await client.post(url + "/", json=answer, headers=legacy_headers())
                assert posted.status_code == 202
            final = await rest_messages(lines)
    assert final[-1]["result"]["structuredContent"]["answer"]["content"] == {"ok": True}


async def test_the_other_replica_relays_the_answer(serve: Callable[..., str], redis_url: str) -> None:
    """The answer POST goes only to the replica that did not ask: the call completes through the relay."""
    prefix = f"test-relay-{uuid.uuid4().hex}:"
    endpoints = [
        MCPEndpoint(catalog(), EndpointOptions(relay=RedisRelay(redis_url, channel_prefix=prefix))) for _ in range(2)
    ]
    asker, other = (serve(endpoint) + "/" for endpoint in endpoints)
    async with httpx.AsyncClient(timeout=30) as client:
        call = legacy_request("tools/call", {"name": "asks", "arguments": {}})
        async with client.stream("POST", asker, json=call, headers=legacy_headers()) as response:
            lines = response.aiter_lines()
            question = await next_message(lines)
            answer = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}}
            assert (await client.post(other, json=answer, headers=legacy_headers())).status_code == 202
            final = await rest_messages(lines)
    assert final[-1]["result"]["structuredContent"]["answer"] == {"action": "decline"}


async def test_the_relay_says_when_an_answer_could_not_be_carried(redis_url: str) -> None:
    away = RedisRelay(f"redis://127.0.0.1:{services.free_port()}/0", timeout=0.5)
    assert await away.forward("someone", b"{}") is False  # Redis away: logged, never raised
    await away.aclose()
    relay = RedisRelay(redis_url, channel_prefix=f"test-relay-{uuid.uuid4().hex}:")
    assert await relay.forward("nobody-listens", b"{}") is False
    assert await relay.forward("someone", b"x" * (2 * 1024 * 1024)) is False  # larger than any answer
    await relay.aclose()
