"""Seed 004's guarantees against real upstreams on loopback that count what they receive: idempotency
(at most one effect per key), two-step confirmation of destructive calls, and one error code per failure."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import check_runtime
from crank.exceptions import IdempotencyError
from crank.gateway.client import UpstreamClient
from crank.gateway.operation import Placement, RemoteOperation
from crank.gateway.safety import CONFIRMATION_ARGUMENT, CONFIRMATION_SENTENCE, Idempotency, fingerprint
from crank.registry import Registry, tool_from_spec
from crank.registry.runtime import ConfirmationConfig, ExecutionConfig
from crank.server import GatewayService
from crank.sources.agents import build_catalog
from crank.state import MemoryStore, RedisStore, StateStore
from tests import services
from tests.proxy import TCPProxy

pytestmark = pytest.mark.anyio
CHECK_CLIENT = UpstreamClient()  # builds catalogs; never sends a request


class Upstream:
    """Counts every request it gets; `/flaky` fails once with 503, `/slow` and `/hang` take their time."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.flaky_calls = 0
        self.app = Starlette(routes=[
            Route("/records", self.create, methods=["POST"]),
            Route("/records/{id}", self.delete, methods=["DELETE"]),
            Route("/flaky", self.flaky, methods=["POST"]),
            Route("/slow", self.slow, methods=["POST"]),
            Route("/hang", self.hang), Route("/busy", self.busy), Route("/down", self.down),
        ])  # fmt: skip

    async def create(self, request: Request) -> Response:
        record = {"body": await request.json(), "key": request.headers.get("idempotency-key")}
        self.created.append(record)
        return JSONResponse({"id": len(self.created), **record["body"]}, status_code=201)

    async def delete(self, request: Request) -> Response:
        self.deleted.append(request.path_params["id"])
        return JSONResponse({"deleted": request.path_params["id"]})

    async def flaky(self, request: Request) -> Response:
        self.flaky_calls += 1
        if self.flaky_calls == 1:
            return JSONResponse({"message": "try later"}, status_code=503)
        return JSONResponse({"ok": True, "attempt": self.flaky_calls})

    async def slow(self, request: Request) -> Response:
        self.created.append({"slow": True})
        await asyncio.sleep(0.5)
        return JSONResponse({"ok": True})

    async def hang(self, request: Request) -> Response:
        await asyncio.sleep(3)
        return JSONResponse({})

    async def busy(self, request: Request) -> Response:
        return JSONResponse({"error": "slow down"}, status_code=429, headers={"Retry-After": "3"})

    async def down(self, request: Request) -> Response:
        return JSONResponse({"detail": "maintenance"}, status_code=503)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{services.free_port()}"


def operations(base: str) -> dict[str, dict[str, Any]]:
    key = {"type": "string", "description": "A new unique id per intended record."}
    record = {"type": "object", "properties": {"name": {"type": "string"}, "request_id": key}, "required": ["name"]}
    idempotency = {"idempotency": {"argument": "request_id"}}
    by_id = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    empty = {"type": "object"}
    return {
        "create_record": {"protocol": "http", "target": {"method": "POST", "url": base + "/records"},
                          "description": "Creates a record.", "input_schema": record, "execution_config": idempotency},
        "delete_record": {"protocol": "http", "target": {"method": "DELETE", "url": base + "/records/{id}"},
                          "description": "Deletes a record.", "input_schema": by_id,
                          "execution_config": {"confirmation_ttl": 0.3}},
        "flaky": {"protocol": "http", "target": {"method": "POST", "url": base + "/flaky"}, "input_schema": record,
                  "execution_config": idempotency},
        "slow": {"protocol": "http", "target": {"method": "POST", "url": base + "/slow"}, "input_schema": record,
                 "execution_config": idempotency},
        "slow_timeout": {"protocol": "http", "target": {"method": "POST", "url": base + "/slow"},
                         "input_schema": record, "execution_config": {**idempotency, "timeout": 0.2}},
        "hang": {"protocol": "http", "target": {"url": base + "/hang"}, "input_schema": empty,
                 "execution_config": {"timeout": 0.3}},
        "busy": {"protocol": "http", "target": {"url": base + "/busy"}, "input_schema": empty},
        "down": {"protocol": "http", "target": {"url": base + "/down"}, "input_schema": empty},
        "refused": {"protocol": "http", "target": {"url": closed_port_url() + "/x"}, "input_schema": empty},
    }  # fmt: skip


