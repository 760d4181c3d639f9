"""Several processes of one rpc app behave as one when they share Redis: `crank serve` replicas of
tests/rpc/apps_shared.py behind nginx (tests/cluster.py), called by several clients at once. Without Redis
each process locks, caches and counts on its own, which the overlap test shows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from tests.cluster import Cluster, StartCluster, until

pytestmark = pytest.mark.anyio

APP = "tests.rpc.apps_shared:app"


@pytest.fixture
def counter(redis_url: str) -> Iterator[tuple[redis.Redis, str]]:
    """Where the app's methods count what they did (tests/rpc/apps_shared.py), under a prefix of this test's."""
    client = redis.Redis.from_url(redis_url)
    yield client, f"t-{uuid.uuid4().hex}:"
    client.close()


def start(start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str, *, shared: bool) -> Cluster:
    _, prefix = counter
    env = {"CRANK_TEST_PREFIX": prefix, "CRANK_TEST_COUNTER_URL": redis_url}
    return start_cluster(2, env=env, args=[APP], redis=shared)


async def call(client: httpx.AsyncClient, url: str, method: str, params: dict[str, Any] | None = None) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    answer = (await client.post(url + "/rpc", json=body, timeout=60)).json()
    return answer


async def many_clients(url: str, method: str, *, clients: int, calls: int) -> list[Any]:
    """`clients` clients (each its own connections) making `calls` calls each, all at once."""

    async def one_client() -> list[Any]:
        async with httpx.AsyncClient() as client:
            return [await call(client, url, method) for _ in range(calls)]

    results = await asyncio.gather(*(one_client() for _ in range(clients)))
    return [answer for answers in results for answer in answers]


async def most_at_once(url: str, counter: tuple[redis.Redis, str], *, rounds: int = 1) -> tuple[int, list[Any]]:
    """The most runs of `critical` under way at once while 6 clients call it 4 times each at `url`, in rounds
    until two processes have served it (the new connections of a round can all go to one worker)."""
    results: list[Any] = []
    for _ in range(rounds):
        answers = await many_clients(url, "critical", clients=6, calls=4)
        assert all("result" in answer for answer in answers), answers
        results += [answer["result"] for answer in answers]
        if len({result["pid"] for result in results}) == 2:
            break
    assert len({result["pid"] for result in results}) == 2  # spread over both processes
    client, prefix = counter
    seen = [int(value) for value in client.lrange(prefix + "seen", 0, -1)]
    assert len(seen) == len(results)
    return max(seen), results


async def test_a_locked_method_never_runs_twice_at_once_across_processes(
    start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str
) -> None:
    cluster = start(start_cluster, counter, redis_url, shared=True)
    at_once, results = await most_at_once(cluster.url, counter)
    assert at_once == 1
    tokens = sorted(result["token"] for result in results)
    assert tokens == list(range(tokens[0], tokens[0] + 24))  # one fencing token per run, across processes


async def test_without_redis_a_locked_method_overlaps_across_processes(
    start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str
) -> None:
    cluster = start(start_cluster, counter, redis_url, shared=False)
    at_once, _ = await most_at_once(cluster.url, counter)
    assert at_once == 2  # each process holds its own lock: the promise needs Redis


async def test_a_result_cached_by_one_process_is_a_hit_on_another(
    start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str
) -> None:
    cluster = start(start_cluster, counter, redis_url, shared=True)
    first, second = cluster.replicas
    async with httpx.AsyncClient() as client:
        computed = await call(client, first.url, "square", {"n": 7})
        cached = await call(client, second.url, "square", {"n": 7})
        other = await call(client, second.url, "square", {"n": 8})
    client_, prefix = counter
    assert computed["result"] == cached["result"]  # the same pid: the first process's answer
    assert computed["result"]["square"] == 49 and other["result"]["square"] == 64
    assert other["result"]["pid"] != computed["result"]["pid"]
    assert int(client_.get(prefix + "square_runs") or 0) == 2  # 7 once, 8 once


async def test_a_rate_limit_of_n_lets_exactly_n_through_across_processes(
    start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str
) -> None:
    cluster = start(start_cluster, counter, redis_url, shared=True)

    async def calls_to(url: str) -> list[Any]:
        async with httpx.AsyncClient() as client:
            return list(await asyncio.gather(*(call(client, url, "limited") for _ in range(6))))

    answers = [answer for url in (cluster.replicas[0].url, cluster.replicas[1].url, cluster.url)
               for answer in await calls_to(url)]  # fmt: skip
    allowed = [answer for answer in answers if "result" in answer]
    refused = [answer for answer in answers if "error" in answer]
    assert len(allowed) == 5  # "5/minute", 18 calls on two processes
    assert {answer["error"]["code"] for answer in refused} == {-32003}
    assert all(answer["error"]["data"]["retry_after"] >= 1 for answer in refused)


async def test_the_workers_of_one_crank_serve_share_the_lock_through_redis(
    start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str
) -> None:
    _, prefix = counter
    env = {"CRANK_TEST_PREFIX": prefix, "CRANK_TEST_COUNTER_URL": redis_url}
    cluster = start_cluster(1, env=env, args=["--workers", "2", APP])
    # Straight to the replica: nginx would reuse its kept-alive connections, each held by one worker.
    at_once, _ = await most_at_once(cluster.replicas[0].url, counter, rounds=20)
    assert at_once == 1
    assert "no Redis is configured" not in cluster.replicas[0].log.read_text()


async def test_workers_without_redis_warn_at_start_naming_the_methods(
    start_cluster: StartCluster, counter: tuple[redis.Redis, str], redis_url: str
) -> None:
    _, prefix = counter
    env = {"CRANK_TEST_PREFIX": prefix, "CRANK_TEST_COUNTER_URL": redis_url}
    cluster = start_cluster(1, env=env, args=["--workers", "2", APP], redis=False)

    def warnings() -> list[str]:
        return [line for line in cluster.replicas[0].log.read_text().splitlines() if "no Redis is configured" in line]

    until(lambda: len(warnings()) >= 2, what="a warning from each worker")  # each logs at its own start
    assert len(warnings()) == 2
    assert all("CRANK_WORKERS=2" in line and "critical, limited, square" in line for line in warnings())
