#!/usr/bin/env python3
"""Benchmark MCP tools/call and tools/list over loopback: uvicorn targets on one core, wrk on the other.

Two groups of targets: MCP servers with an in-process `echo` catalog (scenarios tools_call, tools_list)
and gateways that turn a tool call into one request to an HTTP upstream, nginx, started here
(scenarios gateway_call, gateway_list, gateway_list_small).

Usage: python bench/run.py [--duration 10 --warmup 3 --connections 32 ...]; see bench/README.md.
The orchestrator needs only the standard library; the targets run under --python (or --peers-python).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.apps import gateway_catalog  # noqa: E402
from bench.apps.catalog import tool_specs  # noqa: E402

DATA_FILE = BENCH / "data" / "tools_list_1000.json"
HOST = "127.0.0.1"
ERAS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
SCENARIOS = ("tools_call", "tools_list", "gateway_call", "gateway_list", "gateway_list_small", "discovery_call")
GROUP = {
    "tools_call": "echo",
    "tools_list": "echo",
    "gateway_call": "gateway",
    "gateway_list": "gateway",
    "gateway_list_small": "gateway",
    "discovery_call": "gateway",
}
# discovery_call goes to the agent `discovery` (discovery mode) of the Crank gateway: only its targets serve it.
DISCOVERY_PATH = ("/mcp/v1/bench/agent", "/mcp/v1/bench/discovery")
# gateway_list_small lists the agent `small` (two tools): at /mcp/v1/bench/small on Crank's gateways, at
# gateway_catalog.SMALL_PROXY_PATH on the simplest proxies; FastMCP serves no such agent.
SMALL_PATH = ("/mcp/v1/bench/agent", "/mcp/v1/bench/small")
LIST_SCENARIOS = frozenset({"gateway_list", "gateway_list_small"})  # never reach the upstream
REFERENCE, UPPER = "sdk-lowlevel", "bare"
PROXY = "gateway-proxy"  # the simplest proxy on httpx: what Crank measured before it had its own upstream client
FAST_PROXY = "gateway-proxy-aiohttp"  # the same proxy on aiohttp, the fastest common Python client: the reference
CLIENT_PROXY = "gateway-proxy-crank-client"  # the same proxy on Crank's upstream client: Crank's own overhead
RATIO_PROXIES = (FAST_PROXY, CLIENT_PROXY)
SIMPLEST_PROXIES = (PROXY, *RATIO_PROXIES)  # bench/apps/gateway_proxy.py's app, each on its own client
SERVED_GATEWAY = "gateway-crank-serve"  # issue 19's target: against gateway-proxy-aiohttp, as users run it
CRANK_GATEWAYS = ("gateway-crank", "gateway-crank-open", SERVED_GATEWAY)
# The gateway with rate limits and quotas that are never reached, counted in Redis (BENCH_GATEWAY_LIMITS): what
# Redis-backed limiting costs a tools/call against gateway-crank in the same interleaved run (issue 13: <= 15%).
LIMITED_GATEWAYS = ("gateway-crank-limited", "gateway-crank-limited-all")
# The gateway called with an OAuth JWT instead of the API key (its validation cached after the first request): issue
# 20's target is within 10% of gateway-crank's tools/call in the same interleaved run. Its app mints the token and
# writes it to BENCH_GATEWAY_TOKEN_FILE, which run.py reads once the target listens and sends as wrk's BENCH_AUTH.
JWT_GATEWAY = "gateway-crank-jwt"
# The same, the agent's operations with upstream credentials (issue 37): one account's bearer token, and the signed-in
# user's through a token exchange (kept after the first). The exchange's tools/call within 10% of the static one's.
STATIC_GATEWAY, EXCHANGE_GATEWAY = "gateway-crank-jwt-static", "gateway-crank-exchange"
CONNECTION_GATEWAY = "gateway-crank-connection"
# Issue 41: the gateway with its audit trail on, against gateway-crank (off, the default until it costs less than 5%).
AUDITED_GATEWAY = "gateway-crank-audited"
TOKEN_GATEWAYS = (JWT_GATEWAY, STATIC_GATEWAY, EXCHANGE_GATEWAY, CONNECTION_GATEWAY)
DATA_SOURCES = ("crank", "sdk-lowlevel")  # first one that verifies tools/list supplies the bare app's bytes
PEER_PACKAGES = ("crank", "mcp", "fastmcp", "uvicorn", "uvloop", "httptools", "starlette", "orjson", "pydantic",
                 "httpx", "httpx2", "aiohttp")  # fmt: skip
GATEWAY_ITEM_ID = 7  # the id gateway_call.lua asks for


@dataclass(frozen=True)
class Target:
    key: str
    label: str
    app: str  # "module:attribute" for uvicorn
    group: str = "echo"  # which scenarios it serves: echo (tools_*) or gateway (gateway_*)
    path: str = "/"  # where it serves MCP
    peers: bool = False  # runs under --peers-python instead of --python
    env: tuple[tuple[str, str], ...] = ()
    root: Path | None = None  # another checkout of Crank (--base): its src/ and bench/ serve this target
    crank_serve: bool = False  # served as `crank serve` serves it (`python -m MODULE --serve HOST PORT`)
    only: tuple[str, ...] = ()  # the scenarios of its group it serves, when not all of them


TARGETS = (
    Target("crank", "Crank", "bench.apps.crank_echo:app"),
    Target("crank-fixture", "Crank conformance fixture, as a user serves it (uvicorn examples.conformance_app:app)",
           "examples.conformance_app:app", path="/mcp", only=("tools_call",)),  # the suite's tools: no 1,000-tool list
    Target("crank-rpcservice", "Crank RPCService, the README's in-process product (an RPCApp method at /mcp)",
           "bench.apps.crank_rpcservice:app", path="/mcp", only=("tools_call",)),
    Target("sdk-lowlevel", "SDK low-level Server", "bench.apps.sdk_lowlevel:app"),
    Target("sdk-mcpserver", "SDK MCPServer", "bench.apps.sdk_mcpserver:app"),
    Target("bare", "bare ASGI + orjson", "bench.apps.bare:app"),
    Target("gateway-crank", "Crank gateway (API key)", "bench.apps.gateway_crank:app", "gateway",
           "/mcp/v1/bench/agent", env=(("BENCH_GATEWAY_KEYS", "1"),)),
    Target(SERVED_GATEWAY, "Crank gateway as `crank serve` serves it (API key; its HTTP protocol and limits)",
           "bench.apps.gateway_crank:app", "gateway", "/mcp/v1/bench/agent", env=(("BENCH_GATEWAY_KEYS", "1"),),
           crank_serve=True),
    Target(JWT_GATEWAY, "Crank gateway (OAuth JWT, validation cached)", "bench.apps.gateway_crank_jwt:app", "gateway",
           "/mcp/v1/bench/agent"),
    Target(STATIC_GATEWAY, "Crank gateway (OAuth JWT; the upstream's one account, a bearer token)",
           "bench.apps.gateway_crank_jwt:app", "gateway", "/mcp/v1/bench/agent",
           env=(("BENCH_GATEWAY_CREDENTIAL", "static"),), only=("gateway_call",)),
    Target(EXCHANGE_GATEWAY, "Crank gateway (OAuth JWT; the user's own upstream token, a token exchange kept)",
           "bench.apps.gateway_crank_jwt:app", "gateway", "/mcp/v1/bench/agent",
           env=(("BENCH_GATEWAY_CREDENTIAL", "exchange"),), only=("gateway_call",)),
    Target(CONNECTION_GATEWAY, "Crank gateway (OAuth JWT; the user's own connection, from the vault, kept)",
           "bench.apps.gateway_crank_jwt:app", "gateway", "/mcp/v1/bench/agent",
           env=(("BENCH_GATEWAY_CREDENTIAL", "connection"),), only=("gateway_call",)),
    Target("gateway-crank-open", "Crank gateway (no key)", "bench.apps.gateway_crank:app", "gateway",
           "/mcp/v1/bench/agent", env=(("BENCH_GATEWAY_KEYS", "0"),)),
    Target(AUDITED_GATEWAY, "Crank gateway (API key; audit trail on)", "bench.apps.gateway_crank:app", "gateway",
           "/mcp/v1/bench/agent", env=(("BENCH_GATEWAY_KEYS", "1"), ("BENCH_GATEWAY_AUDIT", "1"))),
    Target(LIMITED_GATEWAYS[0], "Crank gateway (API key; key rate limit and quota in Redis)",
           "bench.apps.gateway_crank:app", "gateway", "/mcp/v1/bench/agent",
           env=(("BENCH_GATEWAY_KEYS", "1"), ("BENCH_GATEWAY_LIMITS", "key"))),
    Target(LIMITED_GATEWAYS[1], "Crank gateway (API key; workspace and key limits in Redis)",
           "bench.apps.gateway_crank:app", "gateway", "/mcp/v1/bench/agent",
           env=(("BENCH_GATEWAY_KEYS", "1"), ("BENCH_GATEWAY_LIMITS", "all"))),
    Target("gateway-fastmcp", "FastMCP OpenAPI", "bench.apps.gateway_fastmcp:app", "gateway", peers=True),
    Target(PROXY, "simplest proxy (httpx + orjson)", "bench.apps.gateway_proxy:app", "gateway"),
    Target(FAST_PROXY, "simplest proxy (aiohttp + orjson)", "bench.apps.gateway_proxy_aiohttp:app", "gateway",
           peers=True),
    Target(CLIENT_PROXY, "simplest proxy (Crank's client + orjson)", "bench.apps.gateway_proxy_crank_client:app",
           "gateway"),
)  # fmt: skip


@dataclass
class Row:
    target: str
    scenario: str
    era: str
    rps: float
    p50_ms: float
    p99_ms: float
    runs_rps: list[float]
    wrk: dict[str, Any]  # done() output of the median run
    cpu_us: float | None = None  # the median of the runs' server CPU time per request (`timed`)


def parse_args() -> argparse.Namespace:
    venv = ROOT / ".venv" / "bin" / "python"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--python",
        default=str(venv if venv.exists() else "/tmp/benchvenv/bin/python"),
        help="interpreter that runs the targets (default: .venv/bin/python, else /tmp/benchvenv)",
    )
    peers = BENCH / ".venv-peers" / "bin" / "python"
    p.add_argument(
        "--peers-python",
        default=None,
        help="interpreter for FastMCP, whose packages stay out of Crank's venv (default: bench/.venv-peers if "
        "it exists, else --python; scripts/bench creates it from bench/requirements.txt)",
    )
    p.add_argument("--targets", default=",".join(t.key for t in TARGETS), help="comma-separated target keys")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--eras", default=",".join(ERAS), help="request shapes to try: legacy (2025-11-25), modern")
    p.add_argument("--threads", type=int, default=1, help="wrk -t")
    p.add_argument("--connections", type=int, default=32, help="wrk -c")
    p.add_argument("--duration", type=int, default=10, help="timed wrk run, seconds")
    p.add_argument("--warmup", type=int, default=3, help="untimed wrk run before the timed runs, seconds")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per row; the median by req/s is reported")
    p.add_argument("--server-cpu", default="0", help="taskset CPU list for the server")
    p.add_argument("--client-cpu", default="1", help="taskset CPU list for wrk")
    p.add_argument("--upstream-cpu", default=None, help="taskset CPU list for nginx (default: --client-cpu)")
    p.add_argument("--out", type=Path, default=BENCH / "results", help="where latest.md/latest.json go")
    p.add_argument(
        "--base",
        type=Path,
        default=None,
        help="a checkout of an earlier Crank commit (git worktree add DIR COMMIT): adds `crank@base`, "
        "`gateway-crank@base` and `gateway-crank-serve@base` (those whose target is chosen; all three when none "
        "is), served from its src/ and bench/, to the same interleaved run",
    )
    args = p.parse_args()
    for name, allowed in (("targets", [t.key for t in TARGETS]), ("scenarios", SCENARIOS), ("eras", ERAS)):
        chosen = [v for v in getattr(args, name).split(",") if v]
        if bad := set(chosen) - set(allowed):
            p.error(f"unknown {name}: {', '.join(sorted(bad))} (choose from {', '.join(allowed)})")
        setattr(args, name, chosen)
    if args.peers_python is None:
        args.peers_python = str(peers if peers.exists() else args.python)
    if args.upstream_cpu is None:
        args.upstream_cpu = args.client_cpu
    return args


def target_env(extra: dict[str, str] | None = None, root: Path | None = None) -> dict[str, str]:
    # Another checkout's src/ goes first, before the editable install of this one in the venv.
    first = [str(root / "src"), str(root)] if root is not None else [str(ROOT)]
    path = os.pathsep.join(filter(None, [*first, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


BASE_MAY_LACK = frozenset({"discovery_call", "gateway_list_small"})
"""Scenarios a `--base` checkout may not serve (discovery agents came with issue 11)."""


BASE_TARGETS = ("crank", "crank-fixture", "crank-rpcservice", "gateway-crank", SERVED_GATEWAY)
"""The targets an earlier commit (`--base`) is served as, beside today's."""


