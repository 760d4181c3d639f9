"""Scale-out benchmark: gateway `tools/call` through nginx in front of `crank serve --workers K`.

For each K (default 1, 2 and the machine's core count) one `crank serve --role mcp --workers K` runs behind
its own nginx with the project's load-balancer configuration (deploy/nginx/crank.conf, started as the
deployment tests start it: tests/cluster.py). All of them serve the 1,000-tool agent of the gateway
benchmark (bench/apps/gateway_crank.py, one SQLite registry, which several workers share in WAL mode)
in front of the benchmark's nginx upstream (bench/upstream/nginx.conf), and wrk calls `get_item` through
them with bench/wrk/gateway_call.lua. Every configuration listens at once (an idle one costs nothing) and
the timed runs interleave, so drift in the machine's speed hits every K alike; each row is the run with
the median req/s. `os.cpu_count()` is printed with the table: on a machine with C cores, K > C workers
only take turns, and wrk, nginx and the upstream take their share of the same cores.

    python -m bench.scaleout                       # 1, 2 and cpu_count workers, 3 x 10 s each
    python -m bench.scaleout --workers 1,2,4 --seconds 20 --repeats 5
    python -m bench.scaleout --smoke               # 1 and 2 workers, one 2 s run each: does it work?
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tests.cluster import Nginx

from bench.apps.gateway_crank import PATH
from bench.run import HOST, ROOT, Upstream, free_port, gateway_registry, stop, upstream_server, wait_listening, wrk
from crank.gateway.egress import LOOPBACK

ERA = "legacy"  # the 2025-11-25 request shape (bench/wrk/common.lua)


@dataclass
class Front:
    """`crank serve --workers K` and the nginx in front of it."""

    workers: int
    url: str


def parse_args() -> argparse.Namespace:
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default=f"1,2,{cores}", help="comma-separated worker counts [1,2,cpu_count]")
    p.add_argument("--seconds", type=int, default=10, help="length of each timed run")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per worker count (interleaved)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections")
    p.add_argument("--threads", type=int, default=2, help="wrk threads")
    p.add_argument("--cpus", default=f"0-{cores - 1}", help="taskset CPU list for wrk and the upstream [all]")
    p.add_argument("--smoke", action="store_true", help="1 and 2 workers, one 2 s run each")
    p.add_argument("--out", type=Path, default=None, help="folder for the logs (default: a temporary one)")
    args = p.parse_args()
    if args.smoke:
        args.workers, args.seconds, args.repeats = "1,2", 2, 1
    args.counts = sorted({int(count) for count in args.workers.split(",")})
    args.client_cpu = args.cpus  # what bench.run.wrk pins wrk to
    return args


@contextlib.contextmanager
def crank_front(workers: int, database: Path, logs: Path) -> Iterator[Front]:
    """`crank serve --role mcp --workers K` on the registry, behind nginx with deploy/nginx/crank.conf."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")])),
        "CRANK_ROLE": "mcp",
        "CRANK_LISTEN": f"{HOST}:{port}",
        "CRANK_DATABASE_URL": f"sqlite:///{database}",
        "CRANK_DATA_DIR": str(logs / f"data-{workers}"),
        "CRANK_EGRESS_ALLOW": ",".join(LOOPBACK),
        "CRANK_LOG_LEVEL": "warning",
    }
    log = logs / f"crank-{workers}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve", "--workers", str(workers)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    nginx = Nginx(logs / f"nginx-{workers}", free_port())
    try:
        wait_listening(f"crank serve --workers {workers}", proc, port, log)
        nginx.configure([port])
        nginx.start()
        yield Front(workers, nginx.url + PATH)
    finally:
        nginx.stop()
        stop(proc)


def check(front: Front, key: str) -> None:
    """One call through the front must be answered with the upstream's item, else the numbers mean nothing."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_item", "arguments": {"id": 7}}}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    answer = httpx.post(front.url, json=body, headers=headers, timeout=30)
    item = answer.json().get("result", {}).get("structuredContent", {}).get("result", {})
    if answer.status_code != 200 or item.get("id") != 7:
        raise SystemExit(f"{front.workers} workers: a call through nginx failed: {answer.status_code} {answer.text}")


def measure(args: argparse.Namespace, fronts: list[Front], key: str) -> dict[int, list[dict[str, Any]]]:
    runs: dict[int, list[dict[str, Any]]] = {front.workers: [] for front in fronts}
    for repeat in range(args.repeats):
        for front in fronts:
            wrk(args, front.url, "gateway_call", ERA, 2 if args.smoke else 3, auth=key)  # warm up
            result = wrk(args, front.url, "gateway_call", ERA, args.seconds, auth=key)
            runs[front.workers].append(result)
            print(f"  repeat {repeat + 1}, {front.workers} workers: {result['rps']:,.0f} req/s", file=sys.stderr)
    return runs


def table(runs: dict[int, list[dict[str, Any]]]) -> str:
    cores = os.cpu_count()
    lines = [
        f"Gateway tools/call through nginx (deploy/nginx/crank.conf) to crank serve --workers K; "
        f"os.cpu_count() = {cores}, {platform.machine()}, Python {platform.python_version()}",
        "",
        "| workers | req/s (median run) | p50 ms | p99 ms | x 1 worker | errors |",
        "|---|---|---|---|---|---|",
    ]
    base: float | None = None
    for workers, results in sorted(runs.items()):
        median = sorted(results, key=lambda r: r["rps"])[len(results) // 2]
        base = base or (median["rps"] if workers == 1 else None)
        ratio = f"{median['rps'] / base:.2f}" if base else "-"
        errors = sum(median["errors"].values()) + median["non2xx"]
        lines.append(f"| {workers} | {median['rps']:,.0f} | {median['p50_us'] / 1000:.2f} | "
                     f"{median['p99_us'] / 1000:.2f} | {ratio} | {errors} |")  # fmt: skip
    spread = {w: statistics.pstdev([r["rps"] for r in rs]) for w, rs in runs.items() if len(rs) > 1}
    if spread:
        lines += ["", "req/s spread (population stdev over the runs): "
                  + ", ".join(f"{w} workers {s:,.0f}" for w, s in sorted(spread.items()))]  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    with contextlib.ExitStack() as stack:
        logs = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scaleout-")))
        logs.mkdir(parents=True, exist_ok=True)
        upstream: Upstream = stack.enter_context(upstream_server(args.cpus, logs / "upstream.log"))
        database, key = gateway_registry(sys.executable, upstream, logs)
        fronts = [stack.enter_context(crank_front(count, database, logs)) for count in args.counts]
        for front in fronts:
            check(front, key)
        runs = measure(args, fronts, key)
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
