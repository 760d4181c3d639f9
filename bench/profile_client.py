#!/usr/bin/env python3
"""CPU cost of one pooled upstream GET: Crank's `UpstreamClient` against aiohttp and httpx.

The gateway's client is Crank's own code because the library clients cost more than the rest of a
call (crank/gateway/client.py says why). This measures the claim: `--calls` GETs of the fixed JSON
item of bench/upstream/nginx.conf, `--concurrency` at a time, each client pooled and warmed up, CPU
microseconds of this process per request (nginx runs elsewhere), in interleaved rounds.

    BENCH_UPSTREAM=http://127.0.0.1:8080 .venv/bin/python bench/profile_client.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from bench.inprocess import run_against_upstream  # noqa: E402

Get = Callable[[int], Awaitable[bytes]]


async def crank_client(base: str) -> tuple[Get, Callable[[], Awaitable[None]]]:
    from crank.gateway.client import UpstreamClient
    from crank.gateway.egress import LOOPBACK, EgressPolicy

    client = UpstreamClient(egress=EgressPolicy(LOOPBACK))  # nginx on loopback

    async def get(n: int) -> bytes:
        response = await client.request("GET", f"{base}/items/{n}", params=None, headers={}, body=None, timeout=10)
        assert response.status == 200
        return response.body

    return get, client.aclose


async def aiohttp_client(base: str) -> tuple[Get, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
    timeout = aiohttp.ClientTimeout(total=10)

    async def get(n: int) -> bytes:
        async with session.get(f"{base}/items/{n}", timeout=timeout, allow_redirects=False) as response:
            assert response.status == 200
            return await response.read()

    return get, session.close


async def httpx_client(base: str) -> tuple[Get, Callable[[], Awaitable[None]]]:
    import httpx

    client = httpx.AsyncClient()

    async def get(n: int) -> bytes:
        response = await client.get(f"{base}/items/{n}")
        assert response.status_code == 200
        return response.content

    return get, client.aclose


CLIENTS = {"crank": crank_client, "aiohttp": aiohttp_client, "httpx": httpx_client}


async def cpu_per_request(get: Get, calls: int, concurrency: int) -> float:
    async def worker(count: int) -> None:
        for n in range(count):
            await get(n)

    started = time.process_time()
    await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
    return (time.process_time() - started) / (calls // concurrency * concurrency) * 1e6


async def run(args: argparse.Namespace) -> None:
    base = os.environ["BENCH_UPSTREAM"]
    clients = {name: await CLIENTS[name](base) for name in args.clients}
    for get, _ in clients.values():
        await cpu_per_request(get, 1000, args.concurrency)  # warm up: connections, caches
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(args.rounds):
        for name, (get, _) in clients.items():
            samples[name].append(await cpu_per_request(get, args.calls, args.concurrency))
    for name, values in samples.items():
        print(f"{name:8} {statistics.median(values):7.1f} us CPU per request (median of {args.rounds} rounds: "
              f"{', '.join(f'{v:.1f}' for v in values)})")  # fmt: skip
    for _, close in clients.values():
        await close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", nargs="+", choices=tuple(CLIENTS), default=["crank", "aiohttp"])
    p.add_argument("--calls", type=int, default=10000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    run_against_upstream(run, p.parse_args())


if __name__ == "__main__":
    main()
