"""The rpc executor's coordinators, in process and in a real Redis: locks with a lease, a heartbeat and fencing
tokens, release by the owner only, a shared expiring cache with a size cap, one fixed-window count, and what
happens when Redis does not answer."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import redis

from crank.exceptions import DependencyUnavailableError
from crank.state import Coordinator, Held, LocalCoordinator, RedisCoordinator
from tests.services import free_port, start_redis

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
Make = Callable[..., RedisCoordinator]


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for what a background task does (a guard against a hang, not a measure of time)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come"
        await asyncio.sleep(0.02)


@pytest.fixture
async def make_redis(redis_url: str) -> AsyncIterator[Make]:
    """RedisCoordinators on one prefix of this test's own: several of them are several processes' views."""
    prefix = f"t-{uuid.uuid4().hex}:"
    made: list[RedisCoordinator] = []

    def make(**options: float) -> RedisCoordinator:
        made.append(RedisCoordinator(redis_url, prefix=prefix, **options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for coordinator in made:
        await coordinator.aclose()


@pytest.fixture(params=["local", "redis"])
def coordinator(request: pytest.FixtureRequest) -> Coordinator:
    if request.param == "local":
        return LocalCoordinator(lock_timeout=0.2)
    make: Make = request.getfixturevalue("make_redis")
    return make(lock_timeout=0.2)


async def test_fencing_tokens_increase_with_each_acquisition(coordinator: Coordinator) -> None:
    tokens = []
    for _ in range(3):
        held = await coordinator.acquire("job")
        assert held is not None
        tokens.append(held.token)
        assert await coordinator.release(held)
    assert tokens == sorted(set(tokens)) and len(tokens) == 3


async def test_a_held_lock_is_refused_to_others_for_the_whole_wait_then_given(coordinator: Coordinator) -> None:
    held = await coordinator.acquire("job")
    assert held is not None
    started = time.monotonic()
    assert await coordinator.acquire("job") is None
    assert time.monotonic() - started >= 0.2  # lock_timeout
    other = await coordinator.acquire("other")  # one lock per name
    assert other is not None
    await coordinator.release(held)
    again = await coordinator.acquire("job")
    assert again is not None
    await coordinator.release(again)
    await coordinator.release(other)


async def test_fencing_tokens_increase_across_processes(make_redis: Make) -> None:
    first, second = make_redis(), make_redis()
    tokens = []
    for view in (first, second, first, second):
        held = await view.acquire("job")
        assert held is not None
        tokens.append(held.token)
        await view.release(held)
    assert tokens == [tokens[0] + step for step in range(4)]


async def test_a_lock_is_released_only_by_its_owner(make_redis: Make) -> None:
    owner, other = make_redis(lock_timeout=0.1), make_redis(lock_timeout=0.1)
    held = await owner.acquire("job")
    assert held is not None
    impostor = Held("job", held.token, owner=uuid.uuid4().hex)
    assert not await other.release(impostor)
    assert await other.acquire("job") is None  # still the owner's
    assert await owner.release(held)
    taken = await other.acquire("job")
    assert taken is not None and await other.release(taken)


async def test_the_heartbeat_keeps_the_lock_of_a_call_longer_than_its_lease(make_redis: Make) -> None:
    holder, waiter = make_redis(lock_lease=0.6), make_redis(lock_timeout=2.0)
    held = await holder.acquire("job")
    assert held is not None
    assert await waiter.acquire("job") is None  # 2 s: more than three leases
    assert not held.lost
    assert await holder.release(held)
    taken = await waiter.acquire("job")
    assert taken is not None and await waiter.release(taken)


async def test_a_lapsed_lease_is_reported_lost_and_its_release_refused(make_redis: Make) -> None:
    holder, other = make_redis(lock_lease=0.3), make_redis()
    held = await holder.acquire("job")
    assert held is not None and held.heartbeat is not None
    held.heartbeat.cancel()  # a holder that stalled: nothing renews its lease
    await asyncio.sleep(0.4)
    taken = await other.acquire("job")
    assert taken is not None and taken.token > held.token
    assert not await holder.release(held)
    assert held.lost
    assert await other.release(taken)


_HOLDER = """
import asyncio, sys
from crank.state import RedisCoordinator

