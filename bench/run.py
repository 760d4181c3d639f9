#!/usr/bin/env python3
"""Benchmark MCP tools/call and tools/list over loopback: uvicorn targets on one core, wrk on the other.

Usage: python bench/run.py [--duration 10 --warmup 3 --connections 32 ...]; see bench/README.md.
The orchestrator needs only the standard library; the targets run under --python.
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
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.apps.catalog import tool_specs  # noqa: E402

DATA_FILE = BENCH / "data" / "tools_list_1000.json"
HOST = "127.0.0.1"
MCP_PATH = "/"  # every target serves MCP at the root, as Crank's MCPEndpoint does
ERAS = {"legacy": "2025-11-25", "modern": "2026-07-28"}
SCENARIOS = ("tools_call", "tools_list")
REFERENCE, UPPER = "sdk-lowlevel", "bare"
DATA_SOURCES = ("crank", "sdk-lowlevel")  # first one that verifies tools/list supplies the bare app's bytes
PEER_PACKAGES = ("crank", "mcp", "uvicorn", "uvloop", "httptools", "starlette", "orjson", "pydantic")


@dataclass(frozen=True)
class Target:
    key: str
    label: str
    app: str  # "module:attribute" for uvicorn


TARGETS = (
    Target("crank", "Crank", "bench.apps.crank_echo:app"),
    Target("sdk-lowlevel", "SDK low-level Server", "bench.apps.sdk_lowlevel:app"),
    Target("sdk-mcpserver", "SDK MCPServer", "bench.apps.sdk_mcpserver:app"),
    Target("bare", "bare ASGI + orjson", "bench.apps.bare:app"),
)


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


def parse_args() -> argparse.Namespace:
    venv = ROOT / ".venv" / "bin" / "python"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--python",
        default=str(venv if venv.exists() else "/tmp/benchvenv/bin/python"),
        help="interpreter that runs the targets (default: .venv/bin/python, else /tmp/benchvenv)",
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
    p.add_argument("--out", type=Path, default=BENCH / "results", help="where latest.md/latest.json go")
    args = p.parse_args()
    for name, allowed in (("targets", [t.key for t in TARGETS]), ("scenarios", SCENARIOS), ("eras", ERAS)):
        chosen = [v for v in getattr(args, name).split(",") if v]
        if bad := set(chosen) - set(allowed):
            p.error(f"unknown {name}: {', '.join(sorted(bad))} (choose from {', '.join(allowed)})")
        setattr(args, name, chosen)
    return args


def target_env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def import_error(python: str, target: Target) -> str | None:
    """Why `target.app` cannot be imported by `python`, or None if it can."""
    module, attr = target.app.split(":")
    code = f"import importlib; getattr(importlib.import_module({module!r}), {attr!r})"
    proc = subprocess.run([python, "-c", code], cwd=ROOT, env=target_env(), capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(python: str, target: Target, cpu: str, log: Path) -> Iterator[str]:
    """Run the target under uvicorn pinned to `cpu`; yield its MCP URL once the port accepts connections."""
    port = free_port()
    cmd = ["taskset", "-c", cpu, python, "-m", "uvicorn", target.app, "--host", HOST, "--port", str(port)]
    cmd += "--workers 1 --loop uvloop --http httptools --log-level warning --no-access-log".split()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=target_env(), stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{target.key} exited with {proc.returncode} before listening; see {log}")
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{target.key} did not listen on port {port} within 120 s; see {log}")
            time.sleep(0.1)
        yield f"http://{HOST}:{port}{MCP_PATH}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wrk(
    args: argparse.Namespace,
    url: str,
    scenario: str,
    era: str,
    seconds: int,
    connections: int | None = None,
    count: bool = False,
    dump: Path | None = None,
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
    if scenario == "tools_call":
        expected = [{"type": "text", "text": request["params"]["arguments"]["text"]}]
        if result.get("content") != expected or result.get("isError", False) is not False:
            return f"wrong echo result: {json.dumps(result)[:300]}"
    else:
        names = [tool.get("name") for tool in result.get("tools", [])]
        expected_names = [spec["name"] for spec in tool_specs()]
        if sorted(names) != sorted(expected_names) or result.get("nextCursor"):
            return f"expected the {len(expected_names)}-tool catalog in one page, got {len(names)} tools"
    return None


def verify(args: argparse.Namespace, url: str, scenario: str, era: str) -> tuple[str | None, bytes]:
    """Send the exact wrk request over one connection and check a response; returns (problem, body)."""
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "response"
        stats = wrk(args, url, scenario, era, seconds=1, connections=1, dump=dump)
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
    if stats["non2xx"] or any(stats["errors"].values()):
        raise SystemExit(
            f"FAIL {name} ({phase}): {stats['non2xx']} non-2xx responses counted, wrk errors "
            f"{stats['errors']} (status = HTTP >= 400) in {stats['requests']} requests"
        )


def make_row(name: str, scenario: str, era: str, runs: list[dict[str, Any]]) -> Row:
    """The row of one (target, scenario, shape): the run with the median req/s."""
    stats = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
    row = Row(name.split()[0], scenario, era, stats["rps"], stats["p50_us"] / 1e3, stats["p99_us"] / 1e3,
              [r["rps"] for r in runs], stats)  # fmt: skip
    spread = f" (runs: {', '.join(f'{r:,.0f}' for r in row.runs_rps)})" if len(runs) > 1 else ""
    print(f"{name}: {row.rps:,.0f} req/s{spread}, p50 {row.p50_ms:.2f} ms, p99 {row.p99_ms:.2f} ms", file=sys.stderr)
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


def markdown(meta: dict[str, Any], rows: list[Row], skipped: list[str]) -> str:
    best: dict[tuple[str, str], float] = {}
    for r in rows:
        best[r.target, r.scenario] = max(best.get((r.target, r.scenario), 0.0), r.rps)
    versions = ", ".join(f"{k} {v}" for k, v in meta["packages"].items())
    lines = [
        f"# Crank MCP benchmark ({meta['date']})",
        "",
        f"wrk `{meta['wrk_args']}` after a {meta['warmup_s']} s warm-up (median of {meta['repeat']} runs), "
        f"on CPU {meta['client_cpu']}; each target under uvicorn (1 worker, uvloop + httptools) "
        f"on CPU {meta['server_cpu']}; {meta['cpu']}; "
        f"Python {meta['python_version']}; {versions}. "
        "Ratios are req/s over the reference's best request shape in the same scenario.",
        "",
        "| target | scenario | request shape | req/s | p50 ms | p99 ms | × SDK low-level | × bare |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    labels = {t.key: t.label for t in TARGETS}
    for r in sorted(rows, key=lambda r: (SCENARIOS.index(r.scenario), -r.rps)):
        mark = " (best)" if r.rps == best[r.target, r.scenario] else ""
        lines.append(
            f"| {labels[r.target]} | {r.scenario.replace('_', '/')} | {ERAS[r.era]}{mark} | {r.rps:,.0f} "
            f"| {r.p50_ms:.2f} | {r.p99_ms:.2f} | {ratio(r.rps, best.get((REFERENCE, r.scenario)))} "
            f"| {ratio(r.rps, best.get((UPPER, r.scenario)))} |"
        )
    if skipped:
        lines += ["", "Skipped:", *(f"- {s}" for s in skipped)]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = parse_args()
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (apt-get install -y wrk util-linux)")
    if not Path(args.python).exists():
        raise SystemExit(f"--python {args.python} does not exist; see bench/README.md for the venv setup")
    print(f"targets run under {args.python}", file=sys.stderr)
    rows: list[Row] = []
    skipped: list[str] = []
    unverified: list[str] = []
    data_source: str | None = None
    # (name, url, scenario, era) of every verified combination, in target order.
    combos: list[tuple[str, str, str, str]] = []
    with contextlib.ExitStack() as servers:
        # All targets listen at once (idle ones cost nothing) so that the timed runs can interleave:
        # the machine's drift then hits every target alike instead of whichever ran during a slow spell.
        # The bare app reads the tools/list bytes when it starts, so it starts after the others.
        for target in sorted((t for t in TARGETS if t.key in args.targets), key=lambda t: t.key == UPPER):
            if (why := import_error(args.python, target)) is not None:
                if "ModuleNotFoundError" in why and "bench.apps" not in why:
                    why += f" (install bench/requirements.txt into {args.python}, or pass --python)"
                print(f"skip {target.key}: cannot import {target.app}: {why}", file=sys.stderr)
                skipped.append(f"{target.key}: cannot import `{target.app}`: {why}")
                continue
            if target.key == UPPER:
                source = data_source or "an earlier run"
                print(f"bare tools/list bytes: {DATA_FILE.relative_to(ROOT)} from {source}", file=sys.stderr)
            log = args.out / "logs" / f"{target.key}.log"
            url = servers.enter_context(serve(args.python, target, args.server_cpu, log))
            for scenario in args.scenarios:
                shapes = 0
                for era in args.eras:
                    name = f"{target.key} {scenario} {era}"
                    problem, body = verify(args, url, scenario, era)
                    if problem is not None:
                        print(f"skip {name}: {problem}", file=sys.stderr)
                        skipped.append(f"{name}: {problem}")
                        continue
                    shapes += 1
                    if scenario == "tools_list" and target.key in DATA_SOURCES and data_source is None:
                        DATA_FILE.parent.mkdir(parents=True, exist_ok=True)
                        DATA_FILE.write_bytes(body)
                        data_source = f"{target.key} ({ERAS[era]} shape)"
                    combos.append((name, url, scenario, era))
                if shapes == 0:
                    unverified.append(f"{target.key} {scenario}")
        for name, url, scenario, era in combos:
            require_clean(name, "warm-up", wrk(args, url, scenario, era, args.warmup, count=True))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in combos}
        for _ in range(args.repeat):
            for scenario in args.scenarios:
                for era in args.eras:
                    for name, url, _scenario, _era in (c for c in combos if c[2:] == (scenario, era)):
                        stats = wrk(args, url, scenario, era, args.duration)
                        require_clean(name, "timed run", stats)
                        runs[name].append(stats)
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
    }
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