def base_targets(base: Path, chosen: list[str]) -> list[Target]:
    """The core, the keyed gateway and the served gateway of an earlier commit, beside today's in the same run:
    those among `chosen`, or all three when none of them is."""
    keys = [key for key in BASE_TARGETS if key in chosen] or list(BASE_TARGETS)
    return [
        replace(target, key=f"{target.key}@base", label=f"{target.label} ({base.name})", root=base.resolve())
        for key in keys
        for target in TARGETS
        if target.key == key
    ]


def import_error(python: str, target: Target, env: dict[str, str]) -> str | None:
    """Why `target.app` cannot be imported by `python`, or None if it can."""
    module, attr = target.app.split(":")
    code = f"import importlib; assert getattr(importlib.import_module({module!r}), {attr!r}) is not None"
    proc = subprocess.run([python, "-c", code], cwd=target.root or ROOT, env=env, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_listening(name: str, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode} before listening; see {log}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2) as probe:
            # A connect to a free port of the ephemeral range can meet itself (TCP simultaneous open): not a server.
            if probe.getsockname() != probe.getpeername():
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} did not listen on port {port} within 120 s; see {log}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass(frozen=True)
class Served:
    url: str  # the target's MCP endpoint
    pid: int  # its server process (taskset execs it): whose CPU time `timed` reads


