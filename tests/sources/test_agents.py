"""`AgentSource` (crank.sources.agents): the watcher that follows the registry keeps running; agents are built on
their first request, kept while they are among the most recently used, and a reload rebuilds only what changed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine, event

from crank.exceptions import CatalogNotFoundError, DependencyUnavailableError
from crank.gateway.client import UpstreamClient
from crank.mcp.catalog import Catalog
from crank.registry import Changes, PublishedAgent, Registry
from crank.registry.runtime import OAuthPolicy
from crank.sources.agent_cache import AgentCacheLimits
from crank.sources.agents import BUILD_UNIT, AgentSource

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
    """The registry, noting which published agents' views each read returns."""

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


def scope_of(workspace: str, agent: str = "desk", client: str = "192.0.2.1") -> dict[str, Any]:
    return {"path": "/", "path_params": {"workspace": workspace, "agent": agent}, "client": (client, 50000)}


async def provided(source: AgentSource, workspace: str, agent: str = "desk", client: str = "192.0.2.1") -> Catalog:
    """The catalog the source provides for the agent, built first when it is not built yet."""
    catalog = source.provide(scope_of(workspace, agent, client))
    return catalog if isinstance(catalog, Catalog) else await catalog


def description(catalog: Catalog) -> str | None:
    entry = catalog.get("get_book")
    assert entry is not None
    return entry.tool.description


@pytest.fixture
def counting(registry: Registry) -> CountingRegistry:
    """The test's registry (SQLite and PostgreSQL), counting its reads."""
    return CountingRegistry(registry.engine)


@contextlib.asynccontextmanager
async def source_of(registry: Registry, **options: Any) -> AsyncIterator[AgentSource]:
    source = AgentSource(registry, UpstreamClient(), require_keys=False, **options)  # the heap settled as served
    try:
        source.reload()
        yield source
    finally:
        await source.aclose()


async def test_an_agent_is_built_on_its_first_request_and_a_publish_rebuilds_only_the_agents_built_here(
    counting: CountingRegistry,
) -> None:
    slugs = [f"tenant{index:02}" for index in range(12)]
    for slug in slugs:
        tenant(counting, slug)
    async with source_of(counting) as source:
        assert counting.read == []  # loaded: the index of what is published, no agent's view
        assert source.serves("tenant07", "desk") and not source.serves("tenant07", "other")
        assert description(await provided(source, "tenant03")) == "version 1"
        assert description(await provided(source, "tenant05")) == "version 1"
        assert counting.read == [[("tenant03", "desk")], [("tenant05", "desk")]]  # each read once, when asked for
        held = source._catalogs.peek(("tenant05", "desk"))
        tenant(counting, "tenant03", "version 2")
        tenant(counting, "tenant07", "version 2")
        source.reload()
        assert counting.read[-1] == [("tenant03", "desk")]  # built here: rebuilt at once; tenant07 is not
        assert source._catalogs.peek(("tenant05", "desk")) is held  # untouched: kept as it was
        assert description(await provided(source, "tenant03")) == "version 2"
        assert description(await provided(source, "tenant07")) == "version 2"  # built now, at its new version
        # A workspace's new OAuth policy gives its tools other scopes: its agents built here are rebuilt.
        counting.set_workspace_oauth("tenant05", OAuthPolicy(issuers=("https://id.tenant05.example",)))
        source.reload()
        assert counting.read[-1] == [("tenant05", "desk")]
        assert source._catalogs.peek(("tenant05", "desk")) is not held
        assert (
            await source.oauth_policy("tenant05", "-") is not None
            and await source.oauth_policy("tenant04", "-") is None
        )


async def test_more_agents_than_the_cache_holds_are_all_served_in_turn_and_a_dropped_one_comes_back_current(
    counting: CountingRegistry,
) -> None:
    slugs = [f"tenant{index:02}" for index in range(8)]
    for slug in slugs:
        tenant(counting, slug, f"{slug} version 1")
    async with source_of(counting, agent_cache=AgentCacheLimits(size=3, builds_per_second=1000)) as source:
        for _ in range(2):
            for slug in slugs:
                assert description(await provided(source, slug)) == f"{slug} version 1"
                assert len(source._catalogs) <= 3
        assert source._catalogs.keys() == [("tenant05", "desk"), ("tenant06", "desk"), ("tenant07", "desk")]
        await provided(source, "tenant05")  # used again: the most recent; tenant06 is now the least
        await provided(source, "tenant00")
        assert ("tenant06", "desk") not in source._catalogs and ("tenant05", "desk") in source._catalogs
        tenant(counting, "tenant01", "tenant01 version 2")  # published while it is not built here
        source.reload()
        assert description(await provided(source, "tenant01")) == "tenant01 version 2"


