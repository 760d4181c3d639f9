"""`AgentSource` (crank.sources.agents): the watcher that follows the registry keeps running, and a reload reads
and rebuilds only what changed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from sqlalchemy import Engine

from crank.gateway.client import UpstreamClient
from crank.registry import Changes, PublishedAgent, Registry, migrate, open_engine
from crank.registry.runtime import OAuthPolicy
from crank.sources.agents import AgentSource

pytestmark = pytest.mark.anyio


async def test_a_watcher_that_ended_is_started_again_by_the_next_request(sqlite_registry: Registry) -> None:
    source = AgentSource(sqlite_registry, UpstreamClient(), require_keys=False, freeze_heap=False)
    scope = {"path": "/", "path_params": {"workspace": "shop", "agent": "desk"}}
    with contextlib.suppress(Exception):  # no such agent: what matters is what the request started
        source.provide(scope)
    first = source._watcher
    assert first is not None and not first.done()
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    await asyncio.sleep(0)  # the task's done callbacks run
    with contextlib.suppress(Exception):
        source.provide(scope)
    second = source._watcher
    assert second is not None and second is not first and not second.done()
    await source.aclose()


class CountingRegistry(Registry):
    """The registry, noting which published agents each reload reads back."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.read: list[list[tuple[str, str]]] = []

    def published(self, changes: Changes | None = None) -> list[PublishedAgent]:
        agents = super().published(changes)
        self.read.append(sorted((agent.workspace, agent.agent) for agent in agents))
        return agents


def tenant(registry: Registry, slug: str, text: str = "version 1") -> None:
    """Workspace `slug` with agent `desk` of one tool, published; `text` is the tool's description."""
    registry.put_workspace(slug, slug.title())
    target = {"method": "GET", "url": "http://127.0.0.1:9/books"}
    registry.put_operation(slug, "get_book", {"protocol": "http", "target": target, "description": text})
    registry.put_agent(slug, "desk", {"bindings": [{"operation": "get_book"}]})
    registry.publish(slug, "desk")


async def test_a_publish_in_one_workspace_reads_and_rebuilds_that_agent_alone(database_url: str) -> None:
    engine = open_engine(database_url, pooled=False)
    migrate(engine)
    registry = CountingRegistry(engine)
    slugs = [f"tenant{index:02}" for index in range(12)]
    for slug in slugs:
        tenant(registry, slug)
    source = AgentSource(registry, UpstreamClient(), require_keys=False)  # the heap settled as in production
    try:
        source.reload()
        assert registry.read[-1] == [(slug, "desk") for slug in slugs]  # the first load reads everything
        before = dict(source._catalogs)
        tenant(registry, "tenant03", "version 2")
        source.reload()
        assert registry.read[-1] == [("tenant03", "desk")]
        rebuilt = [key for key, served in source._catalogs.items() if served is not before[key]]
        assert rebuilt == [("tenant03", "desk")]
        scope = {"path": "/", "path_params": {"workspace": "tenant03", "agent": "desk"}}
        assert source.provide(scope).get("get_book").tool.description == "version 2"  # type: ignore[union-attr]
        # A workspace's new OAuth policy gives its tools other scopes: its agents, and only they, are rebuilt.
        before = dict(source._catalogs)
        registry.set_workspace_oauth("tenant05", OAuthPolicy(issuers=("https://id.tenant05.example",)))
        source.reload()
        assert registry.read[-1] == [("tenant05", "desk")]
        assert [key for key, served in source._catalogs.items() if served is not before[key]] == [("tenant05", "desk")]
        assert source.oauth_policy("tenant05") is not None and source.oauth_policy("tenant04") is None
    finally:
        await source.aclose()
        engine.dispose()
