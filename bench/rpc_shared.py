#!/usr/bin/env python3
"""The cost per call of the rpc executor's Redis-backed cache and rate limit against the in-process ones.

    python bench/rpc_shared.py                  # 3 interleaved repeats of 10 s per scenario (~3 minutes)
    python bench/rpc_shared.py --tiny           # 1-second runs, to check that it works

One uvicorn process (uvloop, httptools) on `--server-cpu` serves bench/apps/rpc_shared.py: the same methods
in process (`/local/rpc`) and through a redis-server started here (`/redis/rpc`, persistence off), which
runs on `--client-cpu` beside wrk. Scenarios: `plain` (no cache, no limit: the baseline), `cached` (every
call a cache hit) and `limited` (every call counted by a rate limit that never refuses), each in both
modes; wrk (`wrk/rpc_call.lua`) runs them one after the other, repeat after repeat, so that drift in the
machine's speed hits all alike. The report gives each scenario's median run (by req/s), p50 and p99, and
what a Redis-backed call costs more than the in-process one, in microseconds per call.

Every scenario is checked first (one call: HTTP 200, result 49), and its answers are counted during the
warm-up (or, with no warm-up, the timed runs): any error answer fails the run. Needs wrk, redis-server
and taskset; the server runs under `--python` (default: this interpreter) with this checkout's src/ first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.run import cpu_model, free_port, stop, wait_listening  # noqa: E402

HOST = "127.0.0.1"
APP = "bench.apps.rpc_shared:app"
METHODS = ("plain", "cached", "limited")
MODES = ("local", "redis")
SCENARIOS = tuple((mode, method) for method in METHODS for mode in MODES)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default=sys.executable, help="interpreter of the server (default: this one)")
    p.add_argument("--server-cpu", default="0", help="taskset CPU list of the server")
    p.add_argument("--client-cpu", default="1", help="taskset CPU list of wrk and redis-server")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--duration", type=int, default=10, help="seconds of each timed run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of load per scenario before timing")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny", action="store_true", help="one 1-second run per scenario: a check that it works")
    p.add_argument(
        "--only",
        default=",".join(f"{mode}/{method}" for mode, method in SCENARIOS),
        help="the scenarios to run, comma-separated (default: all six)",
    )
    p.add_argument("--out", type=Path, default=BENCH / "results" / "rpc_shared", help="latest.md and latest.json")
    args = p.parse_args()
    if args.tiny:
        args.duration, args.warmup, args.repeats = 1, 0, 1
    args.scenarios = [tuple(name.split("/")) for name in args.only.split(",")]
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenarios {unknown}; known: {[f'{mode}/{method}' for mode, method in SCENARIOS]}")
    return args


@contextlib.contextmanager
def redis_server(cpu: str, log: Path) -> Iterator[str]:
    program = shutil.which("redis-server")
    if program is None:
        raise SystemExit("redis-server not found (scripts/install puts it in place)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as folder:
        cmd = ["taskset", "-c", cpu, program, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no",
               "--dir", folder]  # fmt: skip
        with log.open("wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            wait_listening("redis-server", proc, port, log)
            yield f"redis://{HOST}:{port}/0"
        finally:
            stop(proc)


@contextlib.contextmanager
def server(args: argparse.Namespace, redis_url: str, log: Path) -> Iterator[str]:
    port = free_port()
    cmd = ["taskset", "-c", args.server_cpu, args.python, "-m", "uvicorn", APP, "--host", HOST, "--port", str(port),
           *"--workers 1 --loop uvloop --http httptools --log-level warning --no-access-log".split()]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
           "CRANK_BENCH_REDIS_URL": redis_url}  # fmt: skip
    env.pop("CRANK_REDIS_URL", None)  # `/local` must stay in process
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_listening("server", proc, port, log)
        yield f"http://{HOST}:{port}"
    finally:
        stop(proc)


def check(root: str, mode: str, method: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"n": 7}}).encode()
    request = urllib.request.Request(f"{root}/{mode}/rpc", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.loads(response.read())
    if answer.get("result") != 49:
        raise SystemExit(f"{mode}/{method} answered {answer}, not the result 49")


def wrk(args: argparse.Namespace, root: str, mode: str, method: str, seconds: int, count: bool) -> dict[str, Any]:
    cmd = ["taskset", "-c", args.client_cpu, "wrk", "-t1", f"-c{args.connections}", f"-d{seconds}s",
           "--timeout", "10s", "-s", str(BENCH / "wrk" / "rpc_call.lua"), f"{root}/{mode}/rpc"]  # fmt: skip
    env = {**os.environ, "BENCH_RPC_METHOD": method, **({"BENCH_COUNT": "1"} if count else {})}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0:
        raise SystemExit(f"wrk ({mode}/{method}) failed ({proc.returncode}): {proc.stderr.strip()}")
    stats: dict[str, Any] = json.loads(next(line for line in reversed(proc.stdout.splitlines())
                                            if line.startswith("{")))  # fmt: skip
    errors = stats["non2xx"] + stats["body_errors"] + stats["errors"]["status"] + stats["errors"]["timeout"]
    if errors:
        raise SystemExit(f"{mode}/{method}: {errors} failed calls in {stats}")
    return stats


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    best = {key: sorted(found, key=lambda stats: stats["rps"])[len(found) // 2] for key, found in runs.items()}
    lines = [
        f"# rpc cache and rate limit: in process and in Redis ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"{cpu_model()}, {os.cpu_count()} cores; server on CPU {args.server_cpu}, wrk and redis-server on CPU "
        f"{args.client_cpu}; {args.connections} connections, {args.repeats} interleaved repeats of "
        f"{args.duration} s, the median run by req/s.",
        "",
        "| scenario | req/s | p50 ms | p99 ms | µs per call over `plain` of the same mode |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for key, stats in best.items():
        baseline = best.get(key.split("/")[0] + "/plain")
        extra = f"{1e6 / stats['rps'] - 1e6 / baseline['rps']:+.1f}" if baseline else "–"
        lines.append(f"| {key} | {stats['rps']:,.0f} | {stats['p50_us'] / 1000:.2f} | "
                     f"{stats['p99_us'] / 1000:.2f} | {extra} |")  # fmt: skip
    lines.append("")
    for method in ("cached", "limited"):
        if f"local/{method}" not in best or f"redis/{method}" not in best:
            continue
        local, shared = best[f"local/{method}"]["rps"], best[f"redis/{method}"]["rps"]
        lines.append(f"- `{method}` in Redis: {1e6 / shared - 1e6 / local:+.1f} µs per call against in process "
                     f"({shared / local:.0%} of its throughput).")  # fmt: skip
    data = {"args": {key: str(value) for key, value in vars(args).items()}, "cpu": cpu_model(),
            "cores": os.cpu_count(), "runs": runs, "median": best}  # fmt: skip
    return "\n".join(lines) + "\n", data


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with redis_server(args.client_cpu, args.out / "redis.log") as redis_url, \
            server(args, redis_url, args.out / "server.log") as root:  # fmt: skip
        for mode, method in args.scenarios:
            check(root, mode, method)
            if args.warmup:
                wrk(args, root, mode, method, args.warmup, count=True)
        runs: dict[str, list[dict[str, Any]]] = {f"{mode}/{method}": [] for mode, method in args.scenarios}
        for _ in range(args.repeats):
            for mode, method in args.scenarios:
                stats = wrk(args, root, mode, method, args.duration, count=not args.warmup)
                runs[f"{mode}/{method}"].append(stats)
    table, data = report(args, runs)
    (args.out / "latest.md").write_text(table)
    (args.out / "latest.json").write_text(json.dumps(data, indent=2) + "\n")
    print(table)


if __name__ == "__main__":
    main()
