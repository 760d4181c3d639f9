"""Locks with a lease and a fencing token, an expiring result cache, and fixed-window counters.

`LocalCoordinator` serves one process (the embedded default); `RedisCoordinator` gives every process and
replica that shares one Redis the behaviour of one process:

- a lock is `SET key owner NX PX lease`, renewed by a heartbeat while its holder works and released by
  compare-and-delete (only its owner can). Each acquisition gets a fencing token, `INCR` of a counter per
  lock: a holder paused past its lease (a long GC, a frozen VM, a partition) may still act after another
  took the lock, and a resource that remembers the highest token it saw can refuse the older one's writes;
- the cache is `SET key value PX ttl`, keyed by the hash of the canonical arguments, JSON values up to a
  size cap (a larger one is not cached);
- a rate count is `StateStore.hit`'s fixed window (the gateway's limits count the same way): one Lua
  script in Redis, a `MemoryStore` in process.

Redis failures: a lock or a count that cannot be had raises `DependencyUnavailableError` (running without
them would break their promise); a cache that cannot be read or written is a miss, logged at most once a
minute.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from cachetools import TLRUCache

from crank import _json
from crank.exceptions import ConfigurationError, DependencyUnavailableError
from crank.state.store import (
    DEFAULT_REDIS_TIMEOUT,
    Counter,
    MemoryStore,
    RedisStore,
    StateStore,
    connect_redis,
    milliseconds,
)

__all__ = [
    "DEFAULT_CACHE_MAX_BYTES",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_LOCK_LEASE",
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_REDIS_PREFIX",
    "Coordinator",
    "Held",
    "LocalCoordinator",
    "RedisCoordinator",
]

logger = logging.getLogger("crank.state")

DEFAULT_CACHE_SIZE: Final = 10_000
"""The most results the in-process cache keeps (every cached method together)."""
DEFAULT_CACHE_MAX_BYTES: Final = 1024 * 1024
"""The largest result (its JSON) the Redis cache stores; a larger one is returned but not cached, so that one
method's huge answers cannot fill the Redis every process shares."""
DEFAULT_LOCK_TIMEOUT: Final = 30.0
"""Seconds a call waits for its method's lock before it is refused (`LockTimeoutError`), in either mode."""
DEFAULT_LOCK_LEASE: Final = 10.0
"""Seconds a Redis lock outlives its holder: the holder renews it every third of that while it runs, so a
long call keeps it, and a process that died (killed, lost its network) frees it this long after."""
DEFAULT_REDIS_PREFIX: Final = "crank:rpc:"
"""Where an app's keys live in Redis: two different apps sharing one Redis need two prefixes."""

_POLL_FIRST = 0.002
_POLL_MAX = 0.05  # a waiter asks at most 20 times a second: cheap for Redis, a 50 ms wake-up at worst
_LOG_EVERY = 60.0


@dataclass
class Held:
    """A lock held by this process: its `token` (fencing, increasing per lock) and who holds it."""

    name: str
    token: int
    owner: str
    lost: bool = False  # the lease lapsed (or was taken) before the holder released it
    heartbeat: asyncio.Task[None] | None = field(default=None, repr=False)


class Coordinator(Protocol):
    shared: bool
    """True when every process that shares the backend sees the same locks, cache and counts."""
    lock_timeout: float
    """Seconds `acquire` waits for a lock held by others."""

    async def cache_get(self, name: str, version: str, params: bytes) -> tuple[bool, Any]:
        """(True, value) for a cached result of the method's call with these canonical params."""

    async def cache_put(self, name: str, version: str, params: bytes, value: Any, ttl: float) -> None: ...

    async def acquire(self, name: str) -> Held | None:
        """The lock called `name`, or None when others held it for the whole lock wait."""

    async def release(self, held: Held) -> bool:
        """Let go of a lock; False when it was no longer this holder's (its lease had lapsed)."""

    async def count(self, name: str, calls: int, seconds: float) -> float | None:
        """Count one call in the fixed window of `name`, at most `calls` per `seconds`: None when counted, else
        the seconds until the window ends (a refused call is not counted)."""

    async def aclose(self) -> None: ...


def _check(lock_timeout: float, lock_lease: float | None = None) -> None:
    if not lock_timeout > 0:
        raise ConfigurationError(f"lock_timeout must be positive seconds, got {lock_timeout}")
    if lock_lease is not None and not lock_lease >= 0.03:
        raise ConfigurationError(f"lock_lease must be at least 0.03 seconds, got {lock_lease}")


