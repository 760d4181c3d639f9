"""Fairness of the shared upstream pool (crank/gateway/client.py) seen through the gateway: two workspaces
call the same real upstream on loopback; one floods it with calls that hang, the other is still served,
and a call that never left the gateway does not use up its idempotency key."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import check_runtime
from crank.gateway.client import UpstreamClient
from crank.registry import Registry
from crank.server import GatewayService

pytestmark = pytest.mark.anyio
WORKSPACES = ("a", "b")


class Upstream:
    """`/hang` holds its call until `release` is set; `/fast` answers at once; `/records` counts its effects.
    It runs in the `serve` fixture's thread, hence a threading.Event polled rather than awaited."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hanging = 0
        self.created: list[str | None] = []
        self.app = Starlette(routes=[
            Route("/hang", self.hang), Route("/fast", self.fast), Route("/records", self.create, methods=["POST"]),
        ])  # fmt: skip

    async def hang(self, request: Request) -> Response:
        self.hanging += 1
        while not self.release.is_set():
            await asyncio.sleep(0.02)
        return JSONResponse({"ok": True})

    async def fast(self, request: Request) -> Response:
        return JSONResponse({"fast": True})

    async def create(self, request: Request) -> Response:
        self.created.append(request.headers.get("idempotency-key"))
        return JSONResponse({"id": len(self.created)}, status_code=201)


def publish(registry: Registry, base: str) -> None:
    empty = {"type": "object"}
    record = {"type": "object", "properties": {"request_id": {"type": "string"}}}
    operations = {
        "hang": {"protocol": "http", "target": {"url": base + "/hang"}, "input_schema": empty,
                 "execution_config": {"timeout": 60, "retries": 0}},
        "fast": {"protocol": "http", "target": {"url": base + "/fast"}, "input_schema": empty,
                 "execution_config": {"timeout": 20}},
        "create": {"protocol": "http", "target": {"method": "POST", "url": base + "/records"}, "input_schema": record,
                   "execution_config": {"timeout": 0.5, "idempotency": {"argument": "request_id"}}},
    }  # fmt: skip
    for workspace in WORKSPACES:
        registry.create_workspace(workspace, workspace.upper())
        for name, spec in operations.items():
            registry.put_operation(workspace, name, spec)
        registry.put_agent(workspace, "desk", {"bindings": [{"operation": name} for name in operations]})
        registry.publish(workspace, "desk", check=check_runtime)


class Caller:
    def __init__(self, root: str, client: httpx.AsyncClient) -> None:
        self.root, self.client = root, client

    async def __call__(self, workspace: str, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.root}/mcp/v1/{workspace}/desk/call"
        result = (await self.client.post(url, json={"name": tool, "arguments": arguments or {}})).json()
        text = result["content"][0]["text"]
        return {"error": json.loads(text)} if result.get("isError") else {"value": result.get("structuredContent")}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    upstream = Upstream()
    yield upstream
    upstream.release.set()  # whatever the test did, nothing hangs past it


@pytest.fixture
async def call(sqlite_registry: Registry, serve: Callable[..., str], upstream: Upstream) -> AsyncIterator[Caller]:
    publish(sqlite_registry, serve(upstream.app))
    client = UpstreamClient(limit_per_host=4, limit_per_tenant=2)
    root = serve(GatewayService(sqlite_registry, client=client, require_api_keys=False))
    async with httpx.AsyncClient(timeout=60) as http:
        yield Caller(root, http)


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def test_a_workspace_flooding_an_origin_does_not_starve_another(call: Caller, upstream: Upstream) -> None:
    flood = [asyncio.ensure_future(call("a", "hang")) for _ in range(12)]
    await _until(lambda: upstream.hanging == 2)  # a's share of the origin: its ten other calls wait
    answer = await call("b", "fast")
    assert answer == {"value": {"fast": True}}
    assert not upstream.release.is_set() and not any(task.done() for task in flood)  # a's calls still in flight
    upstream.release.set()
    assert all(result == {"value": {"ok": True}} for result in await asyncio.gather(*flood))


async def test_a_post_never_sent_leaves_its_idempotency_key_free(call: Caller, upstream: Upstream) -> None:
    flood = [asyncio.ensure_future(call("a", "hang")) for _ in range(2)]  # a's whole share, held
    await _until(lambda: upstream.hanging == 2)
    busy = await call("a", "create", {"request_id": "k-1"})
    assert busy["error"]["error_code"] == "upstream_busy"
    assert busy["error"]["recoverable"] is True and busy["error"]["details"] == {"retry_after": 5}
    assert "not sent" in busy["error"]["message"] and upstream.created == []
    upstream.release.set()
    await asyncio.gather(*flood)
    first = await call("a", "create", {"request_id": "k-1"})  # the same key: free, so the call runs
    again = await call("a", "create", {"request_id": "k-1"})  # and then it is the stored outcome
    assert first == again == {"value": {"id": 1}}
    assert upstream.created == ["k-1"]
