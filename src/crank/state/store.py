"""`StateStore`: a few atomic operations on keys with a time to live, in process or in Redis.

Values are JSON objects. Every operation the gateway needs is one atomic step in either backend:
`add` (set only if absent), `claim` (add with a lease: claiming an idempotency key), `renew` (the
lease's heartbeat), `inspect` (a value and whether its lease is held), `replace_if` (write or delete
only while one's own claim holds the key), `take` (read and delete: a single-use token), `get` and `put`,
and `hit` (count a call against several limits at once: the gateway's rate limits and quotas).

`check_durability` reads what could make the store forget before a value's time (a Redis without
persistence, or one that evicts keys) and logs a warning at start (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from crank import _json
from crank.exceptions import StateStoreFullError, StateStoreUnavailableError
from crank.types import JSONObject
from crank.wire.notices import ThrottledLog

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
    "connect_redis",
    "open_state",
]

logger = logging.getLogger("crank.state")
_unavailable_log = ThrottledLog(logger)  # Redis gone under load: every command fails, the log says so once a while

DURABILITY_CHECK_TIMEOUT = 5.0
"""Seconds the start-up check of Redis's settings may take before it logs that it could not check."""

DEFAULT_MAX_ITEMS = 100_000
"""Live records `MemoryStore` keeps at most (idempotency records, their leases and confirmation tokens): a
client sending new idempotency keys as fast as it can fills it to this, not the process's memory."""
DEFAULT_REDIS_TIMEOUT = 5.0
"""Seconds one Redis command (or connecting) may take before it fails with a timeout, never retried (a write
that timed out may have been applied). Without it, a Redis that stopped answering (a lost network path)
held every claim, lease renewal and outcome write, and with them the calls' answers, for good."""


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
        starts its window) and return None; else count nothing and return the first full one. A refused
        hit costs no counter anything."""

    async def durability_warnings(self) -> list[str]:
        """What in the backend's settings could lose a value before its time; empty when nothing can."""

    async def ping(self) -> None:
        """Raise when the store cannot be reached (`/readyz`); the in-process store always can."""

    async def aclose(self) -> None: ...


class MemoryStore:
    """One process's state (the embedded default). Atomic because every step runs on the event loop
    without awaiting in between."""

    def __init__(self, max_items: int = DEFAULT_MAX_ITEMS) -> None:
        self.max_items = max_items
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

    async def claim(self, key: str, value: JSONObject, ttl: float, lease: float) -> bool:
        if not await self.add(key, value, ttl):
            return False
        self._items[_lease_key(key)] = (time.monotonic() + lease, {"claim": value["claim"]})
        return True

    async def renew(self, key: str, claim: str, lease: float) -> bool:
        held = self._live(_lease_key(key))
        if held is None or held.get("claim") != claim:
            return False
        until = time.monotonic() + lease
        self._items[_lease_key(key)] = (until, held)
        value = self._live(key)  # an expired value is not brought back
        if value is not None and self._items[key][0] < until:
            self._items[key] = (until, value)
        return True

    async def inspect(self, key: str) -> tuple[JSONObject | None, bool]:
        return self._live(key), self._live(_lease_key(key)) is not None

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        current = self._live(key)
        if current is None and value is None:
            return False
        if current is not None and current.get("claim") != claim:
            return False
        self._items.pop(_lease_key(key), None)
        if value is None:
            del self._items[key]
        else:
            self._items[key] = (time.monotonic() + ttl, value)
        return True

    async def hit(self, counters: Sequence[Counter]) -> Full | None:
        now = time.monotonic()
        live: list[JSONObject | None] = []
        for index, counter in enumerate(counters):
            item = self._items.get(counter.key)
            if item is None or item[0] <= now:
                live.append(None)
            elif item[1]["count"] >= counter.limit:
                return Full(index, item[0] - now)
            else:
                live.append(item[1])
        for counter, value in zip(counters, live, strict=True):
            if value is None:
                self._prune()  # a new count, like any new record, only while the store has room
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

    def _prune(self) -> None:
        """Before a write: every 1,024 writes, and whenever the store is full, drop what expired; a store
        still full refuses the write (`StateStoreFullError`) rather than drop a live record, which could let
        a call run twice."""
        self._writes += 1
        if self._writes % 1024 == 0 or len(self._items) >= self.max_items:
            now = time.monotonic()
            for key in [key for key, (expires, _) in self._items.items() if expires <= now]:
                del self._items[key]
            if len(self._items) >= self.max_items:
                raise StateStoreFullError(
                    f"This server holds {self.max_items} idempotency records, confirmation tokens and call counts, "
                    "the most it may keep in memory; the call was refused before anything was sent.",
                    recoverable=True,
                )


