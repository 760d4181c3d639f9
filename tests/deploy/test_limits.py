"""Rate limits and quotas with several `crank serve` processes behind nginx, sharing PostgreSQL and Redis
(tests/cluster.py): every replica counts in the same place, so a limit holds for the deployment as a whole."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import httpx

from tests.cluster import StartCluster, admin, mcp, publish_user_agent, serves_tool, until
from tests.gateway import upstream

CALLS = 24


def call_many(base: str, key: str, count: int) -> list[dict[str, Any]]:
    """`count` tools/call through nginx, 8 at a time: {"ok": ...} or {"error": the structured error}."""

    def one(_: int) -> dict[str, Any]:
        with httpx.Client(timeout=30) as client:
            answer = mcp(base, key, "tools/call", {"name": "user_get", "arguments": {"id": 2}}, client=client)
        result = answer.json()["result"]
        return {"error": json.loads(result["content"][0]["text"])} if result["isError"] else {"ok": True}

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(count)))


def replicas_that_answered(urls: list[str]) -> int:
    """How many replicas ran or refused a call (their own /metrics)."""
    answered = 0
    for url in urls:
        text = httpx.get(url + "/metrics", timeout=10).text
        counts = re.findall(r"^crank_tool_calls_total\{[^}]*\} (\S+)$", text, re.M)
        answered += any(float(count) > 0 for count in counts)
    return answered


def ready_everywhere(cluster_urls: list[str], key: str) -> None:
    for url in cluster_urls:
        until(partial(serves_tool, url, key, "user_get"), what=f"the publish and key on {url}")


def test_a_rate_limit_of_n_per_window_lets_exactly_n_through_across_replicas(
    start_cluster: StartCluster, serve: Callable[..., str]
) -> None:
    cluster = start_cluster(3)
    publish_user_agent(cluster.url, serve(upstream.app))
    created = admin(cluster.url, "POST", "/workspaces/acme/api-keys", {"limits": {"rate": {"calls": 7, "window": 300}}})
    key = created.json()["key"]
    urls = [replica.url for replica in cluster.replicas]
    ready_everywhere(urls, key)  # tools/list: not a tool call, so not counted by the key's limit
    answers = call_many(cluster.url, key, CALLS)
    assert sum("ok" in answer for answer in answers) == 7
    details = [answer["error"]["details"] for answer in answers if "error" in answer]
    assert len(details) == CALLS - 7 and {d["limit"] for d in details} == {"key_rate"}
    assert all(1 <= d["retry_after"] <= 300 for d in details)
    assert replicas_that_answered(urls) >= 2  # nginx spread the calls: the count is the deployment's


def test_a_quota_per_key_holds_across_replicas(start_cluster: StartCluster, serve: Callable[..., str]) -> None:
    cluster = start_cluster(3)
    publish_user_agent(cluster.url, serve(upstream.app))
    admin(
        cluster.url, "PUT", "/workspaces/acme", {"name": "acme", "key_limits": {"quota": {"calls": 5, "period": "day"}}}
    )
    first = admin(cluster.url, "POST", "/workspaces/acme/api-keys", {}).json()["key"]
    second = admin(cluster.url, "POST", "/workspaces/acme/api-keys", {}).json()["key"]
    urls = [replica.url for replica in cluster.replicas]
    ready_everywhere(urls, first)
    ready_everywhere(urls, second)
    answers = call_many(cluster.url, first, CALLS)
    assert sum("ok" in answer for answer in answers) == 5
    assert {answer["error"]["details"]["limit"] for answer in answers if "error" in answer} == {"key_quota"}
    # Another replica, asked directly, refuses the spent key too, and each key has a quota of its own.
    for url in urls:
        assert "error" in call_many(url, first, 1)[0]
    assert sum("ok" in answer for answer in call_many(cluster.url, second, 8)) == 5
    assert replicas_that_answered(urls) >= 2