def publish(registry: Registry, base: str) -> None:
    registry.create_workspace("acme", "Acme")
    for name, spec in operations(base).items():
        registry.put_operation("acme", name, spec)
    bindings = [{"operation": name} for name in operations(base)]
    registry.put_agent("acme", "desk", {"bindings": bindings})
    registry.put_agent("acme", "other", {"bindings": [{"operation": "delete_record"}]})
    for agent in ("desk", "other"):
        registry.publish("acme", agent, check=check_runtime)


class Caller:
    def __init__(self, root: str, client: httpx.AsyncClient) -> None:
        self.root, self.client = root, client

    async def __call__(self, tool: str, arguments: dict[str, Any], agent: str = "desk") -> dict[str, Any]:
        url = f"{self.root}/mcp/v1/acme/{agent}/call"
        result = (await self.client.post(url, json={"name": tool, "arguments": arguments})).json()
        text = result["content"][0]["text"]
        return {"error": json.loads(text)} if result.get("isError") else {"value": result.get("structuredContent")}


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
async def call(registry: Registry, serve: Callable[..., str], upstream: Upstream) -> AsyncIterator[Caller]:
    publish(registry, serve(upstream.app))
    root = serve(GatewayService(registry, require_api_keys=False))
    async with httpx.AsyncClient(timeout=10) as client:
        yield Caller(root, client)


async def test_a_retried_post_creates_one_record(call: Caller, upstream: Upstream) -> None:
    arguments = {"name": "invoice", "request_id": "r-1"}
    first = await call("create_record", arguments)
    again = await call("create_record", arguments)
    assert first == again == {"value": {"id": 1, "name": "invoice"}}
    assert upstream.created == [{"body": {"name": "invoice"}, "key": "r-1"}]  # the key went in its header only


async def test_a_first_attempt_that_may_have_acted_keeps_its_key(call: Caller, upstream: Upstream) -> None:
    arguments = {"name": "x", "request_id": "r-5"}
    assert (await call("slow_timeout", arguments))["error"]["error_code"] == "upstream_timeout"
    repeat = await call("slow_timeout", arguments)
    assert repeat["error"]["error_code"] == "idempotency_outcome_unknown"
    assert "read it back" in repeat["error"]["suggested_action"]
    await asyncio.sleep(0.5)  # the first request reached the upstream, which acted on it; the repeat did not
    assert upstream.created == [{"slow": True}]


async def test_the_same_key_with_other_arguments_is_refused(call: Caller, upstream: Upstream) -> None:
    await call("create_record", {"name": "a", "request_id": "r-2"})
    reused = await call("create_record", {"name": "b", "request_id": "r-2"})
    assert reused["error"]["error_code"] == "idempotency_key_reused"
    assert reused["error"]["error_class"] == "idempotency" and len(upstream.created) == 1


async def test_a_repeat_while_the_first_runs_is_in_progress(call: Caller, upstream: Upstream) -> None:
    arguments = {"name": "x", "request_id": "r-3"}
    first, second = await asyncio.gather(call("slow", arguments), call("slow", arguments))
    codes = sorted(str(result.get("error", {}).get("error_code")) for result in (first, second))
    assert codes == ["None", "idempotency_in_progress"] and len(upstream.created) == 1
    assert await call("slow", arguments) == {"value": {"ok": True}} and len(upstream.created) == 1


