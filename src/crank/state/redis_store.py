"""`RedisStore`: the state store every replica shares, in Redis (Lua scripts for the atomic steps), and
`connect_redis`, a client as Crank uses Redis (every command bounded in time, never retried)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from crank import _json
from crank.exceptions import StateStoreUnavailableError
from crank.state.base import Counter, Full, lease_key
from crank.types import JSONObject
from crank.wire.notices import ThrottledLog

__all__ = [
    "DEFAULT_REDIS_TIMEOUT",
    "MAX_HITS_PER_STEP",
    "SLICED_LIMIT",
    "SLICES_PER_LIMIT",
    "RedisStore",
    "connect_redis",
    "milliseconds",
]

logger = logging.getLogger("crank.state")
_unavailable_log = ThrottledLog(logger)  # Redis gone under load: every command fails, the log says so once a while

DEFAULT_REDIS_TIMEOUT = 5.0
"""Seconds one Redis command (or connecting) may take before it fails with a timeout, never retried (a write
that timed out may have been applied). Without it, a Redis that stopped answering (a lost network path)
held every claim, lease renewal and outcome write, and with them the calls' answers, for good."""


class _Unavailable:
    """`with _UNAVAILABLE:` around a Redis command: a refused connection or a timeout becomes
    `StateStoreUnavailableError` (a structured, recoverable tool error; nothing of the cause reaches a client).
    One instance for every command: entering it allocates nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            return
        import redis.exceptions

        unavailable = isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | TimeoutError)
        # A Redis that answers but cannot serve writes now: full (noeviction), a replica after a failover, loading.
        refusing = isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith(_REFUSING_STATES)
        if unavailable or refusing:
            _unavailable_log.warning("state_unavailable", "Redis cannot serve: %s: %s", type(exc).__name__, exc)
            raise StateStoreUnavailableError("This server cannot use its state store right now.") from exc


_REFUSING_STATES = ("OOM", "READONLY", "MASTERDOWN", "LOADING", "BUSY", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN")
"""The error prefixes of a Redis that is up but cannot serve a write now: treated as unavailable."""

_UNAVAILABLE = _Unavailable()


class RedisStore:
    """State shared by every replica, in Redis (SET NX PX in Lua scripts, GETDEL: Redis 6.2 or newer). A refused
    connection or a timeout raises `StateStoreUnavailableError`."""

    def __init__(
        self, url: str, *, prefix: str = "crank:", timeout: float = DEFAULT_REDIS_TIMEOUT, client: Any = None
    ) -> None:
        # `client`: a `connect_redis` client to share (the rpc coordinator's), instead of a pool of its own.
        self._redis: Any = client if client is not None else connect_redis(url, timeout=timeout)
        self._timeout = timeout
        self._prefix = prefix
        self._replace_if = self._redis.register_script(_REPLACE_IF)
        self._claim = self._redis.register_script(_CLAIM)
        self._renew = self._redis.register_script(_RENEW)
        self._hits = self._redis.register_script(_HITS)
        # Hits waiting for the next script call, each with the future its caller awaits (`hit`).
        self._pending: list[tuple[Sequence[Counter], asyncio.Future[Full | None]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._asking = False  # a script call of hits is on its way
        # Slices of large limits this replica holds: counter key -> (calls left, when the slice ends).
        self._slices: dict[str, tuple[int, float]] = {}

    async def add(self, key: str, value: JSONObject, ttl: float) -> bool:
        with _UNAVAILABLE:
            return bool(await self._redis.set(self._prefix + key, _json.dumps(value), nx=True, px=milliseconds(ttl)))

    async def get(self, key: str) -> JSONObject | None:
        with _UNAVAILABLE:
            return _decode(await self._redis.get(self._prefix + key))

    async def put(self, key: str, value: JSONObject, ttl: float) -> None:
        with _UNAVAILABLE:
            await self._redis.set(self._prefix + key, _json.dumps(value), px=milliseconds(ttl))

    async def take(self, key: str) -> JSONObject | None:
        with _UNAVAILABLE:
            return _decode(await self._redis.getdel(self._prefix + key))

    async def claim(self, key: str, value: JSONObject, ttl: float, lease: float) -> bool:
        keys = [self._prefix + key, self._prefix + lease_key(key)]
        with _UNAVAILABLE:
            return bool(
                await self._claim(
                    keys=keys, args=[_json.dumps(value), milliseconds(ttl), value["claim"], milliseconds(lease)]
                )
            )

    async def renew(self, key: str, claim: str, lease: float) -> bool:
        keys = [self._prefix + lease_key(key), self._prefix + key]
        with _UNAVAILABLE:
            return bool(await self._renew(keys=keys, args=[claim, milliseconds(lease)]))

    async def inspect(self, key: str) -> tuple[JSONObject | None, bool]:
        with _UNAVAILABLE:
            value, lease = await self._redis.mget(self._prefix + key, self._prefix + lease_key(key))
        return _decode(value), lease is not None

    async def replace_if(self, key: str, claim: str, value: JSONObject | None, ttl: float) -> bool:
        new = _json.dumps(value).decode() if value is not None else ""
        keys = [self._prefix + key, self._prefix + lease_key(key)]
        with _UNAVAILABLE:
            return bool(await self._replace_if(keys=keys, args=[claim, new, milliseconds(ttl)]))

    async def hit(self, counters: Sequence[Counter]) -> Full | None:
        """Two things keep what a count costs a replica under load small (docs/benchmarks.md):

        - A counter of a large limit (`SLICED_LIMIT` calls or more per window) is counted in Redis a slice at a
          time: the replica takes `limit // SLICES_PER_LIMIT` calls at once and spends them without asking,
          until the slice is spent or its window ends. Never more than the limit passes in a window; the
          calls left of slices that replicas hold but do not spend (at most a slice each) may go unused.
          Smaller limits are counted call by call: exact.
        - Hits go to Redis in one script call at a time per replica: those made meanwhile wait for the next
          one, and first spend what the answer to the last one left in slices.

        A hit refused by one counter gives back what it took of the others' slices. A caller waits at most the
        store's timeout from its own start, the script call it waited for before its own included: then
        `StateStoreUnavailableError` (what it was counted for, if its step reached Redis, stays counted)."""
        if self.hit_now(counters):
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Full | None] = loop.create_future()  # asked again, whole, when the hit is sent
        self._pending.append((counters, future))
        if not self._asking and len(self._pending) == 1:
            loop.call_soon(self._send_pending)
        try:
            async with asyncio.timeout(self._timeout):
                return await future
        except TimeoutError:
            _unavailable_log.warning("state_unavailable", "Redis cannot serve: a count waited %g s", self._timeout)
            raise StateStoreUnavailableError("This server cannot use its state store right now.") from None

    def hit_now(self, counters: Sequence[Counter]) -> bool:
        taken = self._take(counters)
        if len(taken) == len(counters):
            return True
        self._give_back(taken)
        return False

    def _take(self, counters: Sequence[Counter]) -> list[str]:
        """One call of each counter's slice, for those that have one: the keys taken."""
        taken: list[str] = []
        now = time.monotonic()
        for counter in counters:
            held = self._slices.get(counter.key)
            if held is not None and held[0] > 0 and held[1] > now:
                self._slices[counter.key] = (held[0] - 1, held[1])
                taken.append(counter.key)
        return taken

    def _give_back(self, keys: list[str]) -> None:
        for key in keys:
            held = self._slices.get(key)
            if held is not None:
                self._slices[key] = (held[0] + 1, held[1])

    def _keep_slice(self, key: str, calls: int, ends: float) -> None:
        held = self._slices.get(key)
        if held is not None and held[0] > 0 and held[1] > time.monotonic():
            self._slices[key] = (held[0] + calls, min(held[1], ends))  # the same window: the earlier end is safe
            return
        if len(self._slices) >= _MAX_SLICES_KEPT:
            now = time.monotonic()
            self._slices = {k: held for k, held in self._slices.items() if held[1] > now and held[0] > 0}
            if len(self._slices) >= _MAX_SLICES_KEPT:
                return  # counted call by call until slices end
        self._slices[key] = (calls, ends)

    def _send_pending(self) -> None:
        """Send the hits waiting (at most `MAX_HITS_PER_STEP`) in one script call, unless one is on its way;
        a hit that the slices kept since it waited can pay for is answered here."""
        if self._asking:
            return
        batch: list[tuple[Sequence[Counter], asyncio.Future[Full | None]]] = []
        waiting, self._pending = self._pending, []
        for entry in waiting:
            counters, future = entry
            if future.done():
                continue
            if len(batch) >= MAX_HITS_PER_STEP:
                self._pending.append(entry)
                continue
            if self.hit_now(counters):  # paid for by slices kept since it waited
                future.set_result(None)
                continue
            batch.append(entry)
        if batch:
            self._asking = True
            task = asyncio.get_running_loop().create_task(self._send_hits(batch))
            self._sending.add(task)  # held until done: a task only the loop references may be collected
            task.add_done_callback(self._sending.discard)

    async def _send_hits(self, batch: list[tuple[Sequence[Counter], asyncio.Future[Full | None]]]) -> None:
        keys: list[str] = []
        names: list[str] = []
        args: list[int] = [len(batch)]
        for counters, _ in batch:
            args.append(len(counters))
            for counter in counters:
                keys.append(self._prefix + counter.key)
                names.append(counter.key)
                wanted = counter.limit // SLICES_PER_LIMIT if counter.limit >= SLICED_LIMIT else 1
                args += (counter.limit, max(1, math.ceil(counter.window * 1000)), wanted)
        asked = time.monotonic()  # a slice ends when its window ends in Redis, seen from before asking
        try:
            with _UNAVAILABLE:
                *answers, slices = await self._hits(keys=keys, args=args)
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._asking = False
            if self._pending:
                asyncio.get_running_loop().call_soon(self._send_pending)
        for i in range(0, len(slices), 3):
            self._keep_slice(names[int(slices[i]) - 1], int(slices[i + 1]), asked + int(slices[i + 2]) / 1000)
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():  # its caller may have been cancelled meanwhile: the count stays
                future.set_result(Full(int(answer[0]) - 1, int(answer[1]) / 1000) if answer else None)

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
        with _UNAVAILABLE:
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

