#!/usr/bin/env python3
"""What a user's first call costs when a tool acts as the user (issue 37), against the same first call with one
account's token: the gateway `gateway-crank-jwt-static` (a bearer token by reference), `gateway-crank-exchange`
(RFC 8693 at the issuer's `/token`, kept per user) and `gateway-crank-connection` (the user's own connection,
read from the token vault and decrypted, then kept), served as `bench/run.py` serves them, in front of nginx,
each asked by `--users` users in turn, twice each.

    python bench/token_exchange.py [--users 50]

A user's first call pays for its token's signature check on all three, on the exchange target for the exchange
too (a round trip to the issuer on loopback), and on the connection target for a vault read and its decryption
(a SQLite read in a thread, AES-GCM); its second call pays for none. The report gives the median latency of each
(ms, one client, one call at a time: latency, not throughput; `bench/run.py` measures that) and the cost of a
first exchange and of a first decryption, the differences of the first calls' medians. Needs nginx; the targets
run under this interpreter with this checkout's src/ first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.run import (  # noqa: E402
    CONNECTION_GATEWAY,
    EXCHANGE_GATEWAY,
    STATIC_GATEWAY,
    TARGETS,
    gateway_registry,
    serve,
    target_env,
    upstream_server,
)

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_item", "arguments": {"id": 7}}}


def latencies(url: str, tokens: list[str]) -> tuple[list[float], list[float]]:
    """Each user's first and second call (seconds), one at a time, each user on a connection of its own."""
    first, second = [], []
    for token in tokens:
        headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2025-11-25"}  # fmt: skip
        with httpx.Client(timeout=30) as http:
            http.post(url, json={**CALL, "method": "ping", "params": {}}, headers=headers)  # the connection, warm
            for kept in (first, second):
                started = time.perf_counter()
                answer = http.post(url, json=CALL, headers=headers)
                kept.append(time.perf_counter() - started)
                result = answer.json().get("result", {})
                if answer.status_code != 200 or result.get("isError"):
                    raise SystemExit(f"{url}: the call failed: {answer.text[:500]}")
    return first, second


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=50)
    p.add_argument("--server-cpu", default="0")
    p.add_argument("--client-cpu", default="1")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "token_exchange")
    args = p.parse_args()
    targets = {target.key: target for target in TARGETS}
    medians: dict[str, tuple[float, float]] = {}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-exchange-")))
        upstream = stack.enter_context(upstream_server(args.client_cpu, args.out / "logs" / "nginx.log"))
        db, _ = gateway_registry(sys.executable, upstream, work)
        for key in (STATIC_GATEWAY, EXCHANGE_GATEWAY, CONNECTION_GATEWAY):
            target = targets[key]
            token_file = work / f"{key}.token"
            extra = {"BENCH_UPSTREAM": upstream.url, "BENCH_GATEWAY_DB": str(db), **dict(target.env),
                     "BENCH_GATEWAY_TOKEN_FILE": str(token_file),
                     "BENCH_GATEWAY_TOKENS": str(args.users + 1)}  # fmt: skip
            with serve(sys.executable, target, args.server_cpu, args.out / "logs" / f"{key}.log",
                       target_env(extra)) as served:  # fmt: skip
                tokens = token_file.read_text().split()[1:]  # users the server has not seen
                first, second = latencies(served.url, tokens)
            medians[key] = (statistics.median(first) * 1000, statistics.median(second) * 1000)
    static, exchange = medians[STATIC_GATEWAY], medians[EXCHANGE_GATEWAY]
    connection = medians[CONNECTION_GATEWAY]
    report = {
        "users": args.users,
        "static_ms": {"first": static[0], "second": static[1]},
        "exchange_ms": {"first": exchange[0], "second": exchange[1]},
        "connection_ms": {"first": connection[0], "second": connection[1]},
        "first_exchange_ms": exchange[0] - static[0],
        "first_decryption_ms": connection[0] - static[0],
    }
    print(f"{args.users} users, median ms per call (first, then kept):")
    print(f"  one account's token (bearer)       first {static[0]:.2f}  second {static[1]:.2f}")
    print(f"  the user's own (token exchange)    first {exchange[0]:.2f}  second {exchange[1]:.2f}")
    print(f"  the user's own (vault connection)  first {connection[0]:.2f}  second {connection[1]:.2f}")
    print(f"  a first exchange costs about {exchange[0] - static[0]:.2f} ms more (a round trip to the issuer)")
    print(f"  a first decryption costs about {connection[0] - static[0]:.2f} ms more (a vault read, AES-GCM)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