@contextlib.contextmanager
def serve(python: str, target: Target, cpu: str, log: Path, env: dict[str, str]) -> Iterator[Served]:
    """Run the target under uvicorn pinned to `cpu`; yield its MCP URL and process once the port accepts
    connections."""
    port = free_port()
    if target.crank_serve:  # Crank's protocol (connection limits, send timeout, early answers), uvloop, no access log
        module = target.app.split(":", 1)[0]
        cmd = ["taskset", "-c", cpu, python, "-m", module, "--serve", HOST, str(port)]
    else:
        cmd = ["taskset", "-c", cpu, python, "-m", "uvicorn", target.app, "--host", HOST, "--port", str(port)]
        cmd += "--workers 1 --loop uvloop --http httptools --log-level warning --no-access-log".split()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=target.root or ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_listening(target.key, proc, port, log)
        yield Served(f"http://{HOST}:{port}{target.path}", proc.pid)
    finally:
        stop(proc)


@dataclass
class Upstream:
    url: str
    status_url: str
    status_requests: int = 0  # how many times served() has asked

    def served(self) -> int:
        """Requests nginx has handled so far (including this status request)."""
        self.status_requests += 1
        with urllib.request.urlopen(self.status_url, timeout=5) as response:
            text = response.read().decode()
        return int(text.splitlines()[2].split()[2])  # "server accepts handled requests" / " a h r"

    def settled(self) -> int:
        """`served()` once no other request has reached nginx for 300 ms (calls still in flight when wrk
        stopped finish after it; a slow target can pause longer than 50 ms between two of them, in a
        garbage collection say), counting this status request."""
        last, quiet = self.served(), 0
        for _ in range(400):
            time.sleep(0.05)
            now = self.served()
            quiet = quiet + 1 if now == last + 1 else 0
            last = now
            if quiet == 6:
                return now
        raise SystemExit("the upstream kept receiving requests with no load running")


@contextlib.contextmanager
def upstream_server(cpu: str, log: Path) -> Iterator[Upstream]:
    """nginx (bench/upstream/nginx.conf, one worker) pinned to `cpu`, in the foreground in a temp prefix."""
    nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
    if nginx is None:
        raise SystemExit("nginx not found (apt-get install -y nginx); the gateway scenarios need it")
    port, status_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as prefix:
        (Path(prefix) / "tmp").mkdir()
        conf = (BENCH / "upstream" / "nginx.conf").read_text()
        conf = conf.replace("@PORT@", str(port)).replace("@STATUS_PORT@", str(status_port))
        (Path(prefix) / "nginx.conf").write_text(conf)
        cmd = ["taskset", "-c", cpu, nginx, "-p", prefix, "-c", "nginx.conf", "-e", f"{prefix}/error.log"]
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            wait_listening("nginx", proc, port, log)
            wait_listening("nginx", proc, status_port, log)
            yield Upstream(f"http://{HOST}:{port}", f"http://{HOST}:{status_port}/status")
        finally:
            stop(proc)
            with contextlib.suppress(OSError), log.open("ab") as log_file:
                log_file.write((Path(prefix) / "error.log").read_bytes())


