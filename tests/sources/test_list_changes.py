"""A publish that changes what an agent offers tells its connected clients: 2025-11-25 on the GET stream,
2026-07-28 on `subscriptions/listen`, through the official SDK client; listeners are bounded per caller."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import PromptsListChanged, ToolsListChanged

from crank.admin.actions import check_runtime
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client, types
from tests.mcp.wire import legacy_headers, legacy_request, modern_headers, modern_request, next_message

pytestmark = pytest.mark.anyio
NOTE = {"name": "note", "messages": [{"text": "Write a note."}]}


def publish(registry: Registry, **agent: Any) -> None:
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "status"}], **agent})
    registry.publish("acme", "desk", check=check_runtime)


@pytest.fixture
def service(registry: Registry) -> GatewayService:
    for workspace in ("acme", "other"):
        registry.create_workspace(workspace, workspace.title())
        for name in ("status", "health"):
            operation = {"protocol": "http", "target": {"url": f"http://127.0.0.1:9/{name}"}, "description": name}
            registry.put_operation(workspace, name, operation)
    registry.put_agent("other", "desk", {"bindings": [{"operation": "status"}]})
    registry.publish("other", "desk", check=check_runtime)
    publish(registry)
    return GatewayService(registry, poll_interval=0.05)


async def first(seen: list[Any], matches: Callable[[Any], bool]) -> Any:
    for _ in range(200):  # at most 10 s: the watcher polls every 50 ms
        found = [item for item in seen if matches(item)]
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing arrived; seen: {seen}")


async def test_a_legacy_client_hears_of_a_publish_on_its_get_stream(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    key = registry.create_api_key("acme")
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    url = serve(service) + "/mcp/v1/acme/desk"
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", message_handler=on_message) as client:
            capabilities = client.server_capabilities
            assert capabilities is not None and capabilities.tools is not None and capabilities.tools.list_changed
            await asyncio.sleep(0.3)  # the client opens its GET stream after `initialized`
            publish(registry, prompts=[NOTE])
            changed = await first(seen, lambda item: isinstance(item, types.PromptListChangedNotification))
            assert changed.method == "notifications/prompts/list_changed"
            assert (await client.list_prompts()).prompts[0].name == "note"
    assert not any(isinstance(item, types.ToolListChangedNotification) for item in seen), seen  # tools did not change


async def test_a_modern_client_hears_only_what_it_asked_for_tagged_with_its_subscription(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    key = registry.create_api_key("acme")
    url = serve(service) + "/mcp/v1/acme/desk"
    async with (
        httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        async with client.listen(prompts_list_changed=True) as prompts, client.listen(tools_list_changed=True) as tools:
            publish(registry, bindings=[{"operation": "status"}, {"operation": "health"}], prompts=[NOTE])
            assert isinstance(await asyncio.wait_for(anext(prompts), 10), PromptsListChanged)
            assert isinstance(await asyncio.wait_for(anext(tools), 10), ToolsListChanged)
            publish(registry, bindings=[{"operation": "status"}, {"operation": "health"}])  # prompts only
            assert isinstance(await asyncio.wait_for(anext(prompts), 10), PromptsListChanged)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(tools), 0.5)  # the tools did not change this time


async def test_the_listen_stream_opens_with_its_acknowledgement_and_tags_each_notification(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    key = registry.create_api_key("acme")
    url = serve(service) + "/mcp/v1/acme/desk"
    request = modern_request("subscriptions/listen", {"notifications": {"toolsListChanged": True,
                                                                         "resourcesListChanged": True}}, 7)  # fmt: skip
    headers = {**modern_headers("subscriptions/listen"), "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=10) as http, http.stream("POST", url, json=request, headers=headers) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.aiter_lines()
        ack = await next_message(lines)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        # resources are not offered by this agent yet, but a publish may add some: agreed to as well
        assert ack["params"] == {"notifications": {"toolsListChanged": True, "resourcesListChanged": True},
                                 "_meta": {"io.modelcontextprotocol/subscriptionId": 7}}  # fmt: skip
        publish(registry, bindings=[{"operation": "health"}])
        changed = await asyncio.wait_for(next_message(lines), 10)
    assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                       "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 7}}}  # fmt: skip


async def test_listeners_are_bounded_per_caller_and_other_tenants_still_listen(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    service.changes.max_per_owner = 2
    mine, theirs = registry.create_api_key("acme"), registry.create_api_key("other")
    base = serve(service) + "/mcp/v1/"
    stream_headers = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    async with httpx.AsyncClient(timeout=10) as http:
        held = [
            await _open(http, base + "acme/desk", {**stream_headers, "Authorization": f"Bearer {mine}"})
            for _ in range(2)
        ]
        refused = await http.get(base + "acme/desk", headers={**stream_headers, "Authorization": f"Bearer {mine}"})
        modern = await http.post(
            base + "acme/desk",
            json=modern_request("subscriptions/listen", {"notifications": {}}),
            headers={**modern_headers("subscriptions/listen"), "Authorization": f"Bearer {mine}"},
        )
        other = await _open(http, base + "other/desk", {**stream_headers, "Authorization": f"Bearer {theirs}"})
        assert len(service.changes) == 3
        for stream, _ in (*held, other):
            await stream.aclose()
    assert refused.status_code == 429 and "At most 2 listening streams" in refused.json()["error"]["message"]
    assert modern.json()["error"]["code"] == -32000 and "At most 2" in modern.json()["error"]["message"]
    for _ in range(100):
        if not len(service.changes):
            break
        await asyncio.sleep(0.05)
    assert len(service.changes) == 0  # a client that leaves frees its place


async def _open(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> tuple[httpx.Response, Any]:
    """A primed GET stream, and its lines (kept: a dropped line iterator closes its stream)."""
    response = await http.send(http.build_request("GET", url, headers=headers), stream=True)
    assert response.status_code == 200, await response.aread()
    lines = response.aiter_lines()
    assert (await anext(lines)).startswith("id: ")  # primed
    return response, lines


async def test_a_get_stream_needs_an_event_stream_and_a_key(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    key = registry.create_api_key("acme")
    base = serve(service) + "/mcp/v1/acme/desk"
    async with httpx.AsyncClient() as http:
        anonymous = await http.get(base, headers={"Accept": "text/event-stream"})
        not_a_stream = await http.get(base, headers={"Accept": "application/json", "Authorization": f"Bearer {key}"})
        deleted = await http.delete(base, headers={"Authorization": f"Bearer {key}"})
    assert anonymous.status_code == 401 and not_a_stream.status_code == 406
    assert deleted.status_code == 405 and deleted.headers["allow"] == "GET, POST"


async def test_a_resuming_client_is_told_exactly_what_changed_while_it_was_away(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    key = registry.create_api_key("acme")
    url = serve(service) + "/mcp/v1/acme/desk"
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("GET", url, headers=headers) as first_stream:
            priming = await anext(first_stream.aiter_lines())
        last_event_id = priming.removeprefix("id: ")
        publish(registry, prompts=[NOTE])  # while it was away: prompts change, tools do not
        await asyncio.sleep(0.5)
        async with http.stream("GET", url, headers={**headers, "Last-Event-ID": last_event_id}) as resumed:
            lines = resumed.aiter_lines()
            told = await next_message(lines)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(next_message(lines), 0.5)
        async with http.stream("GET", url, headers={**headers, "Last-Event-ID": "made-up-7"}) as foreign:
            lines = foreign.aiter_lines()
            everything = [await next_message(lines) for _ in range(3)]
    assert told == {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
    assert [message["method"] for message in everything] == [
        f"notifications/{kind}/list_changed" for kind in ("tools", "resources", "prompts")
    ]


async def test_streams_that_are_never_read_stay_bounded_and_keep_nothing_queued(
    sqlite_registry: Registry, serve: Callable[..., str]
) -> None:
    """A client opens as many GET streams as it may and reads none of them, while the agent is published again
    and again: the ninth stream is refused, a listener keeps flags (never a queue of notifications), and the
    streams' places are freed when the client goes."""
    import socket
    from urllib.parse import urlsplit

    sqlite_registry.create_workspace("acme", "Acme")
    for name in ("status", "health"):
        sqlite_registry.put_operation("acme", name, {"protocol": "http", "description": name,
                                                     "target": {"url": f"http://127.0.0.1:9/{name}"}})  # fmt: skip
    publish(sqlite_registry)
    service = GatewayService(sqlite_registry, poll_interval=0.05)
    key = sqlite_registry.create_api_key("acme")
    address = urlsplit(serve(service))
    request = (f"GET /mcp/v1/acme/desk HTTP/1.1\r\nHost: {address.netloc}\r\nAccept: text/event-stream\r\n"
               f"MCP-Protocol-Version: 2025-11-25\r\nAuthorization: Bearer {key}\r\n\r\n").encode()  # fmt: skip
    held = []
    try:
        for _ in range(service.changes.max_per_owner):
            held.append(socket.create_connection((address.hostname, address.port), timeout=10))
            held[-1].sendall(request)  # and never read
        for _ in range(200):  # the server takes them in its own time
            if len(service.changes) == service.changes.max_per_owner:
                break
            await asyncio.sleep(0.05)
        assert len(service.changes) == service.changes.max_per_owner
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            stream_headers = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
            refused = await http.get(f"{address.scheme}://{address.netloc}/mcp/v1/acme/desk", headers=stream_headers)
        assert refused.status_code == 429
        for round_ in range(20):  # publishes nobody reads about: each stream's socket buffer takes a few bytes
            publish(sqlite_registry, description=f"round {round_}", prompts=[NOTE] if round_ % 2 else [])
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            listed = await http.post(f"{address.scheme}://{address.netloc}/mcp/v1/acme/desk",
                                     json=legacy_request("tools/list"), headers=legacy_headers())  # fmt: skip
        assert listed.status_code == 200 and listed.json()["result"]["tools"]  # the server serves on
        assert len(service.changes) == service.changes.max_per_owner
    finally:
        for connection in held:
            connection.close()
    for _ in range(200):
        if not len(service.changes):
            break
        await asyncio.sleep(0.05)
    assert len(service.changes) == 0


