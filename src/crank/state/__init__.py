"""Short-lived shared state: idempotency records, confirmation tokens and the gateway's call counts; the rpc
executor's cache, locks and rate counts.

In-process by default (`MemoryStore`, `LocalCoordinator`); Redis when `CRANK_REDIS_URL` is set (`RedisStore`,
`RedisCoordinator`), so that any replica honours a token issued or a record written by another, and every
worker and replica of an rpc app shares one cache, one lock per method and one count per rate limit.
"""

from __future__ import annotations

from crank.state.coordination import (
    DEFAULT_CACHE_MAX_BYTES,
    DEFAULT_CACHE_SIZE,
    DEFAULT_LOCK_LEASE,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_REDIS_PREFIX,
    Coordinator,
    Held,
    LocalCoordinator,
    RedisCoordinator,
)
from crank.state.store import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_REDIS_TIMEOUT,
    DURABILITY_CHECK_TIMEOUT,
    Counter,
    Full,
    MemoryStore,
    RedisStore,
    StateStore,
    check_durability,
    connect_redis,
    open_state,
)

__all__ = [
    "DEFAULT_CACHE_MAX_BYTES",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_LOCK_LEASE",
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_REDIS_TIMEOUT",
    "DEFAULT_REDIS_PREFIX",
    "DURABILITY_CHECK_TIMEOUT",
    "Coordinator",
    "Counter",
    "Full",
    "Held",
    "LocalCoordinator",
    "MemoryStore",
    "RedisCoordinator",
    "RedisStore",
    "StateStore",
    "check_durability",
    "connect_redis",
    "open_state",
]
