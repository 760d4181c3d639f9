"""Gateway target: Crank's `GatewayService` serving the published agent `bench/agent` at /mcp/v1/bench/agent.

`bench/run.py` first runs `python -m bench.apps.gateway_crank DB_PATH` (with `BENCH_UPSTREAM` set) to
create the registry: workspace `bench`, one operation per tool of `gateway_catalog` (GET to the
upstream, with input and output schemas), agent `agent` binding all 1,000, published, plus one
workspace API key, printed on stdout; agent `discovery` binds the same operations in discovery mode.
The app then opens that SQLite file (`BENCH_GATEWAY_DB`).
`BENCH_GATEWAY_KEYS=1` serves it as deployed by default (every request needs the key,
`Authorization: Bearer ...`); `0` passes `require_api_keys=False`. `BENCH_GATEWAY_AUDIT=1` turns the audit trail
on (every call recorded in the registry; off by default, as in `GatewayService`). Everything else is
`GatewayService`'s default, including its own pooled `UpstreamClient` for the upstream.

`BENCH_GATEWAY_LIMITS=key` (or `all`) serves a copy of that registry whose workspace gives every key a rate
limit and a quota (`all`: the workspace's own too, on every request) far above what a run can reach, counted
in the Redis at `BENCH_REDIS_URL`: every call pays for the check (docs/gateway.md, Rate limits and quotas)
and none is refused.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from typing import Any

from bench.apps import serve_gateway
from bench.apps.gateway_catalog import (
    DESCRIPTION,
    INPUT_SCHEMA,
    N_TOOLS,
    OUTPUT_SCHEMA,
    SMALL_TOOLS,
    tool_name,
    tool_path,
)
from crank.admin.actions import check_runtime
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import LOOPBACK, EgressPolicy
from crank.registry import Registry, migrate, open_engine
from crank.registry.runtime import Limits, Quota, RateLimit
from crank.server import GatewayService
from crank.state import RedisStore, StateStore

WORKSPACE, AGENT, DISCOVERY_AGENT, SMALL_AGENT = "bench", "agent", "discovery", "small"
PATH = f"/mcp/v1/{WORKSPACE}/{AGENT}"
LOOPBACK_EGRESS = EgressPolicy(LOOPBACK)  # the bench's upstream runs on loopback, which the default refuses


def setup(db_path: str, upstream: str) -> str:
    """Create and publish the 1,000-tool agent in a new SQLite registry; returns a workspace API key."""
    engine = open_engine(f"sqlite:///{db_path}")
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace(WORKSPACE, "Bench")
    for i in range(N_TOOLS):
        registry.put_operation(
            WORKSPACE,
            tool_name(i),
            {
                "protocol": "http",
                "target": {"method": "GET", "url": upstream.rstrip("/") + tool_path(i)},
                "description": DESCRIPTION,
                "input_schema": INPUT_SCHEMA,
                "output_schema": OUTPUT_SCHEMA,
            },
        )
    bindings: list[dict[str, Any]] = [{"operation": tool_name(i)} for i in range(N_TOOLS)]
    # `get_item` is a resource template too: crank://bench/agent/get_item/{id} (bench/count_gateway.py read)
    registry.put_agent(WORKSPACE, AGENT, {"bindings": [{**bindings[0], "resource": True}, *bindings[1:]]})
    registry.publish(WORKSPACE, AGENT, check=check_runtime)
    # The same operations in discovery mode (bench/wrk/discovery_call.lua calls through `call_operation`).
    registry.put_agent(WORKSPACE, DISCOVERY_AGENT, {"bindings": bindings, "mode": "discovery"})
    registry.publish(WORKSPACE, DISCOVERY_AGENT, check=check_runtime)
    # The first two operations alone (bench/wrk/gateway_list_small.lua lists them).
    registry.put_agent(WORKSPACE, SMALL_AGENT, {"bindings": bindings[:SMALL_TOOLS]})
    registry.publish(WORKSPACE, SMALL_AGENT, check=check_runtime)
    key = registry.create_api_key(WORKSPACE)
    engine.dispose()
    return key


# Never reached in a run: the check is paid on every call, and nothing is refused.
UNREACHED = Limits(rate=RateLimit(calls=1_000_000_000, window=60), quota=Quota(calls=1_000_000_000_000, period="month"))


def limited_registry(db_path: str, which: str) -> str:
    """A copy of the registry whose workspace sets `key_limits` (and, for `all`, its own `limits`)."""
    copy = f"{db_path}.limited-{which}"
    shutil.copyfile(db_path, copy)
    engine = open_engine(f"sqlite:///{copy}")
    Registry(engine).put_workspace(WORKSPACE, "Bench", limits=UNREACHED if which == "all" else None,
                                   key_limits=UNREACHED)  # fmt: skip
    engine.dispose()
    return copy


def make_app() -> GatewayService:
    db_path = os.environ["BENCH_GATEWAY_DB"]
    limits = os.environ.get("BENCH_GATEWAY_LIMITS")
    state: StateStore | None = None
    if limits:
        db_path = limited_registry(db_path, limits)
        state = RedisStore(os.environ["BENCH_REDIS_URL"], prefix=f"bench-{uuid.uuid4().hex}:")
    registry = Registry(open_engine(f"sqlite:///{db_path}"))
    keys = os.environ.get("BENCH_GATEWAY_KEYS", "1") == "1"
    audit = os.environ.get("BENCH_GATEWAY_AUDIT", "0") == "1"
    return GatewayService(registry, client=UpstreamClient(egress=LOOPBACK_EGRESS), require_api_keys=keys, state=state,
                          audit=audit)  # fmt: skip


def serve(host: str, port: int) -> None:
    """Serve the app as `crank serve` does: its HTTP protocol with the default connection limits (send timeout,
    refused bodies drained, the connection cap) and the gateway's early answers, uvloop, no access log."""
    serve_gateway(app or make_app(), host, port)


app = make_app() if "BENCH_GATEWAY_DB" in os.environ else None

if __name__ == "__main__":
    if sys.argv[1] == "--serve":  # --serve HOST PORT (bench/run.py's `gateway-crank-serve`)
        serve(sys.argv[2], int(sys.argv[3]))
    else:  # DB_PATH
        print(setup(sys.argv[1], os.environ["BENCH_UPSTREAM"]))
