"""`AgentCache`: the agents a replica keeps built, the least recently used dropped past a bound, and the cold
builds of the others, each built once however many requests wait for it, at a bounded rate.

A replica serves thousands of tenants, most of them idle: it builds an agent's catalog on its first request and
keeps the `size` most recently used (`CRANK_AGENT_CACHE`). A dropped agent is built again on its next request.
Building costs CPU (an agent of 20 tools: milliseconds), so cold builds share a budget of `builds_per_second`
(`CRANK_AGENT_BUILDS_PER_SECOND`; a larger agent spends its `cost` as it starts), a quarter of it at
most for one tenant and for one client address: past it a request for a cold agent is answered 503 with
`Retry-After`, so that requests for cold agents take a bounded share of the CPU, and neither one tenant's cold
agents nor one client asking for many tenants' spend all of the budget.
Requests for the agent being built wait for that build; none starts another. A build that a reload overtook (a
publish while it ran) is checked once it is in (`keep`), and dropped when it is not what should be served.

Reads and writes of the cache are single dictionary operations: the event loop marks and inserts, the reload
thread replaces what it rebuilt, and neither iterates what the other changes (`keys` and `items` take a copy); an entry
dropped by one between another's two operations stays dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from crank.exceptions import DependencyUnavailableError
from crank.wire.budgets import CLIENT_SHARE, KeyedBudgets, SharedBudget

__all__ = ["AGENT_BUILDS_PER_SECOND", "DEFAULT_AGENT_CACHE", "AgentCache", "AgentCacheLimits"]

DEFAULT_AGENT_CACHE: Final = 256
"""Agents a replica keeps built (`CRANK_AGENT_CACHE`): about 0.8 MB each for an agent of 20 tools from GitHub's
description (docs/deployment.md, "Many tenants")."""
AGENT_BUILDS_PER_SECOND: Final = 50.0
"""Cold agents a replica builds a second on requests, with bursts of as many (`CRANK_AGENT_BUILDS_PER_SECOND`)."""
TENANT_SHARE: Final = CLIENT_SHARE
"""The share of the build budget one tenant (workspace), or one client address, may take; and of the cache, one
tenant's agents: a quarter, as every shared budget's (`crank.wire.budgets.CLIENT_SHARE`)."""
COLD_RETRY_AFTER: Final = 1

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Keep = Callable[[K, V, int], bool]
"""`keep(key, value, dropped)`: whether a value just built is still what should be served (`AgentCache.build`)."""


@dataclass(frozen=True, slots=True)
class AgentCacheLimits:
    """How many agents stay built (`size`) and how many cold ones may be built a second."""

    size: int = DEFAULT_AGENT_CACHE
    builds_per_second: float = AGENT_BUILDS_PER_SECOND

    def __post_init__(self) -> None:
        if self.size < 1 or self.builds_per_second <= 0:
            raise ValueError("an agent cache holds at least one agent and builds more than none a second")


class AgentCache(Generic[K, V]):
    """Built agents by key, at most `limits.size`, the least recently used dropped first."""

    def __init__(
        self,
        limits: AgentCacheLimits | None = None,
        *,
        tenant_of: Callable[[K], Hashable] | None = None,
        cost_of: Callable[[V], float] | None = None,
    ) -> None:
        """`tenant_of`: the tenant of a key; with it, one tenant holds at most a quarter of the cache (its own least
        recently used goes first), so that its agents cannot push every other tenant's out. `cost_of`: what a
        build turned out to cost, when that may be more than was known as it started (`build`'s `cost`)."""
        self.limits = limits or AgentCacheLimits()
        self._tenant_of = tenant_of
        self._cost_of = cost_of
        self._built: OrderedDict[K, V] = OrderedDict()
        self._building: dict[K, asyncio.Future[V]] = {}
        rate = self.limits.builds_per_second
        self._builds = SharedBudget(rate, TENANT_SHARE)  # the replica's, a quarter of it for one client address
        self._tenant_builds = KeyedBudgets(max(rate * TENANT_SHARE, 1.0))

    def __len__(self) -> int:
        return len(self._built)

    def __contains__(self, key: object) -> bool:
        return key in self._built

    def get(self, key: K) -> V | None:
        """The built agent, now the most recently used; None when it is not built."""
        value = self._built.get(key)
        if value is not None:
            # try, not contextlib.suppress: this runs on every request, and a suppress costs an object and three
            # calls (4k instructions a request, 2.6% of a warm tools/list; bench/count_gateway.py)
            try:
                self._built.move_to_end(key)
            except KeyError:  # dropped by the reload thread a moment ago: served this once
                pass
        return value

    def peek(self, key: K) -> V | None:
        """The built agent, its place left as it is (the reload's look, not a request's)."""
        return self._built.get(key)

    def keys(self) -> list[K]:
        return list(self._built)

    def values(self) -> list[V]:
        return list(self._built.values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._built.items())

    def put(self, key: K, value: V) -> int:
        """Keep `value` as the most recently used; past its tenant's share, drop that tenant's least recently used,
        and past the bound, the least recently used of all. Returns how many were dropped."""
        dropped = 0
        if self._tenant_of is not None and key not in self._built:
            tenant = self._tenant_of(key)
            held = [other for other in self.keys() if self._tenant_of(other) == tenant]  # a scan per cold build
            if len(held) >= max(int(self.limits.size * TENANT_SHARE), 1):
                self.drop(held[0])
                dropped += 1
        self._built[key] = value
        with contextlib.suppress(KeyError):  # dropped by the reload thread between the two: it stays dropped
            self._built.move_to_end(key)
        while len(self._built) > self.limits.size:
            with contextlib.suppress(KeyError):
                self._built.popitem(last=False)
                dropped += 1
        return dropped

    def replace(self, key: K, value: V) -> None:
        """Swap a rebuilt agent in where it is held, in its place; one dropped meanwhile stays dropped."""
        if key in self._built:
            self._built[key] = value

    def drop(self, key: K) -> None:
        self._built.pop(key, None)

    async def build(
        self,
        key: K,
        load: Callable[[], Awaitable[V]],
        *,
        tenant: Hashable,
        client: Hashable,
        keep: Keep[K, V],
        cost: float = 1.0,
    ) -> V:
        """The agent `load` builds. One build per key at a time: the requests that come while it runs wait for it
        (a request that leaves does not cancel it). Once built it is kept, and then `keep(key, value, dropped)`
        says whether it still is what should be served (it is dropped when not: the next request builds it again),
        `dropped` being how many agents it pushed out.

        A new build takes one from the replica's budget, one from its `tenant`'s and one from its `client`'s (an
        address: a quarter of the budget each, so neither one tenant's agents nor one client asking for many
        tenants' spends all of it); past any, 503 with `Retry-After`. A build that costs more (`cost`, in builds:
        a large agent) needs one left to start, and takes the rest as it starts: the shares may go below zero and
        refill from there, so that a burst of large builds started together cannot overdraw them, and an agent
        larger than the burst can still be built. Once built, what it cost beyond `cost` (`cost_of`: an index that
        did not know its size) is taken too; a build that fails gives back all but the one it started with."""
        running = self._building.get(key)
        if running is None:
            # Each share looked at first, so that a refusal takes nothing from the others.
            if not (self._tenant_builds.left(tenant) and self._builds.take(client)):
                raise DependencyUnavailableError(
                    "agents",
                    "This server is building many agents at once; retry in a moment.",
                    retry_after=COLD_RETRY_AFTER,
                )
            self._tenant_builds.take(tenant)
            if cost > 1:
                self._builds.spend(client, cost - 1)
                self._tenant_builds.spend(tenant, cost - 1)
            running = self._building[key] = asyncio.ensure_future(load())
            running.add_done_callback(functools.partial(self._finished, key, keep, tenant, client, max(cost, 1.0)))
        return await asyncio.shield(running)

    def _spend(self, tenant: Hashable, client: Hashable, amount: float) -> None:
        """Take `amount` more from the shares a build came from, or give it back when negative (each share refills
        to its burst at most)."""
        if amount != 0:
            self._builds.spend(client, amount)
            self._tenant_builds.spend(tenant, amount)

    def _finished(
        self, key: K, keep: Keep[K, V], tenant: Hashable, client: Hashable, charged: float, done: asyncio.Future[V]
    ) -> None:
        del self._building[key]
        if done.cancelled() or done.exception() is not None:  # a failure is its waiters' (retrieved: never logged)
            self._spend(tenant, client, 1 - charged)  # what it did not build, given back (a negative spend)
            return
        value = done.result()
        if self._cost_of is not None:
            self._spend(tenant, client, self._cost_of(value) - charged)
        dropped = self.put(key, value)
        # Checked after it is in: a reload that moved on before this look is seen by it; one after it finds the
        # agent held, and rebuilds it itself.
        if not keep(key, value, dropped):
            self.drop(key)