async def test_a_failed_first_attempt_is_not_stored(call: Caller, upstream: Upstream) -> None:
    arguments = {"name": "x", "request_id": "r-4"}
    assert (await call("flaky", arguments))["error"]["error_code"] == "upstream_unavailable"
    assert await call("flaky", arguments) == {"value": {"ok": True, "attempt": 2}}
    assert await call("flaky", arguments) == {"value": {"ok": True, "attempt": 2}}
    assert upstream.flaky_calls == 2


async def test_a_delete_runs_only_after_confirmation(call: Caller, upstream: Upstream) -> None:
    first = await call("delete_record", {"id": "7"})
    assert first["error"]["error_code"] == "confirmation_required" and upstream.deleted == []
    token = first["error"]["details"]["confirmation_token"]
    assert CONFIRMATION_ARGUMENT in first["error"]["message"] and token in first["error"]["message"]
    assert await call("delete_record", {"id": "7", CONFIRMATION_ARGUMENT: token}) == {"value": {"deleted": "7"}}
    assert upstream.deleted == ["7"]


@pytest.mark.parametrize("misuse", ["used", "other_agent", "other_arguments", "expired", "forged"])
async def test_a_token_never_works_out_of_place(call: Caller, upstream: Upstream, misuse: str) -> None:
    token = (await call("delete_record", {"id": "7"}))["error"]["details"]["confirmation_token"]
    arguments, agent = {"id": "7", CONFIRMATION_ARGUMENT: token}, "desk"
    if misuse == "used":
        await call("delete_record", arguments)
        upstream.deleted.clear()
    elif misuse == "other_agent":
        agent = "other"
    elif misuse == "other_arguments":
        arguments["id"] = "8"
    elif misuse == "expired":
        await asyncio.sleep(0.4)  # confirmation_ttl is 0.3 s
    else:
        arguments[CONFIRMATION_ARGUMENT] = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    refused = await call("delete_record", arguments, agent=agent)
    assert refused["error"]["error_code"] == "confirmation_invalid" and upstream.deleted == []
    assert refused["error"]["error_class"] == "confirmation"


def test_the_confirmation_step_is_described_and_counted(registry: Registry) -> None:
    publish(registry, "http://upstream.test")
    runtime = registry.draft_runtime("acme", "other")
    with_step = build_catalog(runtime, CHECK_CLIENT)
    (entry,) = with_step.tool_entries("en")
    assert entry["description"].endswith(CONFIRMATION_SENTENCE)
    assert CONFIRMATION_ARGUMENT in entry["inputSchema"]["properties"]
    (tool,) = runtime.tools
    unconfirmed = ExecutionConfig(confirmation=ConfirmationConfig(required=False))
    tools = (tool.model_copy(update={"execution_config": unconfirmed}),)
    without = build_catalog(runtime.model_copy(update={"tools": tools}), CHECK_CLIENT)
    assert with_step.token_estimate > without.token_estimate
    assert "description" not in without.tool_entries("en")[0] or CONFIRMATION_SENTENCE not in str(
        without.tool_entries("en")
    )


@pytest.mark.parametrize(
    ("tool", "code", "fragment"),
    [
        ("busy", "upstream_rate_limited", "Wait 3 s"),
        ("down", "upstream_unavailable", "HTTP 503"),
        ("refused", "upstream_unavailable", "cannot be reached"),
        ("hang", "upstream_timeout", "0.3 s"),
    ],
)
async def test_each_upstream_failure_has_its_code(call: Caller, tool: str, code: str, fragment: str) -> None:
    error = (await call(tool, {}))["error"]
    assert error["error_code"] == code and fragment in json.dumps(error)
    assert error["recoverable"] is True and error["suggested_action"] and len(error["request_id"]) == 32


