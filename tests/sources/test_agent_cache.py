"""`AgentCache` (crank.sources.agent_cache): the most recently used agents kept, cold builds shared and budgeted."""

from __future__ import annotations

import asyncio

import pytest

from crank.exceptions import DependencyUnavailableError
from crank.sources.agent_cache import AgentCache, AgentCacheLimits

pytestmark = pytest.mark.anyio


def kept(key: str, value: int, dropped: int) -> bool:
    return True


def test_the_least_recently_used_goes_first_and_a_replacement_never_brings_one_back() -> None:
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(size=2))
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.keys() == ["a", "c"]
    cache.replace("b", 20)  # dropped meanwhile: stays dropped
    assert "b" not in cache and len(cache) == 2
    cache.replace("a", 10)  # held: swapped in place, its recency unchanged
    assert cache.peek("a") == 10 and cache.keys() == ["a", "c"]
    cache.drop("c")
    assert cache.keys() == ["a"]


def test_limits_refuse_an_empty_cache_or_budget() -> None:
    with pytest.raises(ValueError):
        AgentCacheLimits(size=0)
    with pytest.raises(ValueError):
        AgentCacheLimits(builds_per_second=0)


async def test_a_failed_build_reaches_its_waiters_and_is_not_kept() -> None:
    cache: AgentCache[str, int] = AgentCache()

    async def failing() -> int:
        await asyncio.sleep(0.01)
        raise LookupError("gone")

    waiters = [asyncio.ensure_future(cache.build("a", failing, tenant="t", client="c", keep=kept)) for _ in range(3)]
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(result, LookupError) for result in results)
    assert "a" not in cache


async def test_a_waiter_that_leaves_does_not_cancel_the_build_the_others_wait_for() -> None:
    cache: AgentCache[str, int] = AgentCache()
    release = asyncio.Event()
    runs = 0

    async def slow() -> int:
        nonlocal runs
        runs += 1
        await release.wait()
        return 7

    leaving = asyncio.ensure_future(cache.build("a", slow, tenant="t", client="c", keep=kept))
    staying = asyncio.ensure_future(cache.build("a", slow, tenant="t", client="c", keep=kept))
    await asyncio.sleep(0)
    leaving.cancel()
    release.set()
    assert await staying == 7 and runs == 1
    assert cache.peek("a") == 7


async def test_new_builds_past_the_budget_are_503_while_a_running_one_is_joined() -> None:
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(builds_per_second=1))  # one a second, one a tenant
    release = asyncio.Event()

    async def slow() -> int:
        await release.wait()
        return 1

    first = asyncio.ensure_future(cache.build("a", slow, tenant="t", client="c", keep=kept))
    await asyncio.sleep(0)
    joined = asyncio.ensure_future(
        cache.build("a", slow, tenant="t", client="c", keep=kept)
    )  # the same build: no budget taken
    with pytest.raises(DependencyUnavailableError) as refused:
        await cache.build("b", slow, tenant="u", client="d", keep=kept)
    assert refused.value.retry_after == 1
    release.set()
    assert await first == 1 and await joined == 1


async def test_a_build_that_should_not_be_served_any_more_is_dropped_once_in() -> None:
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(size=1))
    seen: list[tuple[str, int, int]] = []

    def stale(key: str, value: int, dropped: int) -> bool:
        seen.append((key, value, dropped))
        return value != 2

    async def value(number: int) -> int:
        return number

    assert await cache.build("a", lambda: value(1), tenant="t", client="c", keep=stale) == 1
    assert await cache.build("b", lambda: value(2), tenant="u", client="d", keep=stale) == 2  # its waiters get it
    assert seen == [("a", 1, 0), ("b", 2, 1)]  # b pushed a out, then was found stale itself
    assert len(cache) == 0


