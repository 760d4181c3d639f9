"""The start-up check of Redis's persistence and eviction settings (docs/security.md, "What Crank asks of
PostgreSQL and Redis"), against private redis-servers configured well and badly, and through `crank serve`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from crank.state import RedisStore, check_durability
from tests.services import HOST, RedisServer, free_port, start_redis

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """Started as tests/services.py starts it: no append-only file, no snapshots; the test sets the rest."""
    with start_redis() as server:
        yield server


def configure(server: RedisServer, **settings: str) -> None:
    with redis.Redis.from_url(server.url) as client:
        for name, value in settings.items():
            client.config_set(name.replace("_", "-"), value)


async def test_a_redis_that_forgets_or_evicts_is_warned_about(private_redis: RedisServer) -> None:
    configure(private_redis, maxmemory_policy="allkeys-lru")
    store = RedisStore(private_redis.url)
    forgets, evicts = await store.durability_warnings()
    assert "appendonly no" in forgets and "a restart loses everything" in forgets
    assert "maxmemory-policy allkeys-lru" in evicts and "noeviction" in evicts
    configure(private_redis, save="3600 1", maxmemory_policy="volatile-lru")  # snapshots only; evicts Crank's keys
    forgets, evicts = await store.durability_warnings()
    assert "since the last snapshot" in forgets and "maxmemory-policy volatile-lru" in evicts
    await store.aclose()


async def test_a_redis_that_keeps_every_key_is_not_warned_about(private_redis: RedisServer) -> None:
    configure(private_redis, appendonly="yes", maxmemory_policy="noeviction")
    store = RedisStore(private_redis.url)
    assert await store.durability_warnings() == []
    await store.aclose()


async def test_a_redis_that_refuses_config_or_answers_nothing_is_reported_unchecked(private_redis: RedisServer) -> None:
    # As managed services do: CONFIG is not for the application's user.
    with redis.Redis.from_url(private_redis.url) as admin:
        admin.acl_setuser("crank", enabled=True, passwords=["+app-password"], keys=["*"], commands=["+@all", "-config"])
    store = RedisStore(f"redis://crank:app-password@{HOST}:{private_redis.port}/0")
    (refused,) = await check_durability(store)
    assert refused.startswith("could not check") and "CONFIG GET was refused" in refused
    await store.aclose()
    nowhere = RedisStore(f"redis://{HOST}:{free_port()}/0")
    (unreachable,) = await check_durability(nowhere, timeout=2)
    assert unreachable.startswith("could not check") and "ConnectionError" in unreachable
    await nowhere.aclose()
    with socket.create_server((HOST, 0)) as black_hole:  # connects, never answers
        silent = RedisStore(f"redis://{HOST}:{black_hole.getsockname()[1]}/0")
        (unanswered,) = await check_durability(silent, timeout=0.5)
        assert unanswered.startswith("could not check") and "TimeoutError after 0.5 s" in unanswered
        await silent.aclose()


def serve_and_read_log(redis_url: str, tmp_path: Path) -> list[dict[str, str]]:
    """`crank serve --role mcp` on `redis_url` until its state store is checked; its JSON log lines."""
    log, port = tmp_path / "serve.log", free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CRANK_LISTEN": f"{HOST}:{port}",
           "CRANK_REDIS_URL": redis_url, "CRANK_DATA_DIR": str(tmp_path), "CRANK_LOG_FORMAT": "json"}  # fmt: skip
    with log.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve", "--role", "mcp"], cwd=ROOT, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "state store checked" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert httpx.get(f"http://{HOST}:{port}/healthz").status_code == 200  # it serves, warning or not
    finally:
        process.terminate()
        process.wait(timeout=10)
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_serve_warns_at_start_about_a_redis_that_evicts_and_forgets(private_redis: RedisServer, tmp_path: Path) -> None:
    configure(private_redis, maxmemory_policy="allkeys-lru")
    lines = serve_and_read_log(private_redis.url, tmp_path)
    warnings = [line["message"] for line in lines if line["logger"] == "crank.state" and line["level"] == "warning"]
    assert len(warnings) == 2, lines
    assert "appendonly" in warnings[0] and "maxmemory-policy allkeys-lru" in warnings[1]


def test_serve_starts_quietly_on_a_redis_that_keeps_its_keys(private_redis: RedisServer, tmp_path: Path) -> None:
    configure(private_redis, appendonly="yes", maxmemory_policy="noeviction")
    lines = serve_and_read_log(private_redis.url, tmp_path)
    assert [line["level"] for line in lines if line["logger"] == "crank.state"] == ["info"], lines