class LocalCoordinator:
    """One process: a bounded TLRU cache, an `asyncio.Lock` per name, a window per name in memory. Atomic
    because each step runs on the event loop without awaiting in between."""

    shared = False

    def __init__(self, *, cache_size: int = DEFAULT_CACHE_SIZE, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        if cache_size < 1:
            raise ConfigurationError(f"cache_size must be at least 1, got {cache_size}")
        _check(lock_timeout)
        self.lock_timeout = lock_timeout
        # Bounded and expiring: a result leaves at its method's TTL, or earlier when the least recently used
        # ones make room, so distinct arguments from callers cannot grow the process (one entry per key).
        self._cache: TLRUCache[tuple[str, str, bytes], tuple[float, Any]] = TLRUCache(
            maxsize=cache_size, ttu=_expiry, timer=time.monotonic
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._tokens: dict[str, int] = {}
        self._counts = MemoryStore()

    async def cache_get(self, name: str, version: str, params: bytes) -> tuple[bool, Any]:
        hit = self._cache.get((name, version, params))
        return (False, None) if hit is None else (True, hit[1])

    async def cache_put(self, name: str, version: str, params: bytes, value: Any, ttl: float) -> None:
        self._cache[(name, version, params)] = (ttl, value)

    async def acquire(self, name: str) -> Held | None:
        lock = self._locks.setdefault(name, asyncio.Lock())
        try:
            async with asyncio.timeout(self.lock_timeout):
                await lock.acquire()
        except TimeoutError:
            return None
        token = self._tokens[name] = self._tokens.get(name, 0) + 1
        return Held(name, token, "local")

    async def release(self, held: Held) -> bool:
        self._locks[held.name].release()
        return True

    async def count(self, name: str, calls: int, seconds: float) -> float | None:
        return await _count(self._counts, name, calls, seconds)

    async def aclose(self) -> None:
        return None  # the process's memory: nothing to hand back


def _expiry(key: Any, value: tuple[float, Any], now: float) -> float:
    return now + value[0]


class RedisCoordinator:
    """Every process sharing one Redis (6.2 or newer) as one: see the module's docstring."""

    shared = True

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_REDIS_PREFIX,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        cache_size: int = DEFAULT_CACHE_SIZE,
        timeout: float = DEFAULT_REDIS_TIMEOUT,
    ) -> None:
        """`cache_size`: the most results of one method stored per time to live of its cache (so at most about
        twice that many live at once): distinct arguments from callers cannot fill the Redis every process
        shares (and with it idempotency, counts and locks, when they share it)."""
        _check(lock_timeout, lock_lease)
        if cache_max_bytes < 1:
            raise ConfigurationError(f"cache_max_bytes must be at least 1, got {cache_max_bytes}")
        if cache_size < 1:
            raise ConfigurationError(f"cache_size must be at least 1, got {cache_size}")
        self.cache_size = cache_size
        self.lock_timeout = lock_timeout
        self.lock_lease = lock_lease
        self.cache_max_bytes = cache_max_bytes
        self.prefix = prefix
        self._redis: Any = connect_redis(url, timeout=timeout)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._renew = self._redis.register_script(_RENEW)
        self._release = self._redis.register_script(_RELEASE)
        self._store = self._redis.register_script(_STORE)
        self._counts = RedisStore(url, prefix=prefix, client=self._redis)
        self._logged: dict[str, float] = {}

    # -- cache: a miss when Redis fails ------------------------------------------------------------

    def _cache_key(self, name: str, version: str, params: bytes) -> str:
        # The hash bounds the key's size whatever the arguments; the name and version stay readable.
        return f"{self.prefix}cache:{name}:{version}:{hashlib.sha256(params).hexdigest()}"

    async def cache_get(self, name: str, version: str, params: bytes) -> tuple[bool, Any]:
        try:
            raw = await self._redis.get(self._cache_key(name, version, params))
            return (False, None) if raw is None else (True, _json.loads(raw))
        except Exception as exc:  # redis errors, timeouts, a refused connection, a value not JSON: a miss
            self._log_throttled(f"cache:{name}", "rpc cache of %s unreadable, treated as a miss: %s", name, exc)
            return False, None

    async def cache_put(self, name: str, version: str, params: bytes, value: Any, ttl: float) -> None:
        encoded = _json.dumps(value)
        if len(encoded) > self.cache_max_bytes:
            self._log_throttled(f"size:{name}", "rpc result of %s not cached: %d bytes, over cache_max_bytes %d",
                                name, len(encoded), self.cache_max_bytes)  # fmt: skip
            return
        keys = [self._cache_key(name, version, params), f"{self.prefix}cache-writes:{name}:{version}"]
        try:
            stored = await self._store(keys=keys, args=[encoded, milliseconds(ttl), self.cache_size])
        except Exception as exc:
            self._log_throttled(f"cache:{name}", "rpc cache of %s unwritable, result not cached: %s", name, exc)
            return
        if not stored:
            self._log_throttled(f"full:{name}", "rpc result of %s not cached: %d results stored within its cache "
                                "time already (cache_size)", name, self.cache_size)  # fmt: skip

    # -- locks ---------------------------------------------------------------------------------------

    async def acquire(self, name: str) -> Held | None:
        """Poll with jittered exponential backoff (2 ms doubling to 50 ms, never past the holder's lease)."""
        keys = [f"{self.prefix}lock:{name}", f"{self.prefix}fence:{name}"]
        owner = uuid.uuid4().hex
        deadline = time.monotonic() + self.lock_timeout
        delay = _POLL_FIRST
        while True:
            token, left_ms = await self._redis_call(
                name, self._acquire(keys=keys, args=[owner, milliseconds(self.lock_lease)])
            )
            if token:
                held = Held(name, int(token), owner)
                held.heartbeat = asyncio.create_task(self._keep(held), name=f"crank-lock-heartbeat:{name}")
                return held
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), remaining, max(int(left_ms), 1) / 1000))
            delay = min(delay * 2, _POLL_MAX)

    async def _keep(self, held: Held) -> None:
        """The heartbeat: renew the lease every third of it while the holder runs."""
        key = f"{self.prefix}lock:{held.name}"
        while True:
            await asyncio.sleep(self.lock_lease / 3)
            try:
                renewed = await self._renew(keys=[key], args=[held.owner, milliseconds(self.lock_lease)])
            except Exception as exc:  # try again at the next beat: the lease may still hold till then
                self._log_throttled(f"renew:{held.name}", "rpc lock %s not renewed: %s", held.name, exc)
                continue
            if not renewed:
                held.lost = True
                logger.error("rpc lock %s lost: its lease lapsed while fencing token %d ran; another call may "
                             "hold it now", held.name, held.token)  # fmt: skip
                return

    async def release(self, held: Held) -> bool:
        if held.heartbeat is not None:
            held.heartbeat.cancel()
        try:
            released = bool(await self._release(keys=[f"{self.prefix}lock:{held.name}"], args=[held.owner]))
        except Exception as exc:  # the call is done: its lease lapses on its own
            logger.warning("rpc lock %s not released (the lease lapses in %g s): %s", held.name, self.lock_lease, exc)
            return False
        if not released:
            held.lost = True
            logger.warning("rpc lock %s (fencing token %d) was no longer held at release", held.name, held.token)
        return released

    # -- counts --------------------------------------------------------------------------------------

    async def count(self, name: str, calls: int, seconds: float) -> float | None:
        wait: float | None = await self._redis_call(name, _count(self._counts, name, calls, seconds))
        return wait

    # -- plumbing ------------------------------------------------------------------------------------

    async def _redis_call(self, name: str, command: Any) -> Any:
        try:
            return await command
        except Exception as exc:
            self._log_throttled(f"redis:{name}", "rpc lock or rate limit of %s unavailable: %s", name, exc)
            raise DependencyUnavailableError("redis", f"Redis does not answer ({type(exc).__name__})") from exc

    def _log_throttled(self, topic: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._logged.get(topic, -_LOG_EVERY) >= _LOG_EVERY:
            self._logged[topic] = now
            logger.warning(message, *args)

    async def aclose(self) -> None:
        await self._redis.aclose()


# Cache write: KEYS[1] the value, KEYS[2] the method's count of values written in the current window of its
# time to live (ARGV[2] ms); past ARGV[3] writes in a window nothing more is stored until it ends.
_STORE = """
local written = redis.call('INCR', KEYS[2])
if written == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
if written > tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Lock: KEYS[1] the lock (its owner's id, expiring at the lease), KEYS[2] the lock's fencing counter (kept).
# {token, 0} when taken, {0, the holder's milliseconds left} when held by another.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {redis.call('INCR', KEYS[2]), 0}
end
return {0, redis.call('PTTL', KEYS[1])}
"""
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
"""


async def _count(store: StateStore, name: str, calls: int, seconds: float) -> float | None:
    # The window is part of the key: a limit changed from a day to a second never waits out the old count.
    full = await store.hit([Counter(f"rate:{name}:{round(seconds * 1000)}", calls, seconds)])
    return None if full is None else full.retry_after