def gateway_registry(python: str, upstream: Upstream, directory: Path, root: Path | None = None) -> tuple[Path, str]:
    """Create Crank's registry with the published 1,000-tool agent (with the code of `root`, another
    checkout, when given); returns the SQLite file and an API key."""
    db = directory / ("registry-base.sqlite3" if root is not None else "registry.sqlite3")
    proc = subprocess.run(
        [python, "-m", "bench.apps.gateway_crank", str(db)],
        cwd=root or ROOT,
        env=target_env({"BENCH_UPSTREAM": upstream.url}, root),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"creating the gateway registry failed: {proc.stderr.strip()[-2000:]}")
    return db, proc.stdout.strip().splitlines()[-1]


def wrk(
    args: argparse.Namespace,
    url: str,
    scenario: str,
    era: str,
    seconds: int,
    connections: int | None = None,
    count: bool = False,
    dump: Path | None = None,
    auth: str | None = None,
) -> dict[str, Any]:
    """Run wrk on the client CPU and return the JSON line printed by the scenario script's done().

    `count` passes every response through Lua to count non-2xx statuses exactly (costly for wrk);
    without it only wrk's native count of statuses >= 400 (errors.status) is available.
    """
    conns = connections or args.connections
    threads = min(args.threads, conns)
    script = BENCH / "wrk" / f"{scenario}.lua"
    cmd = ["taskset", "-c", args.client_cpu, "wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s"]
    cmd += ["--timeout", "10s", "-s", str(script), url]
    env = {**os.environ, "BENCH_ERA": era}
    if auth:
        env["BENCH_AUTH"] = auth
    if count:
        env["BENCH_COUNT"] = "1"
    if dump:
        env["BENCH_DUMP"] = str(dump)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0:
        raise SystemExit(f"wrk failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return dict(json.loads(next(ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{"))))


def check_response(scenario: str, request: dict[str, Any], status: int, ctype: str, body: bytes) -> str | None:
    """Why the response is not a correct answer to `request`, or None if it is."""
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    if not ctype.startswith("application/json"):
        return f"content-type {ctype!r}: {body[:200]!r}"
    try:
        msg = json.loads(body)
    except ValueError:
        return f"body is not JSON: {body[:200]!r}"
    if msg.get("jsonrpc") != "2.0" or msg.get("id") != request["id"] or "result" not in msg:
        return f"not a JSON-RPC result for id {request['id']}: {body[:300]!r}"
    result = msg["result"]
    if scenario in ("gateway_call", "discovery_call"):
        expected_item = gateway_catalog.item(GATEWAY_ITEM_ID)
        content = result.get("content") or []
        try:
            text_value = json.loads(content[0]["text"]) if len(content) == 1 and content[0]["type"] == "text" else None
        except (KeyError, TypeError, ValueError):
            text_value = None
        structured = result.get("structuredContent")
        if (
            text_value != expected_item
            or structured not in (expected_item, {"result": expected_item})
            or result.get("isError", False) is not False
        ):
            return f"wrong gateway result: {json.dumps(result)[:400]}"
    elif scenario == "gateway_list_small":
        names = [tool.get("name") for tool in result.get("tools", [])]
        if names != gateway_catalog.tool_names()[: gateway_catalog.SMALL_TOOLS] or "nextCursor" in result:
            return f"expected the small agent's two tools in one page, got {names[:5]}"
    elif scenario == "gateway_list":
        names = [tool.get("name") for tool in result.get("tools", [])]
        catalog = set(gateway_catalog.tool_names())
        page = min(gateway_catalog.PAGE_SIZE, gateway_catalog.N_TOOLS)
        if len(names) != page or len(set(names)) != page or not set(names) <= catalog or not result.get("nextCursor"):
            return f"expected a first page of {page} of the gateway's tools with a nextCursor, got {len(names)} tools"
    elif scenario == "tools_call":
        expected = [{"type": "text", "text": request["params"]["arguments"]["text"]}]
        if result.get("content") != expected or result.get("isError", False) is not False:
            return f"wrong echo result: {json.dumps(result)[:300]}"
    else:
        names = [tool.get("name") for tool in result.get("tools", [])]
        expected_names = [spec["name"] for spec in tool_specs()]
        if sorted(names) != sorted(expected_names) or result.get("nextCursor"):
            return f"expected the {len(expected_names)}-tool catalog in one page, got {len(names)} tools"
    return None