async def test_replicas_share_tokens_and_keys_through_redis(
    registry: Registry, serve: Callable[..., str], upstream: Upstream, redis_url: str
) -> None:
    publish(registry, serve(upstream.app))
    prefix = f"crank-test-{uuid.uuid4().hex}:"
    stores: list[StateStore] = [RedisStore(redis_url, prefix=prefix) for _ in range(2)]
    roots = [serve(GatewayService(registry, require_api_keys=False, state=store)) for store in stores]
    async with httpx.AsyncClient(timeout=10) as client:
        one, two = Caller(roots[0], client), Caller(roots[1], client)
        token = (await one("delete_record", {"id": "9"}))["error"]["details"]["confirmation_token"]
        assert await two("delete_record", {"id": "9", CONFIRMATION_ARGUMENT: token}) == {"value": {"deleted": "9"}}
        reused = await one("delete_record", {"id": "9", CONFIRMATION_ARGUMENT: token})
        assert reused["error"]["error_code"] == "confirmation_invalid"
        arguments = {"name": "shared", "request_id": "r-9"}
        assert await one("create_record", arguments) == await two("create_record", arguments)
    assert upstream.deleted == ["9"] and len(upstream.created) == 1


async def test_a_call_that_outlived_its_claim_leaves_the_next_claim_alone() -> None:
    from crank.exceptions import MappingError

    state = MemoryStore()
    # A claim lasts the window (and at least the call's own time limit): here both are 50 ms.
    idempotency = Idempotency("request_id", "Idempotency-Key", window=0.05, scope="acme/op")
    arguments = {"request_id": "r-1"}
    first_started, release_first = asyncio.Event(), asyncio.Event()

    async def slow_failure() -> dict[str, Any]:
        first_started.set()
        await release_first.wait()
        raise MappingError("nothing was sent")  # would free the key, were it still ours

    async def second() -> dict[str, Any]:
        await asyncio.sleep(0.3)
        return {"value": 2, "omitted": 0}

    first = asyncio.create_task(idempotency.run(state, arguments, 0.05, slow_failure))  # claim lasts 50 ms
    await first_started.wait()
    await asyncio.sleep(0.1)  # the first claim expired; a second call claims the key
    running = asyncio.create_task(idempotency.run(state, arguments, 5, second))  # claims for 5 s
    await asyncio.sleep(0.05)
    release_first.set()
    with pytest.raises(MappingError):
        await first
    record = await state.get(f"idem:acme/op:{fingerprint('r-1')}")
    assert record is not None and record["state"] == "running"  # the second caller's claim survived
    assert await running == {"value": 2, "omitted": 0}


def state_of(backend: str, request: pytest.FixtureRequest) -> StateStore:
    if backend == "memory":
        return MemoryStore()
    return RedisStore(request.getfixturevalue("redis_url"), prefix=f"t-{uuid.uuid4().hex}:")


