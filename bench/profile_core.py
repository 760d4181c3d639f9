#!/usr/bin/env python3
"""CPU cost of one in-process MCP `tools/call` (no sockets, no wrk): where Crank's time goes.

Sends the exact request of bench/wrk/tools_call.lua (`--era legacy` or `modern`) to a target's ASGI app
in a loop, one request at a time. Two modes:

* `direct`: the app is called with a prepared scope, and its coroutine is stepped by hand (the echo
  path never suspends), so no event loop is measured: the app's own work only.
* `uvicorn`: the raw request bytes go through uvicorn's httptools protocol over a fake transport on
  uvloop, as under the benchmark: parsing, the request task, the app, and the response writing.

Prints CPU microseconds per call (best of `--rounds`); `--profile` adds cProfile's top functions.
The timed rounds run inside the builtin `sorted` (nothing on the measured paths sorts), so that
callgrind can count the instructions of those rounds alone; divide its total by `--calls`:

    .venv/bin/python bench/profile_core.py crank --era modern
    .venv/bin/python bench/profile_core.py bare --mode uvicorn
    valgrind --tool=callgrind --collect-atstart=no --toggle-collect=builtin_sorted \
        --callgrind-out-file=/tmp/cg.out .venv/bin/python bench/profile_core.py crank --calls 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib
import pstats
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS = {"crank": "bench.apps.crank_echo:app", "bare": "bench.apps.bare:app",
           "fixture": "examples.conformance_app:app", "fixture-mounted": "bench.apps.fixture_mounted:app",
           "rpcservice": "bench.apps.crank_rpcservice:app"}  # fmt: skip
PATHS = {"fixture": "/mcp", "fixture-mounted": "/mcp", "rpcservice": "/mcp"}
"""Where a target serves MCP, when not at its root (the fixture, as `uvicorn examples.conformance_app:app`)."""
ARGUMENTS = b'"name":"echo","arguments":{"text":"hello from wrk"}'
META = (
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
)


def request(era: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The body and headers (lowercase names, as ASGI gives them) of bench/wrk/common.lua's request."""
    members = ARGUMENTS + (b"," + META if era == "modern" else b"")
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{' + members + b"}}"
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2026-07-28" if era == "modern" else b"2025-11-25"),
    ]
    if era == "modern":
        headers += [(b"mcp-method", b"tools/call"), (b"mcp-name", b"echo")]
    headers.append((b"content-length", str(len(body)).encode()))
    return body, headers


def load(target: str) -> Any:
    module, _, name = TARGETS[target].partition(":")
    if target == "bare" and not (ROOT / "bench" / "data" / "tools_list_1000.json").exists():
        # bare.py reads the recorded tools/list result at import; tools/call never uses it.
        read_bytes = Path.read_bytes
        Path.read_bytes = lambda self: b'{"result":{"tools":[]}}'  # type: ignore[method-assign]
        try:
            return getattr(importlib.import_module(module), name)
        finally:
            Path.read_bytes = read_bytes  # type: ignore[method-assign]
    return getattr(importlib.import_module(module), name)


def direct_runner(app: Any, era: str, path: str = "/") -> tuple[Any, list[bytes]]:
    body, headers = request(era)
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000), "scheme": "http", "root_path": "",
             "headers": headers, "state": {}, "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b""}  # fmt: skip
    message = {"type": "http.request", "body": body, "more_body": False}
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return message

    async def send(event: dict[str, Any]) -> None:
        if event["type"] == "http.response.body":
            out.append(event["body"])

    def run(n: int) -> None:
        for _ in range(n):
            coro = app(dict(scope), receive, send)
            try:
                coro.send(None)
            except StopIteration:
                continue
            raise RuntimeError("the app suspended: this driver only runs paths that never wait")

    return run, out


class _Transport(asyncio.Transport):
    def __init__(self, out: list[bytes]) -> None:
        super().__init__()
        self.out = out

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def uvicorn_runner(app: Any, era: str, loop: asyncio.AbstractEventLoop, path: str = "/") -> tuple[Any, list[bytes]]:
    from uvicorn.config import Config
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    body, headers = request(era)
    wire = b"POST %s HTTP/1.1\r\n" % path.encode() + b"".join(
        b"%s: %s\r\n" % (name.title(), value) for name, value in headers
    )
    raw = wire + b"\r\n" + body
    config = Config(app, http="httptools", lifespan="off", log_level="warning", access_log=False)
    config.load()
    state = ServerState()
    out: list[bytes] = []
    protocol = HttpToolsProtocol(config, state, {}, _loop=loop)
    protocol.connection_made(_Transport(out))

    async def run_async(n: int) -> None:
        tasks = state.tasks
        for _ in range(n):
            protocol.data_received(raw)
            for task in list(tasks):
                await task

    def run(n: int) -> None:
        loop.run_until_complete(run_async(n))

    return run, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", choices=sorted(TARGETS))
    p.add_argument("--era", choices=("legacy", "modern"), default="legacy", help="request shape (bench/wrk/common.lua)")
    p.add_argument("--mode", choices=("direct", "uvicorn"), default="direct")
    p.add_argument("--calls", type=int, default=20000, help="calls per round")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds; the best is reported")
    p.add_argument("--warmup", type=int, default=2000)
    p.add_argument("--profile", action="store_true", help="cProfile one round")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    app = load(args.target)
    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    path = PATHS.get(args.target, "/")
    run, out = (
        direct_runner(app, args.era, path) if args.mode == "direct" else uvicorn_runner(app, args.era, loop, path)
    )
    run(args.warmup)
    print(f"response: {b''.join(out)[-200:]!r}", file=sys.stderr)
    best = float("inf")
    for _ in range(args.rounds):
        out.clear()
        gc.collect()
        cpu = time.process_time()
        sorted((args.calls,), key=run)  # callgrind's marker: see the module's docstring
        best = min(best, (time.process_time() - cpu) / max(args.calls, 1) * 1e6)
    print(
        f"{args.target} {args.era} {args.mode}: {best:.2f} us CPU per tools/call (best of {args.rounds} x {args.calls})"
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run(args.calls)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