def verify(
    args: argparse.Namespace, url: str, scenario: str, era: str, auth: str | None = None
) -> tuple[str | None, bytes]:
    """Send the exact wrk request over one connection and check a response; returns (problem, body)."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "response"
        stats = wrk(args, url, scenario, era, seconds=1, connections=1, dump=dump, auth=auth)
        if not dump.exists():
            return "no response received", b""
        status, ctype, length, rest = dump.read_bytes().split(b"\n", 3)
    request = json.loads(rest[: int(length)])
    body = rest[int(length) :]
    problem = check_response(scenario, request, int(status), ctype.decode(), body)
    if problem is None and (stats["non2xx"] or any(stats["errors"].values())):
        problem = f"non-2xx or socket errors during verification: {stats}"
    return problem, body


def require_clean(name: str, phase: str, stats: dict[str, Any]) -> None:
    if stats["non2xx"] or stats["body_errors"] or stats.get("limited") or any(stats["errors"].values()):
        raise SystemExit(
            f"FAIL {name} ({phase}): {stats['non2xx']} non-2xx responses, {stats['body_errors']} error results "
            f"and {stats.get('limited', 0)} refused by a rate limit counted, wrk errors {stats['errors']} (status = "
            f"HTTP >= 400) in {stats['requests']} requests"
        )


def process_cpu_seconds(pid: int) -> float:
    """The user and system CPU time a process has used so far (`/proc/PID/stat`: Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()  # from field 3, the state, on
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15: utime, stime


def timed(
    args: argparse.Namespace, name: str, phase: str, url: str, scenario: str, era: str, seconds: int,
    upstream: Upstream | None, auth: str | None, count: bool = False, pid: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One clean wrk run; for the gateway scenarios also checks how many requests reached the upstream:
    one per completed call (a few more for calls still in flight when wrk stopped), none for tools/list.

    Given the server's `pid`, also the server's CPU time per request over the run (`server_cpu_us`): what a
    request costs the target itself. Other programs' time does not count in it, though their load on a shared
    machine still moves it (bench/README.md)."""
    before = upstream.settled() if upstream else 0
    asked = upstream.status_requests if upstream else 0
    cpu = process_cpu_seconds(pid) if pid is not None else 0.0
    stats = wrk(args, url, scenario, era, seconds, count=count, auth=auth)
    if pid is not None and stats["requests"]:
        stats["server_cpu_us"] = (process_cpu_seconds(pid) - cpu) / stats["requests"] * 1e6
    require_clean(name, phase, stats)
    if upstream is not None:
        after = upstream.settled()  # this count includes the status requests made since `before`
        stats["upstream_requests"] = sent = after - before - (upstream.status_requests - asked)
        listed = scenario in LIST_SCENARIOS
        low, high = (0, 0) if listed else (stats["requests"], stats["requests"] + args.connections)
        if not low <= sent <= high:
            raise SystemExit(
                f"FAIL {name} ({phase}): the upstream served {sent} requests for {stats['requests']} completed "
                f"{scenario} requests (expected {low}..{high})"
            )
    return stats


def make_row(name: str, scenario: str, era: str, runs: list[dict[str, Any]]) -> Row:
    """The row of one (target, scenario, shape): the run with the median req/s."""
    stats = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
    cpu = sorted(r["server_cpu_us"] for r in runs if "server_cpu_us" in r)
    row = Row(name.split()[0], scenario, era, stats["rps"], stats["p50_us"] / 1e3, stats["p99_us"] / 1e3,
              [r["rps"] for r in runs], stats, cpu[len(cpu) // 2] if cpu else None)  # fmt: skip
    spread = f" (runs: {', '.join(f'{r:,.0f}' for r in row.runs_rps)})" if len(runs) > 1 else ""
    cost = f", server CPU {row.cpu_us:.1f} µs/request" if row.cpu_us is not None else ""
    print(f"{name}: {row.rps:,.0f} req/s{spread}, p50 {row.p50_ms:.2f} ms, p99 {row.p99_ms:.2f} ms{cost}",
          file=sys.stderr)  # fmt: skip
    return row


def interpreter_info(python: str) -> dict[str, Any]:
    """The target interpreter's Python version and the installed versions of the peer packages."""
    code = (
        "import importlib.metadata as m, json, platform\nv = {}\n"
        f"for n in {PEER_PACKAGES!r}:\n"
        "    try: v[n] = m.version(n)\n    except m.PackageNotFoundError: pass\n"
        "print(json.dumps({'python_version': platform.python_version(), 'packages': v}))"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(proc.stdout))


def nginx_version() -> str:
    proc = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
    return (proc.stderr or proc.stdout).strip().rpartition("/")[2]


def where_served(url: str, scenario: str, target: Target) -> str:
    """The URL of `scenario` on `target`, whose MCP endpoint is `url`."""
    if scenario == "discovery_call":
        return url.replace(*DISCOVERY_PATH)
    if scenario == "gateway_list_small":
        if target.path == SMALL_PATH[0]:
            return url.replace(*SMALL_PATH)
        return url.rstrip("/") + gateway_catalog.SMALL_PROXY_PATH
    return url


def scenarios_of(args: argparse.Namespace, target: Target) -> list[str]:
    """The chosen scenarios this target serves."""
    return [
        s for s in args.scenarios
        if GROUP[s] == target.group and (not target.only or s in target.only)
        and (s != "discovery_call" or target.path == DISCOVERY_PATH[0])
        and (s != "gateway_list_small" or target.path == SMALL_PATH[0] or target.key in SIMPLEST_PROXIES)
    ]  # fmt: skip


def crank_source(python: str) -> str:
    """Which Crank the targets import, and the git state of that tree (the benchmark measures the work tree)."""
    code = "import crank, pathlib; print(pathlib.Path(crank.__file__).resolve().parents[1])"
    proc = subprocess.run([python, "-c", code], cwd=ROOT, env=target_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        return "not importable"
    src = Path(proc.stdout.strip())
    if src != ROOT / "src":
        return str(src)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return "src/"
    return f"src/ at {head.stdout.strip()}" + (" with uncommitted changes" if dirty.stdout.strip() else "")


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def ratio(value: float, ref: float | None) -> str:
    if not ref:
        return "–"
    r = value / ref
    return f"{r:.2f}" if r >= 0.01 else f"{r:.2g}"


SCENARIO_LABELS = {"tools_call": "tools/call", "tools_list": "tools/list", "gateway_call": "tools/call",
                   "gateway_list": "tools/list (first page)",
                   "gateway_list_small": "tools/list (2-tool agent)",
                   "discovery_call": "tools/call through discovery"}  # fmt: skip


def markdown(meta: dict[str, Any], rows: list[Row], skipped: list[str]) -> str:
    best: dict[tuple[str, str], float] = {}
    cheapest: dict[tuple[str, str], float] = {}  # the least server CPU per request of a target's shapes
    for r in rows:
        best[r.target, r.scenario] = max(best.get((r.target, r.scenario), 0.0), r.rps)
        if r.cpu_us:
            cheapest[r.target, r.scenario] = min(cheapest.get((r.target, r.scenario), r.cpu_us), r.cpu_us)
    versions = ", ".join(f"{k} {v}" for k, v in meta["packages"].items())
    lines = [
        f"# Crank MCP benchmark ({meta['date']})",
        "",
        f"wrk `{meta['wrk_args']}` after a {meta['warmup_s']} s warm-up (median of {meta['repeat']} runs), "
        f"on CPU {meta['client_cpu']}; each target under uvicorn (1 worker, uvloop + httptools) "
        f"on CPU {meta['server_cpu']}; {meta['cpu']}; "
        f"Python {meta['python_version']}; {versions}; Crank from {meta['crank_source']}.",
    ]
    labels = {t.key: t.label for t in TARGETS}
    labels.update((r.target, r.target) for r in rows if r.target not in labels)  # --base targets
    echo = [r for r in rows if GROUP[r.scenario] == "echo"]
    if echo:
        lines += [
            "",
            "Ratios are req/s over the reference's best request shape in the same scenario. The server's CPU "
            "time per request (the median of the runs, from `/proc/PID/stat`) is what a request costs the target "
            "itself; × bare by CPU is the bare app's least CPU per request over this row's.",
            "",
            "| target | scenario | request shape | req/s | p50 ms | p99 ms | × SDK low-level | × bare "
            "| server CPU µs/req | × bare by CPU |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in sorted(echo, key=lambda r: (SCENARIOS.index(r.scenario), -r.rps)):
            mark = " (best)" if r.rps == best[r.target, r.scenario] else ""
            cpu = f"{r.cpu_us:.1f}" if r.cpu_us else "–"
            by_cpu = ratio(cheapest[UPPER, r.scenario], r.cpu_us) if (UPPER, r.scenario) in cheapest else "–"
            lines.append(
                f"| {labels[r.target]} | {SCENARIO_LABELS[r.scenario]} | {ERAS[r.era]}{mark} | {r.rps:,.0f} "
                f"| {r.p50_ms:.2f} | {r.p99_ms:.2f} | {ratio(r.rps, best.get((REFERENCE, r.scenario)))} "
                f"| {ratio(r.rps, best.get((UPPER, r.scenario)))} | {cpu} | {by_cpu} |"
            )
    gateway = [r for r in rows if GROUP[r.scenario] == "gateway"]
    if gateway:
        peers = ", ".join(f"{k} {v}" for k, v in meta.get("peer_packages", {}).items())
        lines += [
            "",
            "## Gateway",
            "",
            f"Upstream: nginx {meta.get('nginx', '?')} (1 worker, fixed JSON item) on CPU {meta['upstream_cpu']}. "
            f"FastMCP and the aiohttp proxy run under {meta.get('peers_python')}: {peers}. "
            "Ratios divide by the row of the simplest proxy with the same scenario and request shape: on aiohttp "
            "(the reference of the targets), or on Crank's own upstream client (what Crank's own work costs).",
            "",
            "| target | scenario | request shape | req/s | p50 ms | p99 ms | × aiohttp proxy req/s | p99 "
            "| × Crank-client proxy req/s | p99 |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        refs = {(r.target, r.scenario, r.era): r for r in gateway if r.target in RATIO_PROXIES}
        for r in sorted(gateway, key=lambda r: (SCENARIOS.index(r.scenario), -r.rps)):
            mark = " (best)" if r.rps == best[r.target, r.scenario] else ""
            cells = []
            for key in RATIO_PROXIES:
                ref = refs.get((key, r.scenario, r.era))
                cells += [ratio(r.rps, ref.rps if ref else None), ratio(r.p99_ms, ref.p99_ms if ref else None)]
            lines.append(
                f"| {labels[r.target]} | {SCENARIO_LABELS[r.scenario]} | {ERAS[r.era]}{mark} | {r.rps:,.0f} "
                f"| {r.p50_ms:.2f} | {r.p99_ms:.2f} | {' | '.join(cells)} |"
            )
        lines += gateway_verdict(gateway, labels)
        lines += limits_verdict(gateway, labels)
        lines += jwt_verdict(gateway, labels)
        lines += exchange_verdict(gateway, labels)
        lines += served_verdict(gateway, labels)
    if skipped:
        lines += ["", "Skipped:", *(f"- {s}" for s in skipped)]
    return "\n".join(lines) + "\n"


def gateway_verdict(rows: list[Row], labels: dict[str, str]) -> list[str]:
    """The issue's targets for gateway tools/call: >= 70% of the proxy's req/s, p99 < 2x the proxy's.

    Each target's best request shape against the proxy's row of the same shape: the aiohttp proxy (the
    reference), and the proxy on Crank's client (for information: the same client on both sides)."""
    out: list[str] = []
    for proxy_key in RATIO_PROXIES:
        proxy = {r.era: r for r in rows if r.target == proxy_key and r.scenario == "gateway_call"}
        for key in (*CRANK_GATEWAYS, "gateway-fastmcp"):
            mine = [r for r in rows if r.target == key and r.scenario == "gateway_call" and r.era in proxy]
            if not mine:
                continue
            r = max(mine, key=lambda r: r.rps)
            ref = proxy[r.era]
            rps, p99 = r.rps / ref.rps, r.p99_ms / ref.p99_ms
            met = "met" if rps >= 0.70 and p99 < 2 else "NOT met"
            out.append(
                f"- {labels[key]}, tools/call ({ERAS[r.era]}) against the {labels[proxy_key]}: {rps:.2f}× its "
                f"req/s (target ≥ 0.70), p99 {p99:.2f}× its p99 (target < 2): {met}"
            )
    return ["", *out] if out else []


SERVED_TARGETS = {"gateway_call": 1.4, "gateway_list": 0.8, "gateway_list_small": 0.8}
"""Issue 19's targets: the gateway as `crank serve` serves it, against the aiohttp proxy in the same run."""


def served_verdict(rows: list[Row], labels: dict[str, str]) -> list[str]:
    """Issue 19's targets: `gateway-crank-serve`'s best request shape against the aiohttp proxy's row of the
    same shape: tools/call at least 1.4x its req/s, tools/list at least 0.8x."""
    out: list[str] = []
    for scenario, target in SERVED_TARGETS.items():
        proxy = {r.era: r for r in rows if r.target == FAST_PROXY and r.scenario == scenario}
        mine = [r for r in rows if r.target == SERVED_GATEWAY and r.scenario == scenario and r.era in proxy]
        if not mine:
            continue
        r = max(mine, key=lambda r: r.rps)
        ratio = r.rps / proxy[r.era].rps
        met = "met" if ratio >= target else "NOT met"
        out.append(f"- {labels[SERVED_GATEWAY]}, {SCENARIO_LABELS[scenario]} ({ERAS[r.era]}): {ratio:.2f}× the "
                   f"{labels[FAST_PROXY]}'s req/s (target ≥ {target}): {met}")  # fmt: skip
    return ["", *out] if out else []


def limits_verdict(rows: list[Row], labels: dict[str, str]) -> list[str]:
    """Issue 13's target: Redis-backed rate limiting costs <= 15% of gateway-crank's tools/call req/s, each
    limited target's best request shape against gateway-crank's row of the same shape."""
    plain = {r.era: r for r in rows if r.target == "gateway-crank" and r.scenario == "gateway_call"}
    out: list[str] = []
    for key in LIMITED_GATEWAYS:
        mine = [r for r in rows if r.target == key and r.scenario == "gateway_call" and r.era in plain]
        if not mine:
            continue
        r = max(mine, key=lambda r: r.rps)
        cost = 1 - r.rps / plain[r.era].rps
        met = "met" if cost <= 0.15 else "NOT met"
        out.append(f"- {labels[key]}, tools/call ({ERAS[r.era]}): costs {cost:.1%} of {labels['gateway-crank']}'s "
                   f"req/s (target ≤ 15%): {met}")  # fmt: skip
    return ["", *out] if out else []


def exchange_verdict(rows: list[Row], labels: dict[str, str]) -> list[str]:
    """Issue 37's target: `gateway-crank-exchange`'s tools/call (the user's exchanged token, kept) within 10% of
    `gateway-crank-jwt-static`'s (one account's token), each request shape against the same shape."""
    static = {r.era: r for r in rows if r.target == STATIC_GATEWAY and r.scenario == "gateway_call"}
    out = []
    for r in (r for r in rows if r.target in (EXCHANGE_GATEWAY, CONNECTION_GATEWAY) and r.scenario == "gateway_call"
              and r.era in static):  # fmt: skip
        share = r.rps / static[r.era].rps
        out.append(
            f"- {labels[r.target]}, {SCENARIO_LABELS['gateway_call']} ({ERAS[r.era]}): {share:.3f}× "
            f"{labels[STATIC_GATEWAY]}'s req/s (target ≥ 0.90): {'met' if share >= 0.90 else 'NOT met'}"
        )
    return out


def jwt_verdict(rows: list[Row], labels: dict[str, str]) -> list[str]:
    """Issue 20's target: `gateway-crank-jwt`'s tools/call within 10% of `gateway-crank`'s req/s, each request
    shape against the same shape (tools/list for information)."""
    out: list[str] = []
    for scenario in ("gateway_call", "gateway_list"):
        keyed = {r.era: r for r in rows if r.target == "gateway-crank" and r.scenario == scenario}
        for r in (r for r in rows if r.target == JWT_GATEWAY and r.scenario == scenario and r.era in keyed):
            share = r.rps / keyed[r.era].rps
            verdict = f" (target ≥ 0.90): {'met' if share >= 0.90 else 'NOT met'}" if scenario == "gateway_call" else ""
            out.append(f"- {labels[JWT_GATEWAY]}, {SCENARIO_LABELS[scenario]} ({ERAS[r.era]}): {share:.3f}× "
                       f"{labels['gateway-crank']}'s req/s{verdict}")  # fmt: skip
    return ["", *out] if out else []


def main() -> int:
    args = parse_args()
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (apt-get install -y wrk util-linux)")
    for python in {args.python, args.peers_python}:
        if not Path(python).exists():
            raise SystemExit(f"{python} does not exist; see bench/README.md for the venv setup")
    print(f"targets run under {args.python} (FastMCP: {args.peers_python})", file=sys.stderr)
    based = base_targets(args.base, args.targets) if args.base is not None else []
    known = [*TARGETS, *based]
    wanted = {*args.targets, *(t.key for t in based)}
    chosen = [t for t in known if t.key in wanted and scenarios_of(args, t)]
    rows: list[Row] = []
    skipped: list[str] = []
    unverified: list[str] = []
    data_source: str | None = None
    # (name, url, scenario, era) of every verified combination, in target order, and the key each sends.
    combos: list[tuple[str, str, str, str]] = []
    keys: dict[str, str | None] = {}
    pids: dict[str, int] = {}  # each (target, scenario, shape)'s server process
    upstream: Upstream | None = None
    gateway_key: str | None = None
    gateway_env: dict[str, str] = {}
    with contextlib.ExitStack() as servers:
        if any(t.group == "gateway" for t in chosen):
            upstream = servers.enter_context(upstream_server(args.upstream_cpu, args.out / "logs" / "nginx.log"))
            workdir = Path(servers.enter_context(tempfile.TemporaryDirectory(prefix="bench-gateway-")))
            db, gateway_key = gateway_registry(args.python, upstream, workdir)
            gateway_env = {"BENCH_UPSTREAM": upstream.url, "BENCH_GATEWAY_DB": str(db)}
            if any(t.key in LIMITED_GATEWAYS for t in chosen):
                from tests.services import start_redis

                redis = start_redis()
                servers.callback(redis.destroy)
                gateway_env["BENCH_REDIS_URL"] = redis.url
            if args.base is not None:  # the earlier commit writes (and reads) its own registry format
                base_db, base_key = gateway_registry(args.python, upstream, workdir, args.base.resolve())
                base_env = {"BENCH_UPSTREAM": upstream.url, "BENCH_GATEWAY_DB": str(base_db)}
            print(f"upstream {upstream.url} on CPU {args.upstream_cpu}; gateway registry {db}", file=sys.stderr)
        # All targets listen at once (idle ones cost nothing) so that the timed runs can interleave:
        # the machine's drift then hits every target alike instead of whichever ran during a slow spell.
        # The bare app reads the tools/list bytes when it starts, so it starts after the others.
        for target in sorted(chosen, key=lambda t: t.key == UPPER):
            python = args.peers_python if target.peers else args.python
            own_env = base_env if target.root is not None and target.group == "gateway" else gateway_env
            extra = {**own_env, **dict(target.env)} if target.group == "gateway" else None
            if target.key in TOKEN_GATEWAYS:
                token_file = workdir / f"{target.key}.token"
                extra = {**(extra or {}), "BENCH_GATEWAY_TOKEN_FILE": str(token_file)}
            env = target_env(extra, target.root)
            auth = (base_key if target.root is not None else gateway_key) if target.group == "gateway" else None
            if (why := import_error(python, target, env)) is not None:
                if "ModuleNotFoundError" in why and "bench.apps" not in why:
                    why += f" (install bench/requirements.txt into {python}, or pass --python/--peers-python)"
                print(f"skip {target.key}: cannot import {target.app}: {why}", file=sys.stderr)
                skipped.append(f"{target.key}: cannot import `{target.app}`: {why}")
                continue
            if target.key == UPPER:
                source = data_source or "an earlier run"
                print(f"bare tools/list bytes: {DATA_FILE.relative_to(ROOT)} from {source}", file=sys.stderr)
            log = args.out / "logs" / f"{target.key}.log"
            served = servers.enter_context(serve(python, target, args.server_cpu, log, env))
            url = served.url
            if target.key in TOKEN_GATEWAYS:  # written by the app at import, before its port listened
                auth = token_file.read_text().split()[0]
            for scenario in scenarios_of(args, target):
                shapes = 0
                where = where_served(url, scenario, target)
                for era in args.eras:
                    name = f"{target.key} {scenario} {era}"
                    problem, body = verify(args, where, scenario, era, auth)
                    if problem is not None:
                        print(f"skip {name}: {problem}", file=sys.stderr)
                        skipped.append(f"{name}: {problem}")
                        continue
                    shapes += 1
                    if scenario == "tools_list" and target.key in DATA_SOURCES and data_source is None:
                        DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
                        DATA_FILE.write_bytes(body)
                        data_source = f"{target.key} ({ERAS[era]} shape)"
                    combos.append((name, where, scenario, era))
                    keys[name], pids[name] = auth, served.pid
                # An earlier commit (--base) may lack a scenario added since (discovery): skipped, not a failure.
                if shapes == 0 and not (target.root is not None and scenario in BASE_MAY_LACK):
                    unverified.append(f"{target.key} {scenario}")

        def context(name: str, scenario: str) -> tuple[Upstream | None, str | None]:
            return (upstream, keys[name]) if GROUP[scenario] == "gateway" else (None, None)

        for name, url, scenario, era in combos:
            timed(args, name, "warm-up", url, scenario, era, args.warmup, *context(name, scenario), count=True)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in combos}
        for _ in range(args.repeat):
            for scenario in args.scenarios:
                for era in args.eras:
                    for name, url, _scenario, _era in (c for c in combos if c[2:] == (scenario, era)):
                        runs[name].append(timed(args, name, "timed run", url, scenario, era, args.duration,
                                                *context(name, scenario), pid=pids[name]))  # fmt: skip
        rows = [make_row(name, scenario, era, runs[name]) for name, _url, scenario, era in combos]
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wrk_args": f"-t{args.threads} -c{args.connections} -d{args.duration}s",
        "repeat": args.repeat,
        "warmup_s": args.warmup,
        "server_cpu": args.server_cpu,
        "client_cpu": args.client_cpu,
        "cpu": cpu_model(),
        "python": args.python,
        **interpreter_info(args.python),
        "tools_list_source": data_source,
        "crank_source": crank_source(args.python),
    }
    if upstream is not None:
        peers = interpreter_info(args.peers_python)
        meta |= {"upstream_cpu": args.upstream_cpu, "nginx": nginx_version(), "peers_python": args.peers_python,
                 "peer_packages": peers["packages"]}  # fmt: skip
    report = markdown(meta, rows, skipped)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(report)
    raw = {"meta": meta, "rows": [asdict(r) for r in rows], "skipped": skipped, "unverified": unverified}
    (args.out / "latest.json").write_text(json.dumps(raw, indent=2) + "\n")
    if unverified:
        print(f"FAIL: no request shape gave a correct response for: {', '.join(unverified)}", file=sys.stderr)
        return 1
    if not rows:
        print("FAIL: nothing was measured", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