async def _ended(lines: Any) -> bool:
    """Reads a stream's lines until it ends (True), for at most 10 s: a heartbeat every 25 s could not end it."""
    try:
        async with asyncio.timeout(10):
            async for _ in lines:
                pass
    except TimeoutError:
        return False
    return True


async def test_a_revoked_keys_listening_streams_end_and_other_keys_listen_on(
    registry: Registry, serve: Callable[..., str], service: GatewayService
) -> None:
    revoked, kept = registry.create_api_key("acme"), registry.create_api_key("acme")
    url = serve(service) + "/mcp/v1/acme/desk"
    get_headers = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    listen = modern_request("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, 3)
    async with httpx.AsyncClient(timeout=30) as http:
        legacy, legacy_lines = await _open(http, url, {**get_headers, "Authorization": f"Bearer {revoked}"})
        other, other_lines = await _open(http, url, {**get_headers, "Authorization": f"Bearer {kept}"})
        headers = {**modern_headers("subscriptions/listen"), "Authorization": f"Bearer {revoked}"}
        request = http.build_request("POST", url, json=listen, headers=headers)
        modern = await http.send(request, stream=True)
        modern_lines = modern.aiter_lines()
        assert (await next_message(modern_lines))["method"] == "notifications/subscriptions/acknowledged"
        registry.revoke_api_key(revoked)  # the watcher reloads the keys; no list changed
        assert await _ended(legacy_lines)
        ended_modern = await _ended(modern_lines)
        publish(registry, bindings=[{"operation": "health"}])  # the kept key's stream is still told
        told = await asyncio.wait_for(_next_data(other_lines), 10)
        for response in (legacy, other, modern):
            await response.aclose()
    assert ended_modern
    assert told == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def _next_data(lines: Any) -> Any:
    async for line in lines:
        if line.startswith("data: ") and line[6:].strip():
            return json.loads(line[6:])
    raise AssertionError("the stream ended")
