#!/usr/bin/env python3
"""What one refusal costs the gateway: a tenant over its plan, unpaced (docs/benchmarks.md, "The cost of one
refusal").

    python bench/refusals.py                     # crank serve's protocol, then plain uvicorn; 8 s each, twice
    python bench/refusals.py --server crank --seconds 1 --rounds 1     # tests/test_bench_hostile.py

The gateway of `bench/hostile.py` (`bench/apps/gateway_hostile.py`) on `--server-cpu`, its `hostile`
workspace limited to 1 request a second, so that nearly every request is refused with 429; wrk on
`--client-cpu` sends the hostile tenant's valid call on 8 connections as fast as they are answered. Prints,
per round, the requests a second and the gateway's CPU time per request (from /proc/PID/stat), and exits 1
when fewer than nine in ten answers were 429 (the refusal was not what was measured).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
from bench.hostile import HOSTILE_PATH, SERVERS, cpu_seconds, gateway, make_registry, wrk  # noqa: E402
from bench.run import upstream_server  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", choices=SERVERS, action="append", help="repeatable; default: crank, then uvicorn")
    p.add_argument("--seconds", type=int, default=8, help="of each round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--python", default=sys.executable, help="interpreter of the gateway (default: this one)")
    p.add_argument("--server-cpu", default="0")
    p.add_argument("--client-cpu", default="1")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    failed = False
    with (
        tempfile.TemporaryDirectory() as directory,
        upstream_server(args.client_cpu, Path(directory) / "nginx.log") as up,
    ):
        db, keys = make_registry(args.python, up.url, Path(directory), {"hostile": 1})
        for server in args.server or list(SERVERS):
            args.server = server  # what `gateway` reads
            with gateway(args, db, up.url, Path(directory) / f"{server}.log") as (root, pid):
                env = {"BENCH_AUTH": keys["hostile"], "BENCH_ERA": "legacy"}
                for _ in range(args.rounds):
                    before = cpu_seconds(pid)
                    proc = wrk(args, "hostile_valid.lua", root + HOSTILE_PATH, args.connections, args.seconds, env)
                    out, err = proc.communicate()
                    spent = cpu_seconds(pid) - before
                    rate = float(next(line for line in out.splitlines() if "Requests/sec" in line).split()[1])
                    non_2xx = next((line for line in out.splitlines() if "Non-2xx" in line), "0").split()[-1]
                    refused = int(non_2xx) / max(rate * args.seconds, 1)
                    failed |= refused < 0.9
                    print(f"{server}: {rate:,.0f} requests/s, {spent / (rate * args.seconds) * 1e6:.1f} µs of gateway "
                          f"CPU per request, {refused:.0%} refused")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
