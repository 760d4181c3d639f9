"""`StateStore`: a few atomic operations on keys with a time to live, in process or in Redis.

Values are JSON objects. Every operation the gateway needs is one atomic step in either backend:
`add` (set only if absent: claiming an idempotency key), `take` (read and delete: a single-use
token), `get`, `put` and `delete`.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from crank import _json
from crank.types import JSONObject

__all__ = ["MemoryStore", "RedisStore", "StateStore", "open_state"]


class StateStore(Protocol):
    async def add(self, key: str, value: JSONObject, ttl: float) -> bool:
        """Store `value` unless the key exists; True when stored."""

    async def get(self, key: str) -> JSONObject | None: ...

    async def put(self, key: str, value: JSONObject, ttl: float) -> None: ...

    async def take(self, key: str) -> JSONObject | None:
        """Read and delete in one step: of two concurrent takers, only one gets the value."""

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        """Replace (or, with None, delete) the value only while its `claim` field is `claim`: a caller whose
        claim expired and was taken by another never overwrites the other's. True when done."""

    async def ping(self) -> None:
        """Raise when the store cannot be reached (`/readyz`); the in-process store always can."""

    async def aclose(self) -> None: ...


class MemoryStore:
    """One process's state (the embedded default). Atomic because every step runs on the event loop
    without awaiting in between."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[float, JSONObject]] = {}
        self._writes = 0

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

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        current = self._live(key)
        if current is None or current.get("claim") != claim:
            return False
        if value is None:
            del self._items[key]
        else:
            self._items[key] = (time.monotonic() + ttl, value)
        return True

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._items.clear()

    def _prune(self) -> None:
        """Every 1,024 writes, drop what expired, so that the dict does not grow without bound."""
        self._writes += 1
        if self._writes % 1024 == 0:
            now = time.monotonic()
            for key in [key for key, (expires, _) in self._items.items() if expires <= now]:
                del self._items[key]


class RedisStore:
    """State shared by every replica, in Redis (SET NX PX, GETDEL: Redis 6.2 or newer)."""

    def __init__(self, url: str, *, prefix: str = "crank:") -> None:
        import redis.asyncio

        self._redis: Any = redis.asyncio.Redis.from_url(url)
        self._prefix = prefix
        self._replace_if = self._redis.register_script(_REPLACE_IF)

    async def add(self, key: str, value: JSONObject, ttl: float) -> bool:
        return bool(await self._redis.set(self._prefix + key, _json.dumps(value), nx=True, px=_ms(ttl)))

    async def get(self, key: str) -> JSONObject | None:
        return _decode(await self._redis.get(self._prefix + key))

    async def put(self, key: str, value: JSONObject, ttl: float) -> None:
        await self._redis.set(self._prefix + key, _json.dumps(value), px=_ms(ttl))

    async def take(self, key: str) -> JSONObject | None:
        return _decode(await self._redis.getdel(self._prefix + key))

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        new = _json.dumps(value).decode() if value is not None else ""
        return bool(await self._replace_if(keys=[self._prefix + key], args=[claim, new, _ms(ttl)]))

    async def ping(self) -> None:
        await self._redis.ping()

    async def aclose(self) -> None:
        await self._redis.aclose()


# One atomic step in Redis: compare the stored value's claim, then set or delete.
_REPLACE_IF = """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local ok, decoded = pcall(cjson.decode, current)
if not ok or decoded['claim'] ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
"""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _decode(raw: bytes | None) -> JSONObject | None:
    if raw is None:
        return None
    value: JSONObject = _json.loads(raw)
    return value


def open_state(redis_url: str | None) -> StateStore:
    """Redis when a URL is given, else the in-process store."""
    return RedisStore(redis_url) if redis_url else MemoryStore()