async def main():
    coordinator = RedisCoordinator(sys.argv[1], prefix=sys.argv[2], lock_lease=2.0)
    held = await coordinator.acquire("job")
    print(held.token, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_killed_holders_lock_is_taken_after_its_lease(redis_url: str) -> None:
    prefix = f"t-{uuid.uuid4().hex}:"
    script = textwrap.dedent(_HOLDER)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    holder = subprocess.Popen([sys.executable, "-c", script, redis_url, prefix], stdout=subprocess.PIPE, env=env)
    waiter = RedisCoordinator(redis_url, prefix=prefix, lock_timeout=0.3)
    try:
        assert holder.stdout is not None
        token = int(await asyncio.to_thread(holder.stdout.readline))
        await asyncio.sleep(2.5)  # past its 2 s lease: the holder's heartbeat keeps it
        assert await waiter.acquire("job") is None
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        killed = time.monotonic()
        assert await waiter.acquire("job") is None  # its lease still runs (renewed at most 0.67 s before)
        waiter.lock_timeout = 10.0
        taken = await waiter.acquire("job")
        assert taken is not None and taken.token == token + 1
        assert time.monotonic() - killed < 3.0  # the lease after the last renewal (2 s at most), not the whole wait
        await waiter.release(taken)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
        await waiter.aclose()


async def test_a_rate_count_is_a_fixed_window(coordinator: Coordinator) -> None:
    waits = [await coordinator.count("m", 2, 1.0) for _ in range(3)]
    assert waits[:2] == [None, None]  # counted
    assert waits[2] is not None and 0 < waits[2] <= 1.0  # refused until the window ends
    await asyncio.sleep(waits[2] + 0.05)
    assert await coordinator.count("m", 2, 1.0) is None


async def test_a_rate_count_is_one_count_across_processes(make_redis: Make) -> None:
    views = [make_redis() for _ in range(3)]
    waits = await asyncio.gather(*(views[n % 3].count("m", 5, 60) for n in range(12)))
    assert waits.count(None) == 5


async def test_a_cached_value_is_shared_and_expires(make_redis: Make) -> None:
    first, second = make_redis(), make_redis()
    await first.cache_put("square", "v1", b'{"n":3}', {"n": 9, "of": [3]}, ttl=1.0)
    assert await second.cache_get("square", "v1", b'{"n":3}') == (True, {"n": 9, "of": [3]})
    assert await second.cache_get("square", "v2", b'{"n":3}') == (False, None)  # per version
    assert await second.cache_get("square", "v1", b'{"n":4}') == (False, None)  # per arguments
    await first.cache_put("nothing", "v1", b"{}", None, ttl=5)
    assert await second.cache_get("nothing", "v1", b"{}") == (True, None)  # a None result is a hit too
    await asyncio.sleep(1.1)
    assert await second.cache_get("square", "v1", b'{"n":3}') == (False, None)


async def test_a_cached_value_that_is_not_json_is_a_miss(make_redis: Make, redis_url: str) -> None:
    view = make_redis()
    await view.cache_put("square", "v1", b"{}", 9, ttl=60)
    with redis.Redis.from_url(redis_url) as client:
        for key in client.scan_iter(f"{view.prefix}cache:square:*"):
            client.set(key, b"\xff not json")
    assert await view.cache_get("square", "v1", b"{}") == (False, None)


async def test_a_value_over_the_cache_cap_is_not_cached(make_redis: Make, caplog: pytest.LogCaptureFixture) -> None:
    view = make_redis(cache_max_bytes=100)
    await view.cache_put("big", "v1", b"{}", "x" * 200, ttl=60)
    await view.cache_put("small", "v1", b"{}", "x" * 50, ttl=60)
    assert await view.cache_get("big", "v1", b"{}") == (False, None)
    assert await view.cache_get("small", "v1", b"{}") == (True, "x" * 50)
    assert "rpc result of big not cached" in caplog.text


async def test_distinct_arguments_cannot_store_more_than_cache_size_results_per_ttl(
    make_redis: Make, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    view = make_redis(cache_size=3)
    for n in range(10):  # a caller sending endless distinct arguments
        await view.cache_put("square", "v1", b'{"n":%d}' % n, n * n, ttl=60)
    hits = [await view.cache_get("square", "v1", b'{"n":%d}' % n) for n in range(10)]
    assert hits[:3] == [(True, 0), (True, 1), (True, 4)] and hits[3:] == [(False, None)] * 7
    with redis.Redis.from_url(redis_url) as client:
        assert len(list(client.scan_iter(f"{view.prefix}cache:square:*"))) == 3
    assert "3 results stored within its cache time already" in caplog.text


async def test_redis_down_fails_locks_and_counts_and_misses_the_cache(caplog: pytest.LogCaptureFixture) -> None:
    down = RedisCoordinator(f"redis://127.0.0.1:{free_port()}/0", lock_timeout=1)
    try:
        with pytest.raises(DependencyUnavailableError, match="Redis does not answer"):
            await down.acquire("job")
        with pytest.raises(DependencyUnavailableError):
            await down.count("m", 5, 60)
        await down.cache_put("square", "v1", b"{}", 9, ttl=60)
        assert await down.cache_get("square", "v1", b"{}") == (False, None)
        assert await down.cache_get("square", "v1", b"{}") == (False, None)
    finally:
        await down.aclose()
    # One line per kind of failure and method, not one per call.
    assert caplog.text.count("rpc cache of square") == 1
    assert "rpc lock or rate limit of job unavailable" in caplog.text


async def test_redis_lost_while_a_lock_is_held_is_logged_and_the_call_may_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with start_redis() as server:
        holder = RedisCoordinator(server.url, lock_lease=0.3, timeout=0.5)
        try:
            held = await holder.acquire("job")
            assert held is not None
            await asyncio.to_thread(server.stop)
            await until(lambda: "rpc lock job not renewed" in caplog.text)  # a beat of the heartbeat failed
            assert not await holder.release(held)  # refused, never raised: the call itself is done
        finally:
            await holder.aclose()
    assert "rpc lock job not renewed" in caplog.text
    assert "rpc lock job not released" in caplog.text


async def test_a_holder_whose_lease_is_gone_learns_it_at_the_next_beat(
    make_redis: Make, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    holder = make_redis(lock_lease=0.3)
    held = await holder.acquire("job")
    assert held is not None
    with redis.Redis.from_url(redis_url) as client:  # what a lapse looks like to the holder (a failover, say)
        client.delete(f"{holder.prefix}lock:job")
    await until(lambda: held.lost)
    assert held.heartbeat is not None and held.heartbeat.done()
    assert f"rpc lock job lost: its lease lapsed while fencing token {held.token} ran" in caplog.text
    assert not await holder.release(held)
