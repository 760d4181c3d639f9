"""The gateway's rate limits and quotas (docs/gateway.md, Rate limits and quotas), over real HTTP on loopback
with a real Redis: two `GatewayService`s on one registry and one Redis are two replicas. The same limits with
several `crank serve` processes behind nginx: tests/deploy/test_limits.py."""

from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from crank.admin.apply import apply_catalog, load_catalog_file
from crank.registry import Registry
from crank.registry.runtime import Limits, Quota, RateLimit
from crank.server import GatewayService
from crank.state import MemoryStore, RedisStore, StateStore
from crank.wire.connection_limits import ConnectionLimits
from crank.wire.protocol import protocol_for
from tests import services
from tests.gateway import upstream
from tests.gateway.test_gateway import publish_demo
from tests.proxy import TCPProxy

pytestmark = pytest.mark.anyio

MCP_HEADERS = {"Accept": "application/json", "Content-Type": "application/json"}


@pytest.fixture
def registry(sqlite_registry: Registry) -> Registry:
    """One SQLite registry (the cluster tests use PostgreSQL)."""
    return sqlite_registry


def redis_stores(redis_url: str, count: int) -> list[StateStore]:
    """`count` replicas' stores: one Redis, one prefix (fresh per test), as every replica of a deployment."""
    prefix = f"t-{uuid.uuid4().hex}:"
    return [RedisStore(redis_url, prefix=prefix) for _ in range(count)]


def replicas(registry: Registry, serve: Callable[..., str], stores: Sequence[StateStore | None]) -> list[str]:
    """A gateway per store (None: its own memory), each on its own port; the agent's URL on each."""
    return [serve(GatewayService(registry, poll_interval=0.05, state=state)) + "/mcp/v1/acme/support"
            for state in stores]  # fmt: skip


def workspace_limited_to(registry: Registry, serve: Callable[..., str], requests_per_minute: int) -> str:
    """The demo agent published in workspace `acme`, whose limits allow that many requests a minute; a key of it."""
    publish_demo(registry, serve(upstream.app))
    registry.put_workspace("acme", "Acme", limits=Limits(rate=RateLimit(calls=requests_per_minute, window=60)))
    return registry.create_api_key("acme")


def rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


