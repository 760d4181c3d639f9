"""`MemoryStore`: one process's state store (the embedded default), bounded in records."""

from __future__ import annotations

import time
from collections.abc import Sequence

from crank.exceptions import StateStoreFullError
from crank.state.base import Counter, Full, lease_key
from crank.types import JSONObject

__all__ = ["DEFAULT_MAX_ITEMS", "MemoryStore"]

DEFAULT_MAX_ITEMS = 100_000
"""Live records `MemoryStore` keeps at most (idempotency records, their leases and confirmation tokens): a
client sending new idempotency keys as fast as it can fills it to this, not the process's memory."""


class MemoryStore:
    """One process's state (the embedded default). Atomic because every step runs on the event loop
    without awaiting in between."""

    def __init__(self, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self.max_items = max_items
        self._items: dict[str, tuple[float, JSONObject]] = {}
        self._writes = 0

    def __len__(self) -> int:
        """Records held (some may have expired and not been dropped yet)."""
        return len(self._items)

    def _live(self, key: str) -> JSONObject | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= time.monotonic():
            del self._items[key]
            return None
        return item[1]

    async def add(self, key: str, value: JSONObject, ttl: float) -> bool:
        if self._live(key) is not None:
            return False
        self._prune()
        self._items[key] = (time.monotonic() + ttl, value)
        return True

    async def get(self, key: str) -> JSONObject | None:
        return self._live(key)

    async def put(self, key: str, value: JSONObject, ttl: float) -> None:
        self._prune()
        self._items[key] = (time.monotonic() + ttl, value)

    async def take(self, key: str) -> JSONObject | None:
        value = self._live(key)
        self._items.pop(key, None)
        return value

    async def claim(self, key: str, value: JSONObject, ttl: float, lease: float) -> bool:
        if not await self.add(key, value, ttl):
            return False
        self._items[lease_key(key)] = (time.monotonic() + lease, {"claim": value["claim"]})
        return True

    async def renew(self, key: str, claim: str, lease: float) -> bool:
        held = self._live(lease_key(key))
        if held is None or held.get("claim") != claim:
            return False
        until = time.monotonic() + lease
        self._items[lease_key(key)] = (until, held)
        value = self._live(key)  # an expired value is not brought back
        if value is not None and self._items[key][0] < until:
            self._items[key] = (until, value)
        return True

    async def inspect(self, key: str) -> tuple[JSONObject | None, bool]:
        return self._live(key), self._live(lease_key(key)) is not None

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        current = self._live(key)
        if current is None and value is None:
            return False
        if current is not None and current.get("claim") != claim:
            return False
        self._items.pop(lease_key(key), None)
        if value is None:
            del self._items[key]
        else:
            self._items[key] = (time.monotonic() + ttl, value)
        return True

    async def hit(self, counters: Sequence[Counter]) -> Full | None:
        return self._hit(counters)

    def hit_now(self, counters: Sequence[Counter]) -> bool:
        try:
            return self._hit(counters) is None
        except StateStoreFullError:
            return False  # `hit` says so

    def _hit(self, counters: Sequence[Counter]) -> Full | None:
        now = time.monotonic()
        live: list[JSONObject | None] = []
        full: Full | None = None
        for index, counter in enumerate(counters):
            item = self._items.get(counter.key)
            if item is None or item[0] <= now:
                live.append(None)
            elif item[1]["count"] >= counter.limit:
                if full is None or item[0] - now > full.retry_after:  # the one that resets last
                    full = Full(index, item[0] - now)
            else:
                live.append(item[1])
        if full is not None:
            return full
        new = live.count(None)
        if new:
            self._prune(new)  # new counts, like any new record, only while the store has room for all of them
        for counter, value in zip(counters, live, strict=True):
            if value is None:
                self._items[counter.key] = (now + counter.window, {"count": 1})
            else:
                value["count"] += 1
        return None

    async def durability_warnings(self) -> list[str]:
        return []  # the process's memory: it goes with the process, and so does every call it was running

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._items.clear()

    def _prune(self, adding: int = 1) -> None:
        """Before writing `adding` new records: every 1,024 writes, and whenever they would not fit, drop what
        expired; a store that still has no room refuses the write (`StateStoreFullError`) rather than drop a
        live record, which could let a call run twice."""
        self._writes += 1
        if self._writes % 1024 == 0 or len(self._items) + adding > self.max_items:
            now = time.monotonic()
            for key in [key for key, (expires, _) in self._items.items() if expires <= now]:
                del self._items[key]
            if len(self._items) + adding > self.max_items:
                raise StateStoreFullError(
                    f"This server holds {self.max_items} idempotency records, confirmation tokens and call counts, "
                    "the most it may keep in memory; the call was refused before anything was sent.",
                    recoverable=True,
                )
