"""The state store, by its one entry point: `open_state` (Redis when a URL is given, else in process), and the
names of the store's parts in one place: the contract (`crank.state.base`), the in-process store
(`crank.state.memory`) and the Redis store (`crank.state.redis_store`)."""

from __future__ import annotations

from crank.state.base import DURABILITY_CHECK_TIMEOUT, Counter, Full, StateStore, check_durability
from crank.state.memory import DEFAULT_MAX_ITEMS, MemoryStore
from crank.state.redis_store import (
    DEFAULT_REDIS_TIMEOUT,
    MAX_HITS_PER_STEP,
    SLICED_LIMIT,
    SLICES_PER_LIMIT,
    RedisStore,
    connect_redis,
    milliseconds,
)

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_REDIS_TIMEOUT",
    "DURABILITY_CHECK_TIMEOUT",
    "MAX_HITS_PER_STEP",
    "SLICED_LIMIT",
    "SLICES_PER_LIMIT",
    "Counter",
    "Full",
    "MemoryStore",
    "RedisStore",
    "StateStore",
    "check_durability",
    "connect_redis",
    "milliseconds",
    "open_state",
]


def open_state(redis_url: str | None) -> StateStore:
    """Redis when a URL is given, else the in-process store."""
    return RedisStore(redis_url) if redis_url else MemoryStore()
