"""Several `crank serve` processes behind nginx (tests/cluster.py, deploy/nginx/crank.conf), sharing one
PostgreSQL registry and one Redis: what docs/deployment.md describes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import httpx

from tests import services
from tests.cluster import StartCluster, admin, mcp, publish_user_agent, serves_tool, until
from tests.gateway import upstream


def test_three_replicas_behind_nginx_serve_what_the_admin_api_published_and_agree_on_each_change(
    start_cluster: StartCluster, serve: Callable[..., str]
) -> None:
    """Each replica builds the agent on its first request and holds it: a second publish rebuilds it on every
    replica, and a key revoked through one replica is refused by all (each looked it up by its digest)."""
    users = serve(upstream.app)
    cluster = start_cluster(3)
    key = publish_user_agent(cluster.url, users)  # through nginx: any replica may take each admin request
    for replica in cluster.replicas:  # each one sees the publish at its next registry poll
        until(partial(serves_tool, replica.url, key, "user_get"), what=f"the publish on {replica.url}")

    listed = mcp(cluster.url, key, "tools/list")
    assert listed.status_code == 200
    assert [tool["name"] for tool in listed.json()["result"]["tools"]] == ["user_get"]
    for replica in cluster.replicas:  # every replica serves it, not just the one that took the publish
        called = mcp(replica.url, key, "tools/call", {"name": "user_get", "arguments": {"id": 2}})
        assert called.json()["result"]["structuredContent"]["name"] == "user2"

    bindings = [{"operation": "get_user", "tool_name": "user_get"}, {"operation": "get_user", "tool_name": "profile"}]
    admin(cluster.url, "PUT", "/workspaces/acme/agents/desk", {"description": "Desk", "bindings": bindings})
    admin(cluster.url, "POST", "/workspaces/acme/agents/desk/publish")
    for replica in cluster.replicas:
        until(partial(serves_tool, replica.url, key, "profile"), what=f"the second publish on {replica.url}")
    (held,) = admin(cluster.url, "GET", "/workspaces/acme/api-keys").json()["api_keys"]
    admin(cluster.url, "DELETE", f"/workspaces/acme/api-keys/{held['id']}")
    for replica in cluster.replicas:
        until(lambda url=replica.url: mcp(url, key, "tools/list").status_code == 401,
              what=f"the revocation on {replica.url}")  # fmt: skip


@dataclass(frozen=True)
class Call:
    started: float
    ended: float
    outcome: str  # "ok", or what went wrong: an HTTP status or an exception's name


def call_user(client: httpx.Client, base: str, key: str, user: int) -> str:
    try:
        answer = mcp(base, key, "tools/call", {"name": "user_get", "arguments": {"id": user}}, client=client)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if answer.status_code != 200:
        return str(answer.status_code)
    result = answer.json().get("result", {})
    return "ok" if result.get("structuredContent", {}).get("name") == f"user{user}" else f"wrong: {answer.text}"


class Load:
    """`clients` threads calling the tool through nginx one call after another, each call recorded."""

    def __init__(self, base: str, key: str, clients: int) -> None:
        self.base, self.key = base, key
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _run(self, index: int) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                outcome = call_user(client, self.base, self.key, 1 + index % 7)
                with self._lock:
                    self.calls.append(Call(started, time.monotonic(), outcome))

    def count(self, after: float = 0.0, outcome: str | None = None) -> int:
        with self._lock:
            return sum(1 for c in self.calls if c.started >= after and (outcome is None or c.outcome == outcome))


KILL_WINDOW = 1.0
"""Seconds after the kill in which a call may still fail: nginx may hand one more request to a kept-alive
connection of the killed replica before it has read that connection's close (a POST once sent is never
retried, by design). The margin is generous; what matters is that failures stop."""


def test_kill_9_of_one_replica_under_load_fails_only_the_calls_in_flight_there(
    start_cluster: StartCluster, serve: Callable[..., str]
) -> None:
    users = serve(upstream.app)
    cluster = start_cluster(3)
    key = publish_user_agent(cluster.url, users)
    for replica in cluster.replicas:
        until(partial(serves_tool, replica.url, key, "user_get"), what=f"the publish on {replica.url}")
    clients = 6
    with Load(cluster.url, key, clients) as load:
        until(lambda: load.count(outcome="ok") >= 100, what="calls before the kill")
        killed_at = time.monotonic()
        cluster.kill(0)
        killed = time.monotonic()
        # Long enough for nginx to try the dead replica again (after `fail_timeout`, 2 s, tests/cluster.py):
        # the refused connection is then passed to another replica, never answered 502.
        until(lambda: time.monotonic() > killed + KILL_WINDOW + 4, what="time to pass")
        until(lambda: load.count(after=killed + KILL_WINDOW) >= 200, what="calls after the kill")
    failures = [call for call in load.calls if call.outcome != "ok"]
    assert len(failures) <= clients, failures  # at most one call in flight per client
    # nginx logs each request it could not complete: every one was on the killed replica, already sent.
    # (A refused connection is logged too, then passed to another replica: no failure.)
    cut = [line for line in cluster.nginx.errors() if "connect() failed" not in line]
    assert len(cut) == len(failures)
    assert all(f'upstream: "{cluster.replicas[0].url}/' in line and "from upstream" in line for line in cut), cut
    assert all(call.outcome == "502" for call in failures), failures  # nginx's answer for a cut upstream
    assert all(call.started < killed + KILL_WINDOW and call.ended > killed_at for call in failures), failures
    after = [call for call in load.calls if call.started >= killed + KILL_WINDOW]
    assert len(after) >= 200 and all(call.outcome == "ok" for call in after)


def test_a_restarted_replica_serves_the_catalog_published_while_it_was_down(
    start_cluster: StartCluster, serve: Callable[..., str]
) -> None:
    users = serve(upstream.app)
    cluster = start_cluster(3)
    key = publish_user_agent(cluster.url, users)
    cluster.kill(2)
    # Version 2, published through nginx while replica 2 is down: the same operation as a second tool too.
    bindings = [{"operation": "get_user", "tool_name": "user_get"}, {"operation": "get_user", "tool_name": "profile"}]
    admin(cluster.url, "PUT", "/workspaces/acme/agents/desk", {"description": "Desk", "bindings": bindings})
    assert admin(cluster.url, "POST", "/workspaces/acme/agents/desk/publish").json()["version"] == 2

    cluster.restart(2)
    listed = mcp(cluster.replicas[2].url, key, "tools/list").json()["result"]["tools"]
    assert sorted(tool["name"] for tool in listed) == ["profile", "user_get"]
    called = mcp(cluster.replicas[2].url, key, "tools/call", {"name": "profile", "arguments": {"id": 3}})
    assert called.json()["result"]["structuredContent"]["name"] == "user3"


def readiness(base: str) -> tuple[int, object]:
    answer = httpx.get(base + "/readyz", timeout=30)
    return answer.status_code, answer.json()


def ready_is(status: int, base: str) -> bool:
    return readiness(base)[0] == status


def test_replicas_keep_serving_plain_calls_while_redis_is_away(
    start_cluster: StartCluster, serve: Callable[..., str]
) -> None:
    users = serve(upstream.app)
    with services.start_redis() as redis:  # a Redis of the test's own, to take away
        cluster = start_cluster(2, env={"CRANK_REDIS_URL": redis.url})
        key = publish_user_agent(cluster.url, users)
        for replica in cluster.replicas:
            until(partial(serves_tool, replica.url, key, "user_get"), what=f"the publish on {replica.url}")
        redis.stop()
        for replica in cluster.replicas:
            until(partial(ready_is, 503, replica.url), what="readiness to fail")
            assert readiness(replica.url) == (503, {"status": "not_ready", "unavailable": ["redis"]})
        # A call with no idempotency key and no confirmation never asks Redis: it is served as before.
        with httpx.Client(timeout=30) as client:
            assert [call_user(client, cluster.url, key, 4) for _ in range(10)] == ["ok"] * 10
        redis.start()
        for replica in cluster.replicas:
            until(partial(ready_is, 200, replica.url), what="readiness to return")
