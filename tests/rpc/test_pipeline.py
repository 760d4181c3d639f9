"""One executor: cache, lock, events (post_response after the response, never for errors or cache hits)."""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crank.exceptions import ConfigurationError
from crank.rpc import Event, RPCApp
from crank.server import RPCService
from mcp import Client
from tests.rpc.apps import make_app

pytestmark = pytest.mark.anyio


def call(method: str, params: Any = None, request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


async def post(url: str, body: Any) -> Any:
    async with httpx.AsyncClient() as client:
        return (
            await client.post(url + "/rpc", content=json.dumps(body), headers={"Content-Type": "application/json"})
        ).json()


async def test_cached_call_does_not_run_the_method(serve: Callable[..., str]) -> None:
    app, ran = make_app()
    url = serve(app)
    first = await post(url, call("product.get", {"id": 5}))
    second = await post(url, call("product.get", {"id": 5}))
    assert first["result"] == second["result"] == {"id": 5, "name": "p5", "secret": "s3cret"}
    assert ran.calls.count(("product.get", 5)) == 1
    await post(url, call("product.get", {"id": 6}))
    assert ran.calls.count(("product.get", 6)) == 1


def squares(cache_size: int, ttl: float) -> tuple[RPCApp, list[int]]:
    rpc = RPCApp(cache_size=cache_size)
    runs: list[int] = []

    @rpc.method("square", cache=ttl)
    def square(n: int) -> int:
        runs.append(n)
        return n * n

    return rpc, runs


async def test_the_result_cache_keeps_the_most_recently_used_results_within_its_size(
    serve: Callable[..., str],
) -> None:
    rpc, runs = squares(cache_size=3, ttl=600)
    url = serve(RPCService(rpc))
    for n in (1, 2, 3, 1):  # 1 is a hit, and now the most recently used
        await post(url, call("square", {"n": n}))
    assert runs == [1, 2, 3]
    await post(url, call("square", {"n": 4}))  # full: the least recently used (2) makes room
    await post(url, call("square", {"n": 1}))
    await post(url, call("square", {"n": 2}))
    assert runs == [1, 2, 3, 4, 2]
    assert len(rpc.executor.coordinator._cache) == 3  # type: ignore[attr-defined]


async def test_a_cached_result_expires_at_its_ttl(serve: Callable[..., str]) -> None:
    rpc, runs = squares(cache_size=10, ttl=0.2)
    url = serve(RPCService(rpc))
    await post(url, call("square", {"n": 1}))
    await asyncio.sleep(0.3)
    await post(url, call("square", {"n": 1}))
    assert runs == [1, 1]


def test_the_cache_size_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="cache_size"):
        RPCApp(cache_size=0)


async def test_locked_method_never_overlaps(serve: Callable[..., str]) -> None:
    app, ran = make_app()
    url = serve(app)
    await post(url, [call("slow", request_id=i) for i in range(4)])
    assert ran.overlapped is False


async def test_sync_methods_run_off_the_event_loop(serve: Callable[..., str]) -> None:
    app = RPCApp()
    loop_thread: list[str] = []

    @app.method("where")
    def where() -> str:
        return threading.current_thread().name

    @app.method("loop")
    async def loop() -> str:
        loop_thread.append(threading.current_thread().name)
        return loop_thread[0]

    url = serve(app)
    sync_thread = (await post(url, call("where")))["result"]
    async_thread = (await post(url, call("loop")))["result"]
    assert sync_thread != async_thread


async def test_callable_class_is_a_method(serve: Callable[..., str]) -> None:
    app = RPCApp()

    @app.method("add")
    class Add:
        def __call__(self, a: int, b: int = 1) -> int:
            return a + b

    assert (await post(serve(app), call("add", {"a": 2})))["result"] == 3


