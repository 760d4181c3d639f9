#!/usr/bin/env python3
"""Instructions per gateway request as `crank serve` serves it: the request's bytes in, its answer's bytes out,
through Crank's HTTP protocol (`crank.wire.protocol`: parsing, the early-answer hook, the cycle, the writer),
uvicorn's configuration as `serve_on` builds it, the uvloop event loop's turns and the gateway's app.

`bench/count_gateway.py` counts the ASGI app alone; this script adds what the protocol and the loop do for
every request. The same 1,000-tool agent with an API key, its upstream client stubbed (no I/O): each request is
fed to a `CrankHTTPProtocol` over a transport that keeps what is written, in one run of the loop inside
`math.fsum`, so that callgrind counts those requests (and the loop's start and stop, once):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=math_fsum \\
        --callgrind-out-file=served.out .venv/bin/python bench/count_served.py call 512 --connections 32
    callgrind_annotate served.out | grep 'PROGRAM TOTALS'      # divide by 512

`--connections N` (default 1) serves N connections, one request at a time on each, as wrk's connections keep
a server busy: each turn, every connection's request is read from the loop (`loop.call_soon(data_received)`,
as a socket's transport does), and the next turn waits for all their answers. With one connection, each
request also pays the loop's idle turns that many connections share.

`call` sends the `tools/call` of bench/wrk/gateway_call.lua, `list` the first `tools/list` page, `refused` the
same `tools/call` by a tenant over its plan (answered from the head: bench/refusals.py's request). `--profile`
prints cProfile's top functions instead (timing, not counting); `--plain` serves with uvicorn's own protocol
(what Crank's adds); `--tree DIR` measures another checkout. `--target proxy` counts issue 19's reference
instead: the simplest proxy (bench/apps/gateway_proxy.py, its httpx client stubbed at `send` as Crank's is at
`request`), under uvicorn's own protocol as bench/run.py serves it; the difference is what Crank's gateway adds.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import math
import os
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

LIST_BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


class Transport(asyncio.Transport):
    """What the protocol writes to: it drains at once, as a fast client's socket does; the last two pieces written
    are kept (an answer's head and body), and how many writes there were."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.writes = 0
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes += 1
        self.written = [*self.written[-1:], bytes(data)]

    def writelines(self, data: Any) -> None:
        # One call, as a socket's `writev`: nothing joined (asyncio's default joins, and callgrind would count
        # each byte of that copy).
        self.writes += 1
        self.written = [bytes(piece) for piece in data][-2:]

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)


def request(path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    head = [b"POST " + path.encode() + b" HTTP/1.1", *(name + b": " + value for name, value in headers),
            b"content-length: " + str(len(body)).encode()]  # fmt: skip
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("call", "list", "refused"))
    p.add_argument("requests", type=int, nargs="?", default=500)
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1], help="checkout to measure")
    p.add_argument("--profile", action="store_true", help="print cProfile's top functions instead")
    p.add_argument("--plain", action="store_true", help="uvicorn's own httptools protocol instead of Crank's")
    p.add_argument("--connections", type=int, default=1, help="connections, each with one request at a time")
    p.add_argument("--target", choices=("crank", "proxy"), default="crank", help="the gateway, or the simplest proxy")
    args = p.parse_args()
    sys.path[:0] = [str(args.tree / "src"), str(args.tree)]
    os.environ.setdefault("BENCH_UPSTREAM", "http://127.0.0.1:9")  # never reached: the client is stubbed
    import uvloop

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory() as tmp:
        run(loop, args.kind, args.requests, tmp, args.profile, args.plain, args.connections, args.target)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the app's worker threads (registry reads) are not waited for: nothing of them is measured


def run(
    loop: asyncio.AbstractEventLoop,
    kind: str,
    requests: int,
    tmp: str,
    profile: bool,
    plain: bool,
    connections: int,
    target: str = "crank",
) -> None:
    import uvicorn
    from uvicorn.server import ServerState

    from bench.profile_gateway import BODY, load
    from crank.wire.connection_limits import ConnectionLimits
    from crank.wire.protocol import protocol_for

    app, path, headers = load(target, tmp, True)
    plain = plain or target == "proxy"
    if target == "crank":
        source = getattr(app, "source", None) or app.catalogs
        source.poll_interval = 3600  # no registry poll among the counted requests
    if kind == "refused":
        if target != "crank":
            raise SystemExit("the proxy refuses nothing")
        refuse_every_call(app)
    body = LIST_BODY if kind == "list" else BODY
    raw = request(path, headers, body)
    limits = ConnectionLimits()
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    protocol_class: Any = HttpToolsProtocol if plain else protocol_for(limits, app.answer_early, app.answers_early_now)
    # As `serve_on` configures uvicorn (crank.wire.listen).
    config = uvicorn.Config(app, log_config=None, access_log=False, http=protocol_class, ws="none",
                            proxy_headers=plain, server_header=plain,
                            timeout_keep_alive=limits.keepalive_timeout)  # fmt: skip
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Tue, 01 Dec 2026 22:00:00 GMT")]  # uvicorn.Server's (`server` is off)
    if plain:
        state.default_headers.append((b"server", b"uvicorn"))
    transports = [Transport() for _ in range(connections)]
    protocols = []
    for transport in transports:
        protocol = protocol_class(config=config, server_state=state, app_state={}, _loop=loop)  # type: ignore[call-arg]
        protocol.connection_made(transport)
        protocols.append(protocol)
    transport = transports[0]

    async def serve(count: int) -> None:
        """`count` requests, one at a time on each of the connections, the loop turning as it does when serving:
        each turn, every connection's request is read (from the loop, as a socket's transport calls
        `data_received`), and the next turn waits for all their answers."""
        for _ in range(count // connections):
            answered = state.total_requests + connections
            for protocol in protocols:
                loop.call_soon(protocol.data_received, raw)
            while state.total_requests < answered or state.tasks:
                await asyncio.sleep(0)

    def batch(count: int) -> float:
        loop.run_until_complete(serve(count))
        return 0.0

    batch(300)  # warm-up: caches, the watcher started
    print(b"".join(transport.written[-2:])[:200], file=sys.stderr)
    for each in transports:
        each.writes = 0
    gc.collect()
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        batch(requests)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(int(os.environ.get("BENCH_PROFILE_LINES", "35")))
        return
    math.fsum(batch(requests) for _ in range(1))  # one loop run of all the requests: its start and stop once
    assert sum(t.writes for t in transports) >= requests, "every request was answered"


def refuse_every_call(app: Any) -> None:
    """Limit the workspace to one request a minute and spend it: every counted request is then refused from its
    head (the protocol's early answer), as bench/refusals.py's hostile tenant is."""
    from crank.registry.runtime import Limits, RateLimit

    registry = app.source.registry
    registry.put_workspace("bench", "Bench", limits=Limits(rate=RateLimit(calls=1, window=3600)))
    app.source.reload()


if __name__ == "__main__":
    main()