class _Unavailable:
    """`with UNAVAILABLE:` around a Redis command: a refused connection or a timeout becomes
    `StateStoreUnavailableError` (a structured, recoverable tool error; nothing of the cause reaches a client).
    One instance for every command: entering it allocates nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            return
        import redis.exceptions

        if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | TimeoutError):
            _unavailable_log.warning("state_unavailable", "Redis does not answer: %s: %s", type(exc).__name__, exc)
            raise StateStoreUnavailableError(
                f"This server cannot reach its state store right now (Redis, {type(exc).__name__})."
            ) from exc


UNAVAILABLE = _Unavailable()


class RedisStore:
    """State shared by every replica, in Redis (SET NX PX in Lua scripts, GETDEL: Redis 6.2 or newer). A refused
    connection or a timeout raises `StateStoreUnavailableError`."""

    def __init__(
        self, url: str, *, prefix: str = "crank:", timeout: float = DEFAULT_REDIS_TIMEOUT, client: Any = None
    ) -> None:
        # `client`: a `connect_redis` client to share (the rpc coordinator's), instead of a pool of its own.
        self._redis: Any = client if client is not None else connect_redis(url, timeout=timeout)
        self._prefix = prefix
        self._replace_if = self._redis.register_script(_REPLACE_IF)
        self._claim = self._redis.register_script(_CLAIM)
        self._renew = self._redis.register_script(_RENEW)
        self._hit = self._redis.register_script(_HIT)

    async def add(self, key: str, value: JSONObject, ttl: float) -> bool:
        with UNAVAILABLE:
            return bool(await self._redis.set(self._prefix + key, _json.dumps(value), nx=True, px=_ms(ttl)))

    async def get(self, key: str) -> JSONObject | None:
        with UNAVAILABLE:
            return _decode(await self._redis.get(self._prefix + key))

    async def put(self, key: str, value: JSONObject, ttl: float) -> None:
        with UNAVAILABLE:
            await self._redis.set(self._prefix + key, _json.dumps(value), px=_ms(ttl))

    async def take(self, key: str) -> JSONObject | None:
        with UNAVAILABLE:
            return _decode(await self._redis.getdel(self._prefix + key))

    async def claim(self, key: str, value: JSONObject, ttl: float, lease: float) -> bool:
        keys = [self._prefix + key, self._prefix + _lease_key(key)]
        with UNAVAILABLE:
            return bool(await self._claim(keys=keys, args=[_json.dumps(value), _ms(ttl), value["claim"], _ms(lease)]))

    async def renew(self, key: str, claim: str, lease: float) -> bool:
        keys = [self._prefix + _lease_key(key), self._prefix + key]
        with UNAVAILABLE:
            return bool(await self._renew(keys=keys, args=[claim, _ms(lease)]))

    async def inspect(self, key: str) -> tuple[JSONObject | None, bool]:
        with UNAVAILABLE:
            value, lease = await self._redis.mget(self._prefix + key, self._prefix + _lease_key(key))
        return _decode(value), lease is not None

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        new = _json.dumps(value).decode() if value is not None else ""
        keys = [self._prefix + key, self._prefix + _lease_key(key)]
        with UNAVAILABLE:
            return bool(await self._replace_if(keys=keys, args=[claim, new, _ms(ttl)]))

    async def hit(self, counters: Sequence[Counter]) -> Full | None:
        keys = [self._prefix + counter.key for counter in counters]
        args = [value for counter in counters for value in (counter.limit, max(1, math.ceil(counter.window * 1000)))]
        with UNAVAILABLE:
            answer = await self._hit(keys=keys, args=args)
        if not answer:
            return None
        index, ttl = answer
        return Full(int(index) - 1, int(ttl) / 1000)

    async def durability_warnings(self) -> list[str]:
        """Reads `appendonly`, `save` and `maxmemory-policy` with CONFIG GET (which managed Redis services
        may refuse: then the warning says that it could not check)."""
        import redis.exceptions

        pipeline = self._redis.pipeline(transaction=False)
        for name in _DURABILITY_SETTINGS:  # one name per CONFIG GET: Redis 6.2 takes no more
            pipeline.config_get(name)
        try:
            answers = await pipeline.execute()
        except redis.exceptions.ResponseError as exc:  # CONFIG renamed away, or an ACL without it
            return [f"could not check Redis's persistence and eviction settings: CONFIG GET was refused ({exc})"]
        config = {_text(name): _text(value) for answer in answers for name, value in answer.items()}
        return _redis_warnings(config)

    async def ping(self) -> None:
        with UNAVAILABLE:
            await self._redis.ping()

    async def aclose(self) -> None:
        await self._redis.aclose()


# Each one atomic step in Redis. KEYS[1] is the value, KEYS[2] its lease (the claim's id, expiring).
_CLAIM = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
"""
# KEYS[1] the lease, KEYS[2] the value, whose time to live grows to the lease's if shorter (never shrinks;
# PEXPIRE GT is Redis 7).
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[2])
if ttl >= 0 and ttl < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
"""
# Compare the stored value's claim (a value for a key that is gone is written back), then set or delete.
_REPLACE_IF = """
local current = redis.call('GET', KEYS[1])
if current then
  local ok, decoded = pcall(cjson.decode, current)
  if not ok or decoded['claim'] ~= ARGV[1] then return 0 end