def recorder(app: RPCApp) -> list[tuple[str, str]]:  # the events of app's methods
    seen: list[tuple[str, str]] = []
    for name in ("request", "response", "error", "post_response"):

        async def handler(event: Event) -> None:
            seen.append((event.name, event.method))

        app.on(name)(handler)  # type: ignore[arg-type]
    return seen


async def test_events_for_a_call_an_error_and_a_cache_hit(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    seen = recorder(app.rpc)
    url = serve(app)
    await post(url, call("echo", {"text": "a"}))
    await post(url, call("product.get", {"id": 0}))
    await post(url, call("product.get", {"id": 1}))
    await post(url, call("product.get", {"id": 1}))
    await asyncio.sleep(0.05)
    assert seen == [
        ("request", "echo"), ("response", "echo"), ("post_response", "echo"),
        ("request", "product.get"), ("error", "product.get"),
        ("request", "product.get"), ("response", "product.get"), ("post_response", "product.get"),
        ("request", "product.get"),  # the cache hit: no response, no post_response
    ]  # fmt: skip


async def test_post_response_fires_after_the_response_once_per_call_in_a_batch(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    sent_before: list[bool] = []
    responded = asyncio.Event()

    @app.rpc.on("post_response")
    async def after(event: Event) -> None:
        sent_before.append(responded.is_set())

    url = serve(app)
    async with httpx.AsyncClient() as client:
        body = json.dumps([call("echo", {"text": "a"}, 1), call("echo", {"text": "b"}, 2), call("boom", {}, 3)])
        response = await client.post(url + "/rpc", content=body, headers={"Content-Type": "application/json"})
        responded.set()
    assert len(response.json()) == 3
    await asyncio.sleep(0.1)
    assert len(sent_before) == 2  # two executed calls; none for the error


async def test_post_response_fires_for_mcp_calls_too(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    fired: list[str] = []

    @app.rpc.on("post_response")
    def after(event: Event) -> None:
        fired.append(event.source)

    async with Client(serve(app) + "/mcp") as client:
        await client.call_tool("echo", {"text": "a"})
        await client.call_tool("product.get", {"id": 0})
    assert fired == ["mcp"]


async def test_nothing_is_introspected_per_request(serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect
    import typing

    import crank.schema.generate

    app, _ = make_app()
    url = serve(app)
    app.build()
    import httpcore  # noqa: F401  (the test client imports it at its first request: introspection, not Crank's)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("introspection during a request")

    for target, name in (
        (crank.schema.generate, "describe_method"),
        (inspect, "signature"),
        (typing, "get_type_hints"),
    ):
        monkeypatch.setattr(target, name, forbidden)
    assert (await post(url, call("echo", {"text": "a"})))["result"] == "a"
    async with Client(url + "/mcp") as client:
        assert (await client.call_tool("product.get", {"id": 9})).structured_content == {
            "result": {"id": 9, "name": "p9"}
        }


async def test_internal_request_id_is_logged_not_sent(
    serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import re

    app, _ = make_app()
    url = serve(app)
    with caplog.at_level(logging.DEBUG, logger="crank.rpc"):
        answer = await post(url, call("boom"))
    logged = re.findall(r"request_id=([0-9a-f]{32})", caplog.text)
    assert logged and all(request_id not in json.dumps(answer) for request_id in logged)
    assert "hunter2" in caplog.text and "hunter2" not in json.dumps(answer)  # the error is logged, not sent


async def test_timestamps_in_and_out(serve: Callable[..., str]) -> None:
    app = RPCApp(datetime_format="timestamp")

    @app.method("shift")
    async def shift(at: datetime.datetime) -> datetime.datetime:
        return at + datetime.timedelta(seconds=60)

    document = app.openrpc("v1")
    assert document["methods"][0]["params"][0]["schema"]["type"] == "integer"
    assert document["methods"][0]["result"]["schema"]["type"] == "integer"
    assert (await post(serve(app), call("shift", {"at": 1_700_000_000})))["result"] == 1_700_000_060
