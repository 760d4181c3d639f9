#!/usr/bin/env python3
"""CPU cost of one gateway `tools/call`, in-process (no uvicorn, no wrk): where Crank's time goes.

Drives a gateway target's ASGI app directly with the exact request of bench/wrk/gateway_call.lua,
`--concurrency` calls at a time, against a running upstream (`BENCH_UPSTREAM`, e.g. the nginx of
bench/upstream/nginx.conf). Prints CPU microseconds per call; with `--profile`, cProfile's self time
grouped by package and the top functions.

    BENCH_UPSTREAM=http://127.0.0.1:8080 .venv/bin/python bench/profile_gateway.py crank --profile
    BENCH_UPSTREAM=... .venv/bin/python bench/profile_gateway.py proxy
    BENCH_UPSTREAM=... bench/.venv-peers/bin/python bench/profile_gateway.py proxy-aiohttp

`crank` builds a fresh SQLite registry in a temporary directory (the 1,000-tool agent of
bench/apps/gateway_crank.py) and serves it with an API key, as the benchmark's `gateway-crank` does.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.count_gateway import asgi_post, post_scope  # noqa: E402
from bench.inprocess import run_against_upstream  # noqa: E402

BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_item","arguments":{"id":7}}}'
MODERN_BODY = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_item","arguments":{"id":7},'
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
)
MODERN_HEADERS = [(b"mcp-method", b"tools/call"), (b"mcp-name", b"get_item")]
PACKAGES = (
    *("crank", "httpx", "httpcore", "h11", "anyio", "aiohttp", "httptools", "starlette", "uvicorn", "asyncio"),
    "importlib",
    *("orjson", "jsonschema_rs", "hashlib", "ipaddress", "urllib", "idna", "email", "typing", "contextlib"),
)


def stub_upstream(client: Any) -> None:
    """Make the client answer every request at once with the upstream's item, without any I/O: what is
    left is the target's own work. Crank's `UpstreamClient` is stubbed at its `request`, so
    building the request's parts and decoding the answer stay measured; an httpx client at `send`."""
    import httpx

    from bench.apps.gateway_catalog import item
    from crank.gateway.client import UpstreamClient, UpstreamResponse

    content = json.dumps(item(7), separators=(",", ":")).encode()
    if isinstance(client, UpstreamClient):

        async def request(method: str, url: str, **_: Any) -> UpstreamResponse:
            return UpstreamResponse(200, {"content-type": "application/json"}, content)

        client.request = request  # type: ignore[method-assign]
        return

    async def send(request: httpx.Request, **_: Any) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=content, request=request)

    client.send = send


def load(target: str, tmp: str, stub: bool) -> tuple[Any, str, list[tuple[bytes, bytes]]]:
    headers = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
               (b"mcp-protocol-version", b"2025-11-25"), (b"host", b"127.0.0.1")]  # fmt: skip
    if target == "crank":
        from bench.apps import gateway_crank

        db = str(Path(tmp) / "registry.sqlite3")
        key = gateway_crank.setup(db, os.environ["BENCH_UPSTREAM"])
        os.environ["BENCH_GATEWAY_DB"] = db
        app = gateway_crank.make_app()
        if stub:
            stub_upstream(app.source.client)
        return app, gateway_crank.PATH, [*headers, (b"authorization", f"Bearer {key}".encode())]
    if target == "proxy":
        from bench.apps import gateway_proxy

        if stub:
            stub_upstream(gateway_proxy.client)
        return gateway_proxy.app, "/", headers
    if target == "proxy-crank-client":
        from bench.apps import gateway_proxy_crank_client

        if stub:
            stub_upstream(gateway_proxy_crank_client._client)
        return gateway_proxy_crank_client.app, "/", headers
    if target == "proxy-aiohttp":
        if stub:
            raise SystemExit("--stub-upstream stubs Crank's client or httpx: not aiohttp")
        from bench.apps import gateway_proxy_aiohttp

        return gateway_proxy_aiohttp.app, "/", headers
    raise SystemExit(f"unknown target {target!r}")


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        app, path, headers = load(args.target, tmp, args.stub_upstream)
        body = BODY
        if args.era == "modern":  # the 2026-07-28 shape of bench/wrk/common.lua
            body = MODERN_BODY
            version = [(b"mcp-protocol-version", b"2026-07-28")]
            headers = [h for h in headers if h[0] != b"mcp-protocol-version"] + version + MODERN_HEADERS
        scope = post_scope(path, headers)
        first: list[bytes] = []

        async def one() -> None:
            await asgi_post(app, scope, body, first)

        async def batch(n: int) -> None:
            for _ in range(n // args.concurrency):
                await asyncio.gather(*(one() for _ in range(args.concurrency)))

        await batch(max(args.concurrency, 500))  # warm up: connections, caches
        print(f"response: {first[0][:160]!r}...", file=sys.stderr)
        profiler = cProfile.Profile() if args.profile else None
        cpu = time.process_time()
        if profiler:
            profiler.enable()
        await batch(args.calls)
        if profiler:
            profiler.disable()
        per_call = (time.process_time() - cpu) / args.calls * 1e6
        notes = (", under cProfile" if profiler else "") + (", upstream stubbed" if args.stub_upstream else "")
        print(f"{args.target}: {per_call:.0f} us CPU per tools/call ({args.calls} calls, {args.concurrency} at a time"
              f"{notes})")  # fmt: skip
        if profiler:
            report(profiler, args.top)
        if args.target == "proxy-aiohttp":
            from bench.apps import gateway_proxy_aiohttp

            await gateway_proxy_aiohttp.aclose()


def report(profiler: cProfile.Profile, top: int) -> None:
    stats = pstats.Stats(profiler)
    by_package: Counter[str] = Counter()
    total = 0.0
    for (filename, _line, _name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        total += tt
        parts = Path(filename).parts
        package = next((p for p in PACKAGES if p in parts or f"{p}.py" in parts or p in filename), "other")
        by_package[package] += tt
    print("self time by package:")
    for package, tt in by_package.most_common():
        print(f"  {tt / total * 100:5.1f}%  {package}")
    print(f"top {top} functions by self time:")
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", choices=("crank", "proxy", "proxy-aiohttp", "proxy-crank-client"))
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--profile", action="store_true", help="cProfile the timed calls")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--era", choices=("legacy", "modern"), default="legacy", help="request shape (bench/wrk/common.lua)")
    p.add_argument("--stub-upstream", action="store_true", help="answer upstream requests in-process (no I/O)")
    run_against_upstream(run, p.parse_args())


if __name__ == "__main__":
    main()
