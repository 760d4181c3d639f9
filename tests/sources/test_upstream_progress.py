"""A gateway call whose upstream is slow reports progress when the client asked for it, in both eras, through the
official SDK client; a call that answers in time sends none and is answered as JSON."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import check_runtime
from crank.registry import Registry
from crank.server import GatewayService
from crank.sources.agents import UPSTREAM_PROGRESS_INTERVAL
from mcp import Client
from tests.mcp.wire import modern_headers, modern_request

pytestmark = pytest.mark.anyio


async def slow(request: Request) -> Response:
    await asyncio.sleep(UPSTREAM_PROGRESS_INTERVAL * 2.5)
    return JSONResponse({"done": True})


async def fast(request: Request) -> Response:
    return JSONResponse({"done": True})


@pytest.fixture
def gateway(registry: Registry, serve: Callable[..., str]) -> str:
    upstream = serve(Starlette(routes=[Route("/slow", slow), Route("/fast", fast)]))
    registry.create_workspace("acme", "Acme")
    for name in ("slow", "fast"):
        registry.put_operation("acme", name, {"protocol": "http", "target": {"url": f"{upstream}/{name}"},
                                              "execution_config": {"timeout": 10.0}})  # fmt: skip
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "slow"}, {"operation": "fast"}]})
    registry.publish("acme", "desk", check=check_runtime)
    return serve(GatewayService(registry, require_api_keys=False)) + "/mcp/v1/acme/desk"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_slow_upstream_reports_progress_while_it_waits(gateway: str, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(gateway, mode=mode) as client:
        result = await client.call_tool("slow", {}, progress_callback=on_progress)
    assert result.structured_content == {"done": True}
    assert len(seen) >= 2, seen
    assert [progress for progress, _, _ in seen] == sorted(progress for progress, _, _ in seen)
    assert seen[0][0] >= UPSTREAM_PROGRESS_INTERVAL and seen[0][1] is None
    assert seen[0][2] is not None and seen[0][2].startswith("Waiting for the upstream of slow (")


async def test_a_call_that_answers_in_time_sends_no_progress_and_stays_json(gateway: str) -> None:
    params = {"name": "fast", "arguments": {}}
    request = modern_request("tools/call", params)
    request["params"]["_meta"]["progressToken"] = "p-1"
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(gateway, json=request, headers=modern_headers("tools/call", "fast"))
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["result"]["structuredContent"] == {"done": True}
