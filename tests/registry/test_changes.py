"""Registry changes pushed to MCP replicas (crank.registry.changes): PostgreSQL LISTEN/NOTIFY, Redis pub/sub
for a SQLite registry, and polling as the fallback.

The replicas here poll every 30 s, far longer than any wait: a change served within the wait can only have
come by the push. Waits are guards against a hang, not measures of speed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest
import redis

from crank.gateway.client import UpstreamClient
from crank.mcp.catalog import Catalog
from crank.registry import Changes, PublishedAgent, Registry, migrate, open_engine
from crank.registry.changes import (
    POSTGRES_CHANNEL,
    REDIS_CHANNEL,
    ChangeListener,
    PostgresListener,
    RedisAnnouncer,
    RedisListener,
    change_announcer,
    change_listener,
)
from crank.server import GatewayService
from crank.sources.agents import AgentSource
from tests import services

LONG_POLL = 30.0  # the replicas' poll interval: longer than any wait below
WAIT = 10.0  # seconds a test waits for a pushed change (a guard; the push takes milliseconds)


def operation(text: str) -> dict[str, Any]:
    return {"protocol": "http", "target": {"method": "GET", "url": "http://127.0.0.1:9/never"}, "description": text}


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[tuple[str, str]]:
    """A fresh, migrated database of the test PostgreSQL: its SQLAlchemy URL and its name."""
    with services.fresh_database(postgres_url, "crank_push") as (url, name):
        engine = open_engine(url, pooled=False)
        migrate(engine)
        engine.dispose()
        yield url, name


@pytest.fixture
def registries() -> Iterator[list[Registry]]:
    made: list[Registry] = []
    yield made
    for registry in made:
        registry.engine.dispose()


def seeded(registries: list[Registry], url: str, **options: Any) -> Registry:
    """A registry with workspace `shop`, agent `desk` published at version 1 (one tool, `get_book`)."""
    registry = Registry(open_engine(url, pooled=False), **options)
    registries.append(registry)
    registry.create_workspace("shop", "Shop")
    registry.put_operation("shop", "get_book", operation("version 1"))
    registry.put_agent("shop", "desk", {"bindings": [{"operation": "get_book"}]})
    registry.publish("shop", "desk")
    return registry


def replica(serve: Callable[..., str], registry: Registry, listener: ChangeListener | None, **options: Any) -> str:
    """An MCP replica of its own (its own engine), serving `shop/desk`; returns the URL of its plain tool list."""
    own = Registry(open_engine(registry.engine.url.render_as_string(hide_password=False), pooled=False))
    gateway = GatewayService(own, poll_interval=LONG_POLL, listener=listener, **options)
    return serve(gateway) + "/mcp/v1/shop/desk/tools"


def served_description(tools: str, headers: dict[str, str] | None = None) -> str | None:
    answer = httpx.get(tools, headers=headers, timeout=WAIT)
    return str(answer.json()["tools"][0]["description"]) if answer.status_code == 200 else None


def until(condition: Callable[[], bool], wait: float = WAIT) -> None:
    deadline = time.monotonic() + wait
    while not condition():
        assert time.monotonic() < deadline, "the change waited for did not come"
        time.sleep(0.02)


def republish(registry: Registry, text: str) -> None:
    registry.put_operation("shop", "get_book", operation(text))
    registry.publish("shop", "desk")


async def provided(source: AgentSource, scope: dict[str, Any]) -> Catalog:
    """The catalog the source provides for `scope`, built first when it is not built yet."""
    catalog = source.provide(scope)
    return catalog if isinstance(catalog, Catalog) else await catalog


def listening(listener: ChangeListener) -> None:
    until(lambda: listener.healthy)


def test_a_publish_on_postgresql_is_served_before_the_next_poll(
    postgres_database: tuple[str, str], registries: list[Registry], serve: Callable[..., str]
) -> None:
    url, _ = postgres_database
    registry = seeded(registries, url)
    listener = PostgresListener(url)
    tools = replica(serve, registry, listener, require_api_keys=False)
    assert served_description(tools) == "version 1"
    listening(listener)
    republish(registry, "version 2")
    until(lambda: served_description(tools) == "version 2")


def test_a_revoked_key_stops_working_before_the_next_poll(
    postgres_database: tuple[str, str], registries: list[Registry], serve: Callable[..., str]
) -> None:
    url, _ = postgres_database
    registry = seeded(registries, url)
    key = registry.create_api_key("shop")
    listener = PostgresListener(url)
    tools = replica(serve, registry, listener, key_list_max_age=2 * LONG_POLL + 1)
    bearer = {"Authorization": f"Bearer {key}"}
    assert httpx.get(tools, headers=bearer).status_code == 200
    listening(listener)
    registry.revoke_api_key(key)
    until(lambda: httpx.get(tools, headers=bearer).status_code == 401)


def test_a_killed_listening_connection_reconnects_and_hears_the_next_publish(
    postgres_database: tuple[str, str], registries: list[Registry], serve: Callable[..., str]
) -> None:
    url, name = postgres_database
    registry = seeded(registries, url)
    listener = PostgresListener(url)
    tools = replica(serve, registry, listener, require_api_keys=False)
    listening(listener)
    listen_query = f'LISTEN "{POSTGRES_CHANNEL}"'
    with psycopg.connect(url.replace("postgresql+psycopg:", "postgresql:"), autocommit=True) as admin:
        query = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query = %s"
        (first,) = admin.execute(query, (name, listen_query)).fetchone() or (None,)
        assert first is not None
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        until(lambda: not listener.healthy)

        def listening_again() -> bool:
            row = admin.execute(query, (name, listen_query)).fetchone()
            return listener.healthy and row is not None and row[0] != first

        until(listening_again)
    republish(registry, "version 2")
    until(lambda: served_description(tools) == "version 2")


def test_polling_still_finds_a_change_when_no_announcement_comes(
    postgres_database: tuple[str, str], registries: list[Registry], serve: Callable[..., str]
) -> None:
    url, _ = postgres_database
    registry = seeded(registries, url)
    unreachable = PostgresListener(f"postgresql+psycopg://crank@{services.HOST}:{services.free_port()}/nothing")
    own = Registry(open_engine(url, pooled=False))
    registries.append(own)
    tools = serve(GatewayService(own, poll_interval=0.2, listener=unreachable, require_api_keys=False))
    tools += "/mcp/v1/shop/desk/tools"
    assert served_description(tools) == "version 1"
    republish(registry, "version 2")
    until(lambda: served_description(tools) == "version 2")
    assert not unreachable.healthy


def test_a_publish_on_sqlite_is_served_before_the_next_poll_over_redis(
    tmp_path: Path, redis_url: str, registries: list[Registry], serve: Callable[..., str]
) -> None:
    url = f"sqlite:///{tmp_path / 'registry.sqlite3'}"
    engine = open_engine(url, pooled=False)
    migrate(engine)
    engine.dispose()
    announcer = change_announcer(url, redis_url)
    assert isinstance(announcer, RedisAnnouncer)
    registry = seeded(registries, url, announce=announcer)
    listener = change_listener(url, redis_url)
    assert isinstance(listener, RedisListener)
    tools = replica(serve, registry, listener, require_api_keys=False)
    assert served_description(tools) == "version 1"
    listening(listener)
    republish(registry, "version 2")
    until(lambda: served_description(tools) == "version 2")
    announcer.close()


def test_a_listing_begun_before_a_publish_is_refused_on_its_next_page_never_mixed(
    postgres_database: tuple[str, str], registries: list[Registry], serve: Callable[..., str]
) -> None:
    url, _ = postgres_database
    registry = seeded(registries, url)
    many = {f"op{index:03}": operation("version 1") for index in range(150)}  # two pages of 100
    registry.put_operations("shop", many)
    registry.put_agent("shop", "desk", {"bindings": [{"operation": name} for name in sorted(many)]})
    registry.publish("shop", "desk")
    listener = PostgresListener(url)
    endpoint = replica(serve, registry, listener, require_api_keys=False).removesuffix("/tools")
    listening(listener)

    def tools_list(cursor: str | None = None) -> dict[str, Any]:
        params = {"cursor": cursor} if cursor is not None else {}
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
        headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
        answer: dict[str, Any] = httpx.post(endpoint, json=message, headers=headers, timeout=WAIT).json()
        return answer

    first = tools_list()["result"]
    assert {tool["description"] for tool in first["tools"]} == {"version 1"}
    registry.put_operations("shop", {name: operation("version 2") for name in many})
    registry.publish("shop", "desk")
    until(lambda: tools_list()["result"]["tools"][0]["description"] == "version 2")
    stale = tools_list(first["nextCursor"])
    assert stale["error"]["code"] == -32602
    assert "list the tools again from the first page" in stale["error"]["message"]


class SlowRegistry(Registry):
    """A registry whose reads of the published agents take a while and are counted: a reload long enough
    for a burst of announcements to arrive while it runs."""

    reads = 0

    def published(self, changes: Changes | None = None) -> list[PublishedAgent]:
        self.reads += 1
        time.sleep(0.3)
        return super().published(changes)


@pytest.mark.anyio
async def test_a_burst_of_announcements_during_a_reload_costs_one_more_reload_not_one_each(
    postgres_database: tuple[str, str], registries: list[Registry]
) -> None:
    url, _ = postgres_database
    registry = seeded(registries, url)
    slow = SlowRegistry(open_engine(url, pooled=False))
    registries.append(slow)
    listener = PostgresListener(url)
    source = AgentSource(slow, UpstreamClient(), poll_interval=LONG_POLL, require_keys=False, listener=listener,
                         freeze_heap=False)  # fmt: skip
    await anyio.to_thread.run_sync(source.reload)
    source.ensure_watching()
    with anyio.fail_after(WAIT):
        while not listener.healthy:
            await anyio.sleep(0.02)
    before = slow.reads

    def burst() -> None:
        for version in range(2, 12):
            republish(registry, f"version {version}")

    await anyio.to_thread.run_sync(burst)
    scope = {"path": "/", "path_params": {"workspace": "shop", "agent": "desk"}}
    with anyio.fail_after(WAIT):
        while (await provided(source, scope)).version != "11":
            await anyio.sleep(0.02)
    await anyio.sleep(1)  # any reload still owed would run now
    await source.aclose()
    assert 1 <= slow.reads - before <= 4  # ten announcements: not ten reloads


def test_the_listener_follows_the_registry_and_the_settings() -> None:
    postgres = "postgresql+psycopg://crank@127.0.0.1:5432/crank"
    assert isinstance(change_listener(postgres, "redis://127.0.0.1:6379/0"), PostgresListener)
    assert change_announcer(postgres, "redis://127.0.0.1:6379/0") is None  # NOTIFY travels in the transaction
    assert change_listener("sqlite:///registry.sqlite3", None) is None  # polling only
    assert change_announcer("sqlite:///registry.sqlite3", None) is None


@pytest.mark.anyio
async def test_announcements_that_are_not_generations_are_checks_and_the_listener_lives_on(redis_url: str) -> None:
    # Anyone who may PUBLISH (or NOTIFY) can send anything: a digit that int() refuses, a huge number, bytes
    # that are not UTF-8. Each is "check now" (None), and the listener keeps its one connection.
    heard: list[int | None] = []
    listener = RedisListener(redis_url)
    task = asyncio.get_running_loop().create_task(listener.run(heard.append))
    client = redis.Redis.from_url(redis_url)
    try:
        with anyio.fail_after(WAIT):
            while not listener.healthy:
                await anyio.sleep(0.02)
        for payload in ("²", "9" * 5000, b"\xff\xfe", "-3", "41"):
            client.publish(REDIS_CHANNEL, payload)
        with anyio.fail_after(WAIT):
            while 41 not in heard:
                await anyio.sleep(0.02)
        assert heard == [None, None, None, None, None, 41] and not task.done()  # None first: connected
    finally:
        task.cancel()
        client.close()