# Several hits in one step, each as `hit` says: KEYS are every hit's counters in order; ARGV[1] is the number
# of hits, then for each hit its number of counters and, per counter, its limit, window (ms) and the calls
# wanted when Redis counts it (1, or a slice of a large limit: `RedisStore.hit`). Each hit reads every count
# first, so that a refused hit adds to none, and answers the full counter that resets last (retrying sooner
# is refused again); else each counter spends one call of the slice taken earlier in this step, or takes a
# new one (what is wanted, at most what is left; a count's first hit starts its window). The hits run in
# order, so two hits of one key in a step see each other. Answers one entry per hit, 0 or {counter, ms to
# wait}, then one more: {position in KEYS, calls left, ms left} for each slice with calls left.
_HITS = """
local answers, spare, spare_at, spare_ttl = {}, {}, {}, {}
local k, a = 1, 2
for h = 1, tonumber(ARGV[1]) do
  local n = tonumber(ARGV[a])
  a = a + 1
  local full, wait = 0, -1
  local counts = {}
  for i = 0, n - 1 do
    local key = KEYS[k + i]
    local count = tonumber(redis.call('GET', key) or '0')
    counts[i] = count
    if count >= tonumber(ARGV[a + 3 * i]) and (spare[key] or 0) == 0 then
      local ttl = redis.call('PTTL', key)
      if ttl < 0 then
        redis.call('PEXPIRE', key, ARGV[a + 3 * i + 1])
        ttl = tonumber(ARGV[a + 3 * i + 1])
      end
      if ttl > wait then full, wait = i + 1, ttl end
    end
  end
  if full > 0 then
    answers[h] = {full, wait}
  else
    for i = 0, n - 1 do
      local key = KEYS[k + i]
      if (spare[key] or 0) > 0 then
        spare[key] = spare[key] - 1
      else
        local grant = math.min(tonumber(ARGV[a + 3 * i + 2]), tonumber(ARGV[a + 3 * i]) - counts[i])
        redis.call('INCRBY', key, grant)
        local ttl = redis.call('PTTL', key)
        if ttl < 0 then
          redis.call('PEXPIRE', key, ARGV[a + 3 * i + 1])
          ttl = tonumber(ARGV[a + 3 * i + 1])
        end
        spare[key], spare_at[key], spare_ttl[key] = grant - 1, k + i, ttl
      end
    end
    answers[h] = 0
  end
  k = k + n
  a = a + 3 * n
end
local slices = {}
for key, left in pairs(spare) do
  if left > 0 then
    slices[#slices + 1] = spare_at[key]
    slices[#slices + 1] = left
    slices[#slices + 1] = spare_ttl[key]
  end
end
answers[#answers + 1] = slices
return answers
"""
MAX_HITS_PER_STEP = 256
"""The most hits one script call carries (`RedisStore.hit`): bounds how long Redis runs one of them."""
SLICED_LIMIT = 1000
"""Limits of at least this many calls per window are handed to a replica in slices (`RedisStore.hit`)."""
SLICES_PER_LIMIT = 100
"""A slice of a limit: `limit // SLICES_PER_LIMIT` calls."""
_MAX_SLICES_KEPT = 10_000  # counters a replica holds slices of; expired ones are dropped when it is full

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def milliseconds(seconds: float) -> int:
    """A time to live for Redis's PX and PEXPIRE: whole milliseconds, at least 1 (0 is an error there)."""
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

    # Nothing is retried, neither a timeout nor a dropped connection: either may come after Redis applied the
    # command, and a second run of a claim, a count or a lock script is not the first one again (a claim would
    # find itself and report its own call in progress; a count would count twice). The caller gets
    # `StateStoreUnavailableError` (recoverable) and the pool reconnects for the next command.
    retry = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
    return redis.asyncio.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry)