async def test_one_client_asking_for_many_tenants_agents_spends_only_its_share() -> None:
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(builds_per_second=8))  # a quarter: 2 a client

    async def one() -> int:
        return 1

    for tenant in ("t1", "t2"):
        await cache.build(tenant, one, tenant=tenant, client="mallory", keep=kept)
    with pytest.raises(DependencyUnavailableError):
        await cache.build("t3", one, tenant="t3", client="mallory", keep=kept)
    await cache.build("t3", one, tenant="t3", client="alice", keep=kept)  # another client still builds it


def test_one_tenant_holds_at_most_a_quarter_of_the_cache_and_its_own_oldest_goes_first() -> None:
    cache: AgentCache[tuple[str, str], int] = AgentCache(AgentCacheLimits(size=8), tenant_of=lambda key: key[0])
    cache.put(("other", "desk"), 0)
    for index in range(5):  # a tenant with many agents, each asked for once: two of the eight places at most
        cache.put(("big", f"agent{index}"), index)
    assert cache.keys() == [("other", "desk"), ("big", "agent3"), ("big", "agent4")]
    assert cache.put(("big", "agent4"), 40) == 0  # held already: replaced in place, nothing dropped


async def test_a_large_build_spends_what_it_costs_of_its_tenants_share_and_of_the_whole_budget() -> None:
    """Builds count by their cost (an agent's tools in units of 20, known from the index): one tenant's large agent
    cannot spend the CPU of many builds for the price of one."""
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(builds_per_second=4))

    async def one() -> int:
        return 1

    assert await cache.build("small", one, tenant="t1", client="c1", keep=kept) == 1
    assert await cache.build("huge", one, tenant="big", client="c2", keep=kept, cost=5) == 1
    # 4 - 1 - 5: the whole budget is spent past zero (half a second to refill to one), for every tenant.
    for tenant, client in (("big", "c2"), ("t3", "c3")):
        with pytest.raises(DependencyUnavailableError):
            await cache.build(f"next-{tenant}", one, tenant=tenant, client=client, keep=kept)


async def test_large_builds_started_together_cannot_overdraw_the_budget() -> None:
    """A large build's cost is taken as it starts, not once it is built: a burst of large cold builds started
    before any finishes is refused past the first, instead of each finding the budget still whole."""
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(builds_per_second=8))
    release = asyncio.Event()

    async def slow() -> int:
        await release.wait()
        return 1

    first = asyncio.ensure_future(cache.build("a", slow, tenant="t1", client="c1", keep=kept, cost=8))
    await asyncio.sleep(0)  # started: its cost is taken
    with pytest.raises(DependencyUnavailableError):
        await cache.build("b", slow, tenant="t2", client="c2", keep=kept, cost=8)
    release.set()
    assert await first == 1


async def test_an_agent_larger_than_the_burst_is_still_built() -> None:
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(builds_per_second=4))

    async def one() -> int:
        return 1

    assert await cache.build("giant", one, tenant="t", client="c", keep=kept, cost=100) == 1


async def test_a_build_that_cost_more_than_was_known_takes_the_rest_and_a_failed_one_gives_back_its_cost() -> None:
    """An index that did not know an agent's size (a version an older Crank published) charges one as the build
    starts; once built, the rest (`cost_of`) is taken. A build that fails gives back all but one."""
    cache: AgentCache[str, int] = AgentCache(AgentCacheLimits(builds_per_second=8), cost_of=float)  # value: cost

    async def costing(cost: int) -> int:
        return cost

    async def failing() -> int:
        raise RuntimeError("the registry went away")

    with pytest.raises(RuntimeError):
        await cache.build("lost", failing, tenant="t1", client="c1", keep=kept, cost=8)
    assert await cache.build("after", lambda: costing(1), tenant="t2", client="c2", keep=kept) == 1  # given back
    assert await cache.build("big", lambda: costing(8), tenant="t3", client="c3", keep=kept) == 8  # charged 1, then 7
    with pytest.raises(DependencyUnavailableError):
        await cache.build("next", lambda: costing(1), tenant="t4", client="c4", keep=kept)
