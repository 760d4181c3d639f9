"""Short-lived shared state: idempotency records, confirmation tokens and the gateway's call counts.

In-process by default (`MemoryStore`); Redis when `CRANK_REDIS_URL` is set (`RedisStore`), so that
any replica honours a token issued or a record written by another.
"""

from __future__ import annotations

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
    open_state,
)

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_REDIS_TIMEOUT",
    "DURABILITY_CHECK_TIMEOUT",
    "Counter",
    "Full",
    "MemoryStore",
    "RedisStore",
    "StateStore",
    "check_durability",
    "open_state",
]