async def effect_once(calls: list[int], until: asyncio.Event | None = None) -> dict[str, Any]:
    calls.append(1)
    if until is not None:
        await until.wait()
    return {"value": len(calls), "omitted": 0}


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_claim_whose_owner_stopped_renewing_is_outcome_unknown(
    backend: str, request: pytest.FixtureRequest
) -> None:
    state = state_of(backend, request)
    idempotency = Idempotency("request_id", "Idempotency-Key", window=60, scope="acme/op")
    arguments = {"request_id": "r-1"}
    # What a replica that died mid-call leaves behind: its claim, and a lease nobody renews any more.
    key = f"idem:acme/op:{fingerprint('r-1')}"
    dead = {"state": "running", "arguments": fingerprint(arguments), "claim": "dead-replica"}
    assert await state.claim(key, dead, ttl=60, lease=0.1)
    calls: list[int] = []
    with pytest.raises(IdempotencyError) as in_progress:
        await idempotency.run(state, arguments, 5, lambda: effect_once(calls))
    assert in_progress.value.error_code == "idempotency_in_progress"
    await asyncio.sleep(0.3)
    with pytest.raises(IdempotencyError) as unknown:
        await idempotency.run(state, arguments, 5, lambda: effect_once(calls))
    assert unknown.value.error_code == "idempotency_outcome_unknown" and "interrupted" in unknown.value.message
    assert calls == []
    await state.aclose()


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_call_longer_than_its_lease_stays_in_progress_while_its_owner_renews_it(
    backend: str, request: pytest.FixtureRequest
) -> None:
    state = state_of(backend, request)
    idempotency = Idempotency("request_id", "Idempotency-Key", window=60, scope="acme/op", lease=0.3)
    arguments, calls, release = {"request_id": "r-1"}, [], asyncio.Event()
    first = asyncio.create_task(idempotency.run(state, arguments, 5, lambda: effect_once(calls, release)))
    await asyncio.sleep(1)  # three leases long: only the owner's heartbeats keep its claim in progress
    with pytest.raises(IdempotencyError) as repeat:
        await idempotency.run(state, arguments, 5, lambda: effect_once(calls))
    assert repeat.value.error_code == "idempotency_in_progress"
    release.set()
    assert await first == await idempotency.run(state, arguments, 5, lambda: effect_once(calls))
    assert calls == [1]
    await state.aclose()


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_an_owner_that_stalled_past_its_lease_still_records_its_outcome(
    backend: str, request: pytest.FixtureRequest
) -> None:
    state = state_of(backend, request)
    idempotency = Idempotency("request_id", "Idempotency-Key", window=60, scope="acme/op", lease=0.2)
    arguments, calls, resumed, release = {"request_id": "r-1"}, [], asyncio.Event(), asyncio.Event()

    async def stalls() -> dict[str, Any]:
        time.sleep(0.5)  # the event loop stalls: no heartbeat gets out, and the lease lapses
        resumed.set()
        return await effect_once(calls, release)

    first = asyncio.create_task(idempotency.run(state, arguments, 5, stalls))
    await resumed.wait()
    await asyncio.sleep(0.1)  # the owner's next heartbeat finds its lease lapsed, and leaves it so
    with pytest.raises(IdempotencyError) as repeat:
        await idempotency.run(state, arguments, 5, lambda: effect_once(calls))
    assert repeat.value.error_code == "idempotency_outcome_unknown"
    release.set()
    assert await first == {"value": 1, "omitted": 0}  # the slow owner still writes its outcome: repeats get it
    assert await idempotency.run(state, arguments, 5, lambda: effect_once(calls)) == {"value": 1, "omitted": 0}
    assert calls == [1]
    await state.aclose()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[TCPProxy]:
    host, _, port = redis_url.removeprefix("redis://").partition("/")[0].rpartition(":")
    with TCPProxy(int(port), target_host=host) as proxy:
        yield proxy