async def test_a_burst_of_requests_for_one_cold_agent_builds_it_once(counting: CountingRegistry) -> None:
    tenant(counting, "acme")
    async with source_of(counting) as source:
        catalogs = await asyncio.gather(*(provided(source, "acme") for _ in range(50)))
        assert all(catalog is catalogs[0] for catalog in catalogs)
        assert counting.read == [[("acme", "desk")]]


async def test_requests_for_agents_that_do_not_exist_are_refused_without_reading_the_registry(
    counting: CountingRegistry,
) -> None:
    tenant(counting, "acme")
    async with source_of(counting) as source:
        statements: list[str] = []

        def noted(*args: Any) -> None:
            statements.append(str(args[2]))

        event.listen(counting.engine, "before_cursor_execute", noted)
        try:
            for index in range(10_000):
                with pytest.raises(CatalogNotFoundError):
                    source.provide(scope_of("acme" if index % 2 else f"ghost{index}", f"agent{index}"))
        finally:
            event.remove(counting.engine, "before_cursor_execute", noted)
        assert statements == []


async def test_cold_builds_past_the_budget_are_refused_and_one_workspace_or_client_cannot_spend_it_all(
    counting: CountingRegistry,
) -> None:
    for slug in ("acme", "globex"):
        tenant(counting, slug)
        counting.put_agent(slug, "support", {"bindings": [{"operation": "get_book"}]})
        counting.publish(slug, "support")
    # Four builds a second in all, a quarter of them (one) for one workspace, and one for one client address.
    async with source_of(counting, agent_cache=AgentCacheLimits(builds_per_second=4)) as source:
        await provided(source, "acme", "desk", client="192.0.2.1")
        with pytest.raises(DependencyUnavailableError) as refused:
            await provided(source, "acme", "support", client="192.0.2.2")  # acme's share is spent
        assert refused.value.retry_after >= 1
        with pytest.raises(DependencyUnavailableError):
            await provided(source, "globex", "desk", client="192.0.2.1")  # so is this client's, whatever workspace
        await provided(source, "globex", "desk", client="192.0.2.3")  # another workspace, another client: built
        await provided(source, "acme", "desk", client="192.0.2.4")  # and what is built is served, whatever the budget


async def test_a_large_agent_costs_its_workspace_builds_by_its_tools_known_before_it_is_built(
    counting: CountingRegistry,
) -> None:
    """An agent of 60 tools costs three builds (one per `BUILD_UNIT`), taken from its workspace's share as its build
    starts: the share (two of eight) is spent, and the workspace's next cold agent waits."""
    counting.put_workspace("big", "Big")
    names = [f"op{index:02}" for index in range(3 * BUILD_UNIT)]
    for name in names:
        counting.put_operation("big", name, {"protocol": "http", "target": {"url": f"http://127.0.0.1:9/{name}"}})
    counting.put_agent("big", "all", {"bindings": [{"operation": name} for name in names]})
    counting.put_agent("big", "one", {"bindings": [{"operation": names[0]}]})
    counting.publish("big", "all")
    counting.publish("big", "one")
    async with source_of(counting, agent_cache=AgentCacheLimits(builds_per_second=8)) as source:
        await provided(source, "big", "all", client="192.0.2.1")
        with pytest.raises(DependencyUnavailableError):
            await provided(source, "big", "one", client="192.0.2.2")
    counting.put_agent("big", "all", {"bindings": [{"operation": names[0]}]})  # the same workspace, small agents
    counting.publish("big", "all")
    async with source_of(counting, agent_cache=AgentCacheLimits(builds_per_second=8)) as source:
        await provided(source, "big", "all", client="192.0.2.1")
        await provided(source, "big", "one", client="192.0.2.2")  # a share of two builds: both built


class OvertakingRegistry(CountingRegistry):
    """A registry under which a publish, and the replica's reload of it, land while a cold build reads its view."""

    source: AgentSource | None = None

    def published(self, changes: Changes | None = None) -> list[PublishedAgent]:
        agents = super().published(changes)
        if self.source is not None and len(self.read) == 1:  # the first cold read only
            tenant(self, "acme", "version 2")
            self.source.reload()
        return agents


async def test_a_cold_build_that_a_publish_overtakes_serves_the_new_version(registry: Registry) -> None:
    overtaking = OvertakingRegistry(registry.engine)
    tenant(overtaking, "acme")
    async with source_of(overtaking) as source:
        overtaking.source = source
        assert description(await provided(source, "acme")) == "version 2"  # read again: never the overtaken one
        assert description(await provided(source, "acme")) == "version 2"