elseif ARGV[2] == '' then
  return 0
end
redis.call('DEL', KEYS[2])
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
"""

# KEYS: the counters; ARGV: each one's limit and window (ms), in pairs. Reads every count first, so that a
# refused hit adds to none; a count's first hit starts its window (INCR then PEXPIRE, in the same step).
_HIT = """
for i = 1, #KEYS do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  if count >= tonumber(ARGV[2 * i - 1]) then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
      ttl = tonumber(ARGV[2 * i])
    end
    return {i, ttl}
  end
end
for i = 1, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[2 * i]) end
end
return 0
"""

_DURABILITY_SETTINGS = ("appendonly", "save", "maxmemory-policy")
_SAFE_EVICTION = "noeviction"


def _redis_warnings(config: dict[str, str]) -> list[str]:
    """The settings that lose records: no append-only file (a restart loses what came after the last
    snapshot, or everything without one), and any eviction policy (every key Crank writes has a time to
    live, so the volatile-* policies choose among exactly Crank's keys)."""
    warnings: list[str] = []
    if config.get("appendonly") != "yes":
        lost = "everything" if not config.get("save") else "what was written since the last snapshot"
        warnings.append(
            f"Redis runs without an append-only file (appendonly {config.get('appendonly', '?')}, save "
            f"{config.get('save') or 'none'!r}): a restart loses {lost}, and with it at-most-once for those "
            "idempotency keys. Set appendonly yes."
        )
    policy = config.get("maxmemory-policy", "?")
    if policy != _SAFE_EVICTION:
        warnings.append(
            f"Redis may evict keys (maxmemory-policy {policy}): an evicted idempotency record lets its key run "
            f"again. Set maxmemory-policy {_SAFE_EVICTION}."
        )
    return warnings


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


def _lease_key(key: str) -> str:
    return key + ":lease"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _decode(raw: bytes | None) -> JSONObject | None:
    if raw is None:
        return None
    value: JSONObject = _json.loads(raw)
    return value


def connect_redis(url: str, *, timeout: float = DEFAULT_REDIS_TIMEOUT) -> Any:
    """A `redis.asyncio.Redis` client as Crank uses Redis: every command (and connecting) bounded by `timeout`."""
    import redis.asyncio
    import redis.asyncio.retry
    import redis.backoff
    import redis.exceptions

    # A dropped connection is retried (a Redis restart; redis-py's default), a timeout never: the command
    # may have been applied, and retrying it would wait `timeout` again, ten times over.
    retry = redis.asyncio.retry.Retry(
        redis.backoff.ExponentialBackoff(cap=1, base=0.01), 3,
        supported_errors=(redis.exceptions.ConnectionError,),
    )  # fmt: skip
    return redis.asyncio.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry)


def open_state(redis_url: str | None) -> StateStore:
    """Redis when a URL is given, else the in-process store."""
    return RedisStore(redis_url) if redis_url else MemoryStore()