async def call(http: httpx.AsyncClient, url: str, key: str, tool: str = "get_user") -> dict[str, Any]:
    """One tools/call over MCP: {"ok": result} or {"error": the structured error}."""
    response = await http.post(url, json=rpc("tools/call", {"name": tool, "arguments": {"id": 2}}),
                               headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"})  # fmt: skip
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    if result["isError"]:
        return {"error": json.loads(result["content"][0]["text"])}
    return {"ok": result["structuredContent"]}


async def calls_spread(urls: list[str], key: str, count: int) -> list[dict[str, Any]]:
    """`count` concurrent calls, sent to the replicas in turn."""
    async with httpx.AsyncClient(timeout=30) as http:
        return await asyncio.gather(*(call(http, urls[i % len(urls)], key) for i in range(count)))


async def test_a_rate_limit_of_n_per_window_lets_exactly_n_through_across_replicas(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    key = registry.create_api_key("acme", limits=Limits(rate=RateLimit(calls=5, window=60)))
    urls = replicas(registry, serve, redis_stores(redis_url, 2))
    answers = await calls_spread(urls, key, 14)
    assert sum("ok" in answer for answer in answers) == 5
    refused = [answer["error"] for answer in answers if "error" in answer]
    assert len(refused) == 9
    for error in refused:
        assert (error["error_code"], error["error_class"], error["recoverable"]) == ("rate_limited", "rate_limit", True)
        assert error["details"]["limit"] == "key_rate" and 1 <= error["details"]["retry_after"] <= 60
        assert f"Wait {error['details']['retry_after']} s" in error["suggested_action"] and error["request_id"]


async def test_a_quota_per_key_holds_across_replicas(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    registry.put_workspace("acme", "Acme", key_limits=Limits(quota=Quota(calls=3, period="day")))
    first, second = registry.create_api_key("acme"), registry.create_api_key("acme")
    urls = replicas(registry, serve, redis_stores(redis_url, 2))
    answers = await calls_spread(urls, first, 8)
    assert sum("ok" in answer for answer in answers) == 3
    details = [answer["error"]["details"] for answer in answers if "error" in answer]
    assert all(d["limit"] == "key_quota" and 1 <= d["retry_after"] <= 86_400 for d in details) and len(details) == 5
    assert sum("ok" in answer for answer in await calls_spread(urls, second, 4)) == 3  # each key its own quota


async def test_an_agent_limit_counts_every_key_and_a_refused_call_is_never_sent(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    registry.edit_agent("acme", "support", lambda spec: {**spec, "limits": {"rate": {"calls": 2, "window": 60}}})
    registry.publish("acme", "support")
    first, second = registry.create_api_key("acme"), registry.create_api_key("acme")
    urls = replicas(registry, serve, redis_stores(redis_url, 2))
    upstream.seen.clear()
    answers = [*await calls_spread(urls, first, 2), *await calls_spread(urls, second, 2)]
    assert ["ok" in answer for answer in answers] == [True, True, False, False]
    assert answers[2]["error"]["details"]["limit"] == "agent_rate"
    assert len([seen for seen in upstream.seen if seen.get("path") == "/users/2"]) == 2  # refused: not sent


async def test_a_call_refused_by_one_limit_consumes_no_other(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    registry.edit_agent("acme", "support", lambda spec: {**spec, "limits": {"rate": {"calls": 3, "window": 60}}})
    registry.publish("acme", "support")
    tight = registry.create_api_key("acme", limits=Limits(rate=RateLimit(calls=1, window=60)))
    other = registry.create_api_key("acme")
    urls = replicas(registry, serve, redis_stores(redis_url, 1))
    # Concurrent calls: which of them wins a slot is not set, how many do is.
    assert sum("ok" in answer for answer in await calls_spread(urls, tight, 4)) == 1
    # The three refusals took nothing of the agent's 3 calls: 2 are left for the other key.
    assert sum("ok" in answer for answer in await calls_spread(urls, other, 3)) == 2


async def test_a_workspace_limit_counts_every_request_before_its_body_is_read(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    key = workspace_limited_to(registry, serve, 3)
    (url,) = replicas(registry, serve, redis_stores(redis_url, 1))
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.post(url, json=rpc("tools/list"), headers=headers)).status_code == 200
        assert (await http.get(url + "/tools", headers=headers)).status_code == 200
        assert (await http.post(url, content=b"not json", headers=headers)).status_code == 400  # counted too
        refused = await http.post(url, content=b"not json", headers=headers)
        plain = await http.get(url + "/tools", headers=headers)
    assert refused.status_code == 429 and plain.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == -32003 and error["data"]["error_code"] == "rate_limited"
    assert refused.headers["retry-after"] == str(error["data"]["details"]["retry_after"])
    assert error["data"]["details"]["limit"] == "workspace_rate" and error["data"]["request_id"]
    assert plain.json()["isError"] and plain.json()["error"]["data"]["details"]["limit"] == "workspace_rate"
    assert 1 <= int(plain.headers["retry-after"]) <= 60


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_each_item_of_a_batch_counts_as_a_request_against_the_workspace_limits(
    registry: Registry, serve: Callable[..., str], redis_url: str, store: str
) -> None:
    key = workspace_limited_to(registry, serve, 5)
    (url,) = replicas(registry, serve, redis_stores(redis_url, 1) if store == "redis" else [None])
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}", "MCP-Protocol-Version": "2025-03-26"}
    batch = [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(1, 8)]
    batch.insert(6, {"jsonrpc": "2.0", "method": "notifications/initialized"})  # refused: no answer at all
    batch.append({"jsonrpc": "2.0", "id": 99, "result": {}})  # a client's response is never answered either
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(url, json=batch, headers=headers)
        after = await http.post(url, json=rpc("tools/list"), headers=headers)
    assert answer.status_code == 200
    by_id = {item["id"]: item for item in answer.json()}
    assert sorted(by_id) == [1, 2, 3, 4, 5, 6, 7]  # the notification and the response got no answer
    assert all("result" in by_id[i] for i in (1, 2, 3, 4, 5))  # the batch's request and four items more
    for i in (6, 7):  # the limit of 5 was used up: never run
        error = by_id[i]["error"]
        assert error["code"] == -32003 and error["data"]["error_code"] == "rate_limited"
        assert error["data"]["details"]["limit"] == "workspace_rate"
    assert after.status_code == 429  # the batch's items were counted


async def test_the_plain_call_answers_a_refused_call_429_with_retry_after(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    key = registry.create_api_key("acme", limits=Limits(rate=RateLimit(calls=1, window=30)))
    (url,) = replicas(registry, serve, redis_stores(redis_url, 1))
    headers = {"Authorization": f"Bearer {key}"}
    body = {"name": "get_user", "arguments": {"id": 2}}
    async with httpx.AsyncClient(timeout=30) as http:
        served = await http.post(url + "/call", json=body, headers=headers)
        refused = await http.post(url + "/call", json=body, headers=headers)
    assert served.status_code == 200 and "retry-after" not in served.headers
    assert refused.status_code == 429 and refused.json()["isError"] is True
    error = refused.json()["error"]
    assert error["error_code"] == "rate_limited" and error["details"]["limit"] == "key_rate"
    assert (
        refused.headers["retry-after"] == str(error["details"]["retry_after"])
        and 1 <= error["details"]["retry_after"] <= 30
    )


async def test_refusals_are_counted_in_the_metrics_by_limit(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    key = registry.create_api_key("acme", limits=Limits(rate=RateLimit(calls=1, window=60)))
    (url,) = replicas(registry, serve, redis_stores(redis_url, 1))
    await calls_spread([url], key, 3)
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(url.removesuffix("/mcp/v1/acme/support") + "/metrics")).text
    assert 'crank_rate_limited_total{agent="support",limit="key_rate",workspace="acme"} 2.0' in metrics


async def test_without_redis_each_process_counts_its_own(registry: Registry, serve: Callable[..., str]) -> None:
    publish_demo(registry, serve(upstream.app))
    key = registry.create_api_key("acme", limits=Limits(rate=RateLimit(calls=2, window=60)))
    urls = replicas(registry, serve, [None, None])  # the in-process default: one count per process
    answers = await calls_spread(urls, key, 8)
    assert sum("ok" in answer for answer in answers) == 4


async def test_limits_set_in_the_catalog_file_are_held(
    registry: Registry, serve: Callable[..., str], redis_url: str, tmp_path: Path
) -> None:
    base = serve(upstream.app)
    (tmp_path / "catalog.yaml").write_text(f"""
workspace:
  slug: acme
  name: Acme
  limits: {{rate: {{calls: 100, window: 1}}, quota: {{calls: 100000, period: month}}}}
  key_limits: {{quota: {{calls: 2, period: hour}}}}
operations:
  get_user:
    protocol: http
    target: {{method: GET, url: "{base}/users/{{id}}"}}
    input_schema: {{type: object, properties: {{id: {{type: integer}}}}, required: [id]}}
agents:
  support:
    bindings: [{{operation: get_user}}]
    limits: {{rate: {{calls: 50, window: 10}}}}
""")
    apply_catalog(registry, load_catalog_file(tmp_path / "catalog.yaml"))
    assert registry.workspace("acme")["limits"] == {"rate": {"calls": 100, "window": 1.0},
                                                     "quota": {"calls": 100000, "period": "month"}}  # fmt: skip
    assert registry.published()[0].runtime.agent.limits == Limits(rate=RateLimit(calls=50, window=10))
    key = registry.create_api_key("acme")
    urls = replicas(registry, serve, redis_stores(redis_url, 2))
    answers = await calls_spread(urls, key, 5)
    assert sum("ok" in answer for answer in answers) == 2
    assert {answer["error"]["details"]["limit"] for answer in answers if "error" in answer} == {"key_quota"}


async def test_while_redis_is_away_limited_requests_and_calls_are_refused_never_let_through_uncounted(
    registry: Registry, serve: Callable[..., str]
) -> None:
    workspace_key = workspace_limited_to(registry, serve, 100)
    away = RedisStore(f"redis://127.0.0.1:{services.free_port()}/0", timeout=1)  # nothing listens there
    url = replicas(registry, serve, [away])[0]
    upstream.seen.clear()
    async with httpx.AsyncClient(timeout=30) as http:
        request = await http.post(
            url, json=rpc("tools/list"), headers={**MCP_HEADERS, "Authorization": f"Bearer {workspace_key}"}
        )
    # The workspace's count cannot be taken: 503 with Retry-After, before the body is read.
    assert request.status_code == 503 and request.headers["retry-after"] == "5"
    assert "state store" in request.json()["error"]["message"] and "Traceback" not in request.text
    registry.put_workspace("acme", "Acme")  # no workspace limit: now the key's own
    key = registry.create_api_key("acme", limits=Limits(rate=RateLimit(calls=100, window=60)))
    url = replicas(registry, serve, [away])[0]
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await call(http, url, key)
        plain = await http.post(url + "/call", json={"name": "get_user", "arguments": {"id": 2}},
                                headers={"Authorization": f"Bearer {key}"})  # fmt: skip
    assert answer["error"]["error_code"] == "state_unavailable" and answer["error"]["details"]["retry_after"] == 5
    assert plain.headers["retry-after"] == "5" and plain.json()["isError"] is True
    assert not [seen for seen in upstream.seen if seen.get("path") == "/users/2"]  # never sent uncounted


async def test_a_used_up_limit_refuses_without_asking_redis_again_until_it_resets_or_changes(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    key = workspace_limited_to(registry, serve, 2)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    with TCPProxy(urlsplit(redis_url).port or 6379) as proxy:
        store = RedisStore(f"redis://{services.HOST}:{proxy.port}/0", prefix=f"t-{uuid.uuid4().hex}:", timeout=1)
        (url,) = replicas(registry, serve, [store])
        async with httpx.AsyncClient(timeout=30) as http:
            statuses = [(await http.post(url, json=rpc("tools/list"), headers=headers)).status_code for _ in range(3)]
            assert statuses == [200, 200, 429]  # the third was refused by Redis's count
            proxy.refuse()  # Redis away: only a request that needs it fails now
            refused = await http.post(url, json=rpc("tools/list"), headers=headers)
            assert refused.status_code == 429  # known to be full: refused here, Redis not asked
            assert refused.json()["error"]["data"]["details"]["limit"] == "workspace_rate"
            registry.put_workspace("acme", "Acme", limits=Limits(rate=RateLimit(calls=5, window=60)))
            with anyio.fail_after(30):  # the replica hears of the raised limit, which Redis must count
                while (await http.post(url, json=rpc("tools/list"), headers=headers)).status_code != 503:
                    await anyio.sleep(0.05)
            proxy.forward()


async def test_a_workspace_refusal_labels_its_metric_with_a_published_agent_only(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    # Paths a client makes up must not grow the metrics: one series for every agent that does not exist.
    key = workspace_limited_to(registry, serve, 1)
    (url,) = replicas(registry, serve, redis_stores(redis_url, 1))
    root = url.removesuffix("/mcp/v1/acme/support")
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        statuses = [(await http.post(f"{root}/mcp/v1/acme/made-up-{n}", json=rpc("tools/list"), headers=headers))
                    .status_code for n in range(6)]  # fmt: skip
        metrics = (await http.get(root + "/metrics")).text
    assert statuses[1:] == [429] * 5
    assert 'crank_rate_limited_total{agent="-",limit="workspace_rate",workspace="acme"} 5.0' in metrics
    assert "made-up" not in metrics


async def test_a_workspace_count_the_memory_store_has_no_room_for_is_503_not_a_crash(
    registry: Registry, serve: Callable[..., str]
) -> None:
    key = workspace_limited_to(registry, serve, 100)
    full = MemoryStore(max_items=1)
    await full.add("someone-else's-record", {"n": 1}, ttl=60)
    (url,) = replicas(registry, serve, [full])
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(url, json=rpc("tools/list"), headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5" and "Traceback" not in answer.text


async def test_a_shorter_window_starts_a_count_of_its_own(
    registry: Registry, serve: Callable[..., str], redis_url: str
) -> None:
    # A limit set to a day by mistake, then corrected to a second, must not wait out the day's count.
    publish_demo(registry, serve(upstream.app))
    info, key = registry.issue_api_key("acme", limits=Limits(rate=RateLimit(calls=1, window=86_400)))
    prefix = f"t-{uuid.uuid4().hex}:"  # one Redis, one prefix: the second replica sees the first one's counts
    (url,) = replicas(registry, serve, [RedisStore(redis_url, prefix=prefix)])
    assert [sum("ok" in a for a in await calls_spread([url], key, 2))] == [1]
    registry.set_api_key_limits("acme", info.id, Limits(rate=RateLimit(calls=1, window=1)))
    # A replica that loaded the new limit (a store of its own: a Redis client belongs to one event loop).
    (url,) = replicas(registry, serve, [RedisStore(redis_url, prefix=prefix)])
    assert ["ok" in answer for answer in await calls_spread([url], key, 1)] == [True]


def test_quota_periods_are_utc_calendar_periods_and_the_one_kept_moves_on_when_it_ends() -> None:
    from crank.gateway.limits import _period  # the rule's owner; the current period is kept between calls

    last_second = datetime.datetime(2026, 1, 31, 23, 59, 59, tzinfo=datetime.UTC).timestamp()
    assert _period("month", last_second) == ("2026-01", 1.0)
    assert _period("day", last_second) == ("2026-01-31", 1.0)
    assert _period("hour", last_second) == ("2026-01-31T23", 1.0)
    assert _period("month", last_second + 1) == ("2026-02", 28 * 86_400.0)  # February 2026 has 28 days
    assert _period("day", last_second + 1) == ("2026-02-01", 86_400.0)
    assert _period("hour", last_second - 3600) == ("2026-01-31T22", 1.0)  # an earlier time: recomputed


class Counted:
    """An ASGI app with a count of the HTTP requests that reached it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.requests += scope["type"] == "http"
        await self.app(scope, receive, send)


def served_with_early_answers(registry: Registry, serve: Callable[..., str]) -> tuple[Counted, str]:
    """A gateway served by `crank serve`'s HTTP protocol with its early answers; the agent's URL."""
    gateway = GatewayService(registry, poll_interval=0.05)
    counted = Counted(gateway)
    url = serve(counted, http=protocol_for(ConnectionLimits(), gateway.answer_early, gateway.answers_early_now))
    return counted, url + "/mcp/v1/acme/support"


async def test_a_tenant_over_its_plan_is_answered_by_the_protocol_as_the_app_answers_without_the_app(
    registry: Registry, serve: Callable[..., str]
) -> None:
    key = workspace_limited_to(registry, serve, 2)
    counted, url = served_with_early_answers(registry, serve)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        first = [await http.post(url, json=rpc("tools/list"), headers=headers) for _ in range(3)]
        assert [answer.status_code for answer in first] == [200, 200, 429]  # the store said the count is full
        assert counted.requests == 3
        later = [
            await http.post(url, content=b"x" * 5000, headers=headers),
            await http.get(url + "/tools", headers=headers),
        ]
        metrics = (await http.get(url.removesuffix("/mcp/v1/acme/support") + "/metrics")).text
    assert counted.requests == 4  # the metrics only: the two refusals never reached the app
    app, early = first[2], later[0]
    assert early.status_code == 429 and early.headers["retry-after"] == app.headers["retry-after"]
    assert early.headers["content-type"] == app.headers["content-type"] == "application/json"
    app_error, early_error = app.json()["error"], early.json()["error"]
    assert early_error["data"].pop("request_id") != app_error["data"].pop("request_id")
    assert early_error == app_error and early_error["data"]["error_code"] == "rate_limited"
    plain = later[1].json()  # the plain pair's shape, as the app answers it
    assert later[1].status_code == 429 and plain["isError"] and plain["error"]["data"]["error_code"] == "rate_limited"
    assert 'crank_rate_limited_total{agent="support",limit="workspace_rate",workspace="acme"} 3.0' in metrics


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Authorization": "Bearer crk_wrong"}, 401),
        ({"Host": "evil.example.net"}, 421),
        ({"Origin": "https://evil.example.net"}, 403),
        ({"Content-Length": str(5 * 1024 * 1024)}, 413),
    ],
    ids=["wrong-key", "host", "origin", "too-large"],
)
async def test_what_the_app_answers_before_the_limit_is_still_the_apps_answer(
    registry: Registry, serve: Callable[..., str], headers: dict[str, str], status: int
) -> None:
    # With the tenant's limit known to be used up, a request the app refuses earlier is still refused by it.
    key = workspace_limited_to(registry, serve, 1)
    counted, url = served_with_early_answers(registry, serve)
    mine = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(timeout=30) as http:
        assert [(await http.post(url, json=rpc("tools/list"), headers=mine)).status_code for _ in range(2)] == [
            200,
            429,
        ]
        if "Content-Length" in headers:  # the head alone: a body over the limit is never read (nor drained whole)
            answered = await anyio.to_thread.run_sync(_status_of_head, url, {**mine, **headers})
        else:
            answered = (await http.post(url, content=b"{}", headers={**mine, **headers})).status_code
    assert answered == status and counted.requests == 3


def _status_of_head(url: str, headers: dict[str, str]) -> int:
    """The status of the answer to a POST whose head alone is sent (its body declared, never sent)."""
    import socket

    parts = urlsplit(url)
    head = [f"POST {parts.path} HTTP/1.1", f"Host: {parts.netloc}", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        return int(sock.recv(65536).split(b" ", 2)[1])
