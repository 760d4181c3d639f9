"""Target of `bench/hostile.py`: one Crank gateway serving two tenants, `honest` and `hostile`.

`python -m bench.apps.gateway_hostile DB_PATH` (with `BENCH_UPSTREAM` set) creates the SQLite registry:
in each workspace, `N_TOOLS` GET operations to the upstream (`get_item` and fillers, the schemas of
`gateway_catalog`), an agent `agent` binding them all, published, and one workspace API key; it prints
`{"honest": key, "hostile": key}`. With `BENCH_LIMITS` (JSON, e.g. `{"hostile": 200}`) a workspace gets the
limits of a plan: that many requests per second (its `limits`) and tool calls per second (its `key_limits`).
The app then opens that file (`BENCH_GATEWAY_DB`) and serves it as
`crank serve` does by default: API keys required, the default limits, its own pooled upstream client;
`python -m bench.apps.gateway_hostile --serve HOST PORT` serves it with `crank serve`'s HTTP protocol too.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from bench.apps import serve_gateway
from bench.apps.gateway_catalog import DESCRIPTION, INPUT_SCHEMA, OUTPUT_SCHEMA, tool_name, tool_path
from crank.admin.actions import check_runtime
from crank.registry import Registry, migrate, open_engine
from crank.registry.runtime import Limits, OAuthPolicy, RateLimit
from crank.server import GatewayService

WORKSPACES = ("honest", "hostile")
AGENT = "agent"
N_TOOLS = 10  # one small tools/list page: wrk grows a response buffer 1 KiB at a time, so long answers stall it


PROMPTS = [{
    "name": "heavy", "arguments": [{"name": "text", "required": True}],
    "messages": [{"text": " ".join(["{{ text|title }}"] * 16)} for _ in range(16)],
}]  # fmt: skip
"""The hostile tenant's prompt: 16 messages of 16 costly filters (as many as a prompt may have)."""


def setup(db_path: str, upstream: str, limits: dict[str, int] | None = None, issuer: str = "") -> dict[str, str]:
    """Create and publish both tenants' agents in a new SQLite registry; returns a key per workspace.
    `limits`: requests and tool calls per second, by workspace (none: no limit). `issuer`: an issuer the hostile
    workspace trusts, with lazy sign-in, and its agent's prompts (bench/hostile.py's token and prompt attacks)."""
    engine = open_engine(f"sqlite:///{db_path}")
    migrate(engine)
    registry = Registry(engine)
    keys = {}
    for workspace in WORKSPACES:
        per_second = (limits or {}).get(workspace)
        plan = Limits(rate=RateLimit(calls=per_second, window=1)) if per_second else None
        registry.put_workspace(workspace, workspace.title(), limits=plan, key_limits=plan)
        for i in range(N_TOOLS):
            spec = {
                "protocol": "http",
                "target": {"method": "GET", "url": upstream.rstrip("/") + tool_path(i)},
                "description": DESCRIPTION,
                "input_schema": INPUT_SCHEMA,
                "output_schema": OUTPUT_SCHEMA,
            }
            registry.put_operation(workspace, tool_name(i), spec)
        agent: dict[str, Any] = {"bindings": [{"operation": tool_name(i)} for i in range(N_TOOLS)]}
        if workspace == "hostile" and issuer:  # an attack through its own issuer, lazy sign-in and prompts
            agent["prompts"] = PROMPTS
            registry.set_workspace_oauth("hostile", OAuthPolicy(issuers=(issuer,), sign_in="calls"))
        registry.put_agent(workspace, AGENT, agent)
        registry.publish(workspace, AGENT, check=check_runtime)
        keys[workspace] = registry.create_api_key(workspace)
    engine.dispose()
    return keys


def make_app() -> GatewayService:
    return GatewayService(Registry(open_engine(f"sqlite:///{os.environ['BENCH_GATEWAY_DB']}")))


def serve(host: str, port: int) -> None:
    """Serve the app as `crank serve` does: its HTTP protocol (uvicorn's httptools protocol with the connection
    limits and the gateway's early answers, `crank.wire.protocol`), uvloop, no access log."""
    serve_gateway(app or make_app(), host, port)


app = make_app() if "BENCH_GATEWAY_DB" in os.environ else None

if __name__ == "__main__":
    if sys.argv[1] == "--serve":  # --serve HOST PORT
        serve(sys.argv[2], int(sys.argv[3]))
    else:  # DB_PATH
        limits = json.loads(os.environ.get("BENCH_LIMITS", "{}"))
        print(json.dumps(setup(sys.argv[1], os.environ["BENCH_UPSTREAM"], limits, os.environ.get("BENCH_ISSUER", ""))))
