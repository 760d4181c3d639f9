"""The executor and its coordinator in one process: how an app chooses Redis, what a caller gets when Redis
does not answer or the lock wait runs out, the fencing token a locked method reads, and the warning when
several workers run without Redis."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crank.exceptions import ConfigurationError
from crank.rpc import MCP, RPCApp, fencing_token
from crank.server import MCPConfig, RPCService
from crank.state import LocalCoordinator, RedisCoordinator
from mcp import Client
from tests.services import free_port

pytestmark = pytest.mark.anyio


def body(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


async def post(url: str, payload: Any) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(url + "/rpc", json=payload, timeout=30)


def shared_app(redis_url: str | None, **options: Any) -> tuple[RPCApp, list[str]]:
    rpc = RPCApp(redis_url=redis_url, redis_prefix=f"t-{uuid.uuid4().hex}:", **options)
    runs: list[str] = []

    @rpc.method("critical", lock=True, groups=["mcp"], mcp=MCP())
    async def critical(pause: float = 0.0) -> int | None:
        runs.append("critical")
        await asyncio.sleep(pause)
        return fencing_token()

    @rpc.method("critical_sync", lock=True)
    def critical_sync() -> int | None:  # runs in a worker thread: the token travels with the call's context
        return fencing_token()

    @rpc.method("square", cache=60)
    async def square(n: int) -> int:
        runs.append("square")
        return n * n

    @rpc.method("limited", rate_limit="5/minute")
    async def limited() -> str:
        return "ok"

    @rpc.method("plain")
    async def plain() -> int | None:
        return fencing_token()

    return rpc, runs


@pytest.mark.parametrize("mode", ["local", "redis"])
async def test_a_locked_method_reads_its_fencing_token(serve: Callable[..., str], mode: str, redis_url: str) -> None:
    rpc, _ = shared_app(redis_url if mode == "redis" else None)
    url = serve(rpc)
    tokens = [(await post(url, body(name))).json()["result"] for name in ("critical", "critical", "critical_sync")]
    assert tokens[0] < tokens[1] and isinstance(tokens[2], int)
    assert (await post(url, body("plain"))).json()["result"] is None  # no lock, no token


async def test_redis_down_is_a_clear_error_and_the_cache_a_miss(serve: Callable[..., str]) -> None:
    rpc, runs = shared_app(f"redis://127.0.0.1:{free_port()}/0")
    url = serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)}))
    for name in ("critical", "limited"):
        answer = await post(url, body(name))
        error = answer.json()["error"]
        assert error["code"] == -32004 and "Redis does not answer" in error["message"]
        assert error["data"] == {"exception": "UnavailableError", "retry_after": 1}  # no file, line or trace
        assert answer.headers["retry-after"] == "1"
    assert runs == []  # nothing ran without its lock or its count
    for _ in range(2):
        assert (await post(url, body("square", {"n": 3}))).json()["result"] == 9
    assert runs == ["square", "square"]  # the cache degrades to a miss, the call still works
    async with Client(url + "/mcp") as client:
        result = await client.call_tool("critical", {})
    assert result.is_error and "Redis does not answer" in result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["local", "redis"])
async def test_a_lock_wait_is_bounded_with_a_clear_error(serve: Callable[..., str], mode: str, redis_url: str) -> None:
    rpc, runs = shared_app(redis_url if mode == "redis" else None, lock_timeout=0.3)
    url = serve(rpc)
    holding = asyncio.ensure_future(post(url, body("critical", {"pause": 1.5})))
    while not runs:  # the holder runs, the lock is taken
        await asyncio.sleep(0.01)
    waiter = await post(url, body("critical"))
    assert "result" in (await holding).json()
    error = waiter.json()["error"]
    assert error["code"] == -32004 and error["data"]["exception"] == "LockTimeoutError"
    assert error["message"] == "critical is locked by another call: waited 0.3 s"
    assert runs == ["critical"]


async def test_the_redis_url_comes_from_crank_redis_url(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    monkeypatch.setenv("CRANK_REDIS_URL", redis_url)
    assert isinstance(RPCApp().executor.coordinator, RedisCoordinator)
    assert isinstance(RPCApp(redis_url=None).executor.coordinator, LocalCoordinator)  # None: in process
    monkeypatch.delenv("CRANK_REDIS_URL")
    assert isinstance(RPCApp().executor.coordinator, LocalCoordinator)


def noop() -> None:
    return None


def test_bad_shared_settings_are_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match="redis_url"):
        RPCApp(redis_url="http://localhost:6379")
    with pytest.raises(ConfigurationError, match="lock_timeout"):
        RPCApp(redis_url=None, lock_timeout=0)
    with pytest.raises(ConfigurationError, match="lock_lease"):
        RPCApp(redis_url="redis://127.0.0.1:1/0", lock_lease=0)
    with pytest.raises(ConfigurationError, match="cache_max_bytes"):
        RPCApp(redis_url="redis://127.0.0.1:1/0", cache_max_bytes=0)
    with pytest.raises(ConfigurationError, match="at least 1 call"):
        RPCApp(redis_url=None).method("never", rate_limit="0/minute")(noop)


@pytest.mark.parametrize("variable", ["CRANK_WORKERS", "WEB_CONCURRENCY"])
def test_several_workers_without_redis_log_a_warning_naming_the_methods(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, variable: str, redis_url: str
) -> None:
    for name in ("CRANK_WORKERS", "WEB_CONCURRENCY", "CRANK_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.WARNING, "crank.rpc")
    shared_app(None)[0].build()  # one process: nothing to say
    for value in ("1", "many"):
        monkeypatch.setenv(variable, value)
        shared_app(None)[0].build()
    assert caplog.records == []
    monkeypatch.setenv(variable, "4")
    RPCService(shared_app(None)[0]).build()
    shared_app(redis_url)[0].build()  # shared: nothing to say
    [record] = caplog.records
    assert f"{variable}=4" in record.message and "no Redis is configured" in record.message
    assert "critical, critical_sync, limited, square" in record.message and "plain" not in record.message
