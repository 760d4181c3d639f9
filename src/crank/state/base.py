"""The state store's contract: `StateStore`, a few atomic operations on keys with a time to live, and what
they take and give (`Counter`, `Full`); `check_durability`, what a store's settings could lose, logged at start.

Values are JSON objects. Every operation the gateway needs is one atomic step in either backend
(`crank.state.memory.MemoryStore`, `crank.state.redis_store.RedisStore`): `add` (set only if absent), `claim` (add
with a lease: claiming an idempotency key), `renew` (the lease's heartbeat), `inspect` (a value and whether its
lease is held), `replace_if` (write or delete only while one's own claim holds the key), `take` (read and delete:
a single-use token), `get` and `put`, and `hit` (count a call against several limits at once: the gateway's rate
limits and quotas).

`check_durability` reads what could make the store forget before a value's time (a Redis without
persistence, or one that evicts keys) and logs a warning at start (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from crank.types import JSONObject

__all__ = ["DURABILITY_CHECK_TIMEOUT", "Counter", "Full", "StateStore", "check_durability", "lease_key"]

logger = logging.getLogger("crank.state")

DURABILITY_CHECK_TIMEOUT = 5.0
"""Seconds the start-up check of Redis's settings may take before it logs that it could not check."""


@dataclass(frozen=True, slots=True)
class Counter:
    """One count that `StateStore.hit` checks and adds to: at most `limit` hits while it lives, `window`
    seconds from its first hit (a fixed window that starts with its first call: no clock is read, so every
    replica counts in the same window)."""

    key: str
    limit: int
    window: float


class Full(NamedTuple):
    """`hit`'s refusal: which of its counters is full (its position) and the seconds until it resets."""

    counter: int
    retry_after: float


class StateStore(Protocol):
    async def add(self, key: str, value: JSONObject, ttl: float) -> bool:
        """Store `value` unless the key exists; True when stored."""

    async def get(self, key: str) -> JSONObject | None: ...

    async def put(self, key: str, value: JSONObject, ttl: float) -> None: ...

    async def take(self, key: str) -> JSONObject | None:
        """Read and delete in one step: of two concurrent takers, only one gets the value."""

    async def claim(self, key: str, value: JSONObject, ttl: float, lease: float) -> bool:
        """`add`, and in the same step a lease of `lease` seconds on the key, held by `value["claim"]`. The
        holder renews it while it works (`renew`); a lease that lapsed tells others its holder is gone."""

    async def renew(self, key: str, claim: str, lease: float) -> bool:
        """Extend the lease to `lease` seconds from now while `claim` holds it, and the value's own time to
        live to at least as long (never shorter): a claim outlives its window while its holder still works.
        A lapsed lease stays lapsed (others may have been told its holder is gone). True when renewed."""

    async def inspect(self, key: str) -> tuple[JSONObject | None, bool]:
        """The value (None when absent) and whether a lease on the key is held."""

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        """Replace (or, with None, delete) the value unless another claim holds the key, and end the lease:
        a caller whose claim expired and was taken by another never overwrites the other's. A value for a
        key that is gone (expired, evicted, lost in a restart) is written back. True when done."""

    async def hit(self, counters: Sequence[Counter]) -> Full | None:
        """One atomic step: when every counter is below its limit, add one to each (a counter's first hit
        starts its window) and return None; else count nothing and return the full one that resets last. A
        refused hit costs no counter anything."""

    def hit_now(self, counters: Sequence[Counter]) -> bool:
        """`hit` at once, without waiting, where the store can (in process always; in Redis from the slices
        this replica holds): True when counted. False when nothing was counted: then await `hit`, which also
        answers a refusal."""

    async def durability_warnings(self) -> list[str]:
        """What in the backend's settings could lose a value before its time; empty when nothing can."""

    async def ping(self) -> None:
        """Raise when the store cannot be reached (`/readyz`); the in-process store always can."""

    async def aclose(self) -> None: ...


async def check_durability(store: StateStore, *, timeout: float = DURABILITY_CHECK_TIMEOUT) -> list[str]:
    """Log (at warning) and return what in the store's settings could lose idempotency records; that it
    could not check, when the store cannot be asked in `timeout` seconds. Never raises."""
    try:
        warnings = await asyncio.wait_for(store.durability_warnings(), timeout)
    except Exception as exc:  # unreachable, timed out: starting is still better than not
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} after {timeout:g} s"
        warnings = [f"could not check the state store's persistence and eviction settings ({reason})"]
    for warning in warnings:
        logger.warning("%s", warning, extra={"event": "state_durability"})
    verdict = f"{len(warnings)} warning(s) above" if warnings else "nothing in its settings loses idempotency records"
    logger.info("state store checked: %s", verdict, extra={"event": "state_durability"})
    return warnings


def lease_key(key: str) -> str:
    """Where a store keeps the lease of `key` (`StateStore.claim`)."""
    return key + ":lease"