async def test_a_redis_that_stops_answering_never_holds_back_the_upstreams_answer(
    redis_proxy: TCPProxy, serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    requests: list[str] = []

    async def create(request: Request) -> Response:
        requests.append(request.headers["idempotency-key"])
        redis_proxy.black_hole()  # claimed, acted upon: now Redis answers nothing, not even an error
        return JSONResponse({"id": 1}, status_code=201)

    base = serve(Starlette(routes=[Route("/records", create, methods=["POST"])]))
    spec = {"tool_name": "create_record", "protocol": "http", "target": {"method": "POST", "url": base + "/records"},
            "input_schema": {"type": "object", "properties": {"request_id": {"type": "string"}}},
            "execution_config": {"idempotency": {"argument": "request_id"}}}  # fmt: skip
    state = RedisStore(f"redis://127.0.0.1:{redis_proxy.port}/0", prefix=f"t-{uuid.uuid4().hex}:", timeout=0.5)
    client = UpstreamClient()
    remote = RemoteOperation(tool_from_spec(spec), client, state=state, placement=Placement("acme", "desk", 1))
    try:
        # Generous: the store's timeout is 0.5 s; without one, the outcome write waits for good.
        outcome = await asyncio.wait_for(remote.call({"request_id": "r-1"}), 30)
        assert outcome.value == {"id": 1} and requests == ["r-1"]
        assert any("could not record an idempotency outcome" in record.message for record in caplog.records)
    finally:
        redis_proxy.forward()
        await client.aclose()
        await state.aclose()


async def test_renewals_that_fail_while_the_store_is_down_are_logged_once(
    redis_proxy: TCPProxy, caplog: pytest.LogCaptureFixture
) -> None:
    state = RedisStore(f"redis://127.0.0.1:{redis_proxy.port}/0", prefix=f"t-{uuid.uuid4().hex}:", timeout=0.5)
    idempotency = Idempotency("request_id", "Idempotency-Key", window=60, scope="acme/op", lease=0.3)
    calls: list[int] = []
    release = asyncio.Event()
    runs = [
        asyncio.create_task(idempotency.run(state, {"request_id": f"r-{n}"}, 5, lambda: effect_once(calls, release)))
        for n in range(5)
    ]
    while len(calls) < 5:  # every call claimed its key and is running
        await asyncio.sleep(0.01)
    redis_proxy.refuse()
    await asyncio.sleep(1)  # about three heartbeats for each of the five calls, each failing
    release.set()
    assert len(await asyncio.gather(*runs)) == 5
    lines = [record for record in caplog.records if record.message.startswith("could not renew")]
    assert len(lines) == 1, [record.message for record in lines]
    redis_proxy.forward()
    await state.aclose()


async def test_a_call_shorter_than_a_heartbeat_starts_no_task() -> None:
    state = MemoryStore()
    idempotency = Idempotency("request_id", "Idempotency-Key", window=60, scope="acme/op")
    before = len(asyncio.all_tasks())
    during: list[int] = []

    async def quick() -> dict[str, Any]:
        during.append(len(asyncio.all_tasks()))
        return {"value": 1, "omitted": 0}

    assert await idempotency.run(state, {"request_id": "r-1"}, 5, quick) == {"value": 1, "omitted": 0}
    assert during == [before]


async def test_while_redis_is_away_idempotent_and_destructive_calls_are_refused_before_anything_is_sent(
    registry: Registry, serve: Callable[..., str], upstream: Upstream
) -> None:
    publish(registry, serve(upstream.app))
    away = RedisStore(f"redis://127.0.0.1:{services.free_port()}/0", timeout=1)  # nothing listens there
    root = serve(GatewayService(registry, require_api_keys=False, state=away))
    async with httpx.AsyncClient(timeout=30) as client:
        call = Caller(root, client)
        created = await call("create_record", {"name": "x", "request_id": "r-away"})
        deleted = await call("delete_record", {"id": "9"})
    for answer in (created, deleted):
        error = answer["error"]
        assert (error["error_code"], error["error_class"], error["recoverable"]) == ("state_unavailable", "state", True)
        assert error["details"] == {"retry_after": 5} and "Traceback" not in json.dumps(error)
    assert upstream.created == [] and upstream.deleted == []  # neither ran unrecorded


async def test_an_idempotency_key_is_the_callers_own() -> None:
    """Two callers (`Principal.id`) with the same key: two calls, and neither replays the other's answer."""
    from crank.state import MemoryStore

    idempotency = Idempotency("request_id", "Idempotency-Key", 60, "acme/create")
    state = MemoryStore()
    runs: list[str] = []

    def call(who: str) -> Callable[[], Any]:
        async def once() -> dict[str, Any]:
            runs.append(who)
            return {"value": who}

        return once

    arguments = {"name": "x", "request_id": "same-key"}
    assert await idempotency.run(state, arguments, 5, call("alice"), "issuer#alice") == {"value": "alice"}
    assert await idempotency.run(state, arguments, 5, call("bob"), "issuer#bob") == {"value": "bob"}
    assert await idempotency.run(state, arguments, 5, call("alice"), "issuer#alice") == {"value": "alice"}
    assert runs == ["alice", "bob"]  # alice's repeat was deduplicated; bob's call was his own
