#!/usr/bin/env python3
"""What a response stream costs: the same `tools/call` answered as JSON, and as an SSE stream carrying one
progress notification before the answer (issue 22: at most 1.5x).

Drives `MCPEndpoint` in-process through raw ASGI (no sockets, so the figure is the server's own work), the two
kinds interleaved in rounds so that a noisy machine moves both alike:

    .venv/bin/python bench/stream_cost.py --calls 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from crank import _json  # noqa: E402
from crank.mcp import CallContext, Catalog, MCPEndpoint, Tool  # noqa: E402


async def reports(arguments: dict[str, Any], context: CallContext) -> Any:
    await context.progress(1, 1)
    return {"done": True}


HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
           (b"mcp-protocol-version", b"2025-11-25"), (b"host", b"127.0.0.1")]  # fmt: skip


def body(token: bool) -> bytes:
    params: dict[str, Any] = {"name": "reports", "arguments": {}}
    if token:
        params["_meta"] = {"progressToken": 1}
    return _json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})


async def run(endpoint: MCPEndpoint, payload: bytes, calls: int) -> float:
    scope = {"type": "http", "method": "POST", "path": "/", "root_path": "", "query_string": b"",
             "headers": HEADERS, "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "scheme": "http",
             "http_version": "1.1"}  # fmt: skip
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    started = time.perf_counter()
    for _ in range(calls):
        await endpoint(dict(scope), receive, send)
    return (time.perf_counter() - started) / calls


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    endpoint = MCPEndpoint(Catalog([Tool(name="reports", invoker=reports)]))
    json_times, stream_times = [], []
    for _ in range(args.rounds):
        json_times.append(await run(endpoint, body(False), args.calls))
        stream_times.append(await run(endpoint, body(True), args.calls))
    as_json, as_stream = statistics.median(json_times), statistics.median(stream_times)
    print(f"JSON answer      {as_json * 1e6:8.1f} us per call")
    print(f"SSE with progress{as_stream * 1e6:8.1f} us per call")
    print(f"ratio            {as_stream / as_json:8.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
