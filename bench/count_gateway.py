#!/usr/bin/env python3
"""Instructions per gateway request, counted by callgrind: a measure that a shared, noisy machine cannot move.

Drives the gateway's ASGI app in-process (the 1,000-tool agent of bench/apps/gateway_crank.py with an API
key, its upstream client stubbed as `bench/profile_gateway.py --stub-upstream` does) and steps each request's
coroutine by hand inside `math.fsum`, so that callgrind counts those requests alone (set-up, warm-up and the
event loop's own turns left out):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=math_fsum \\
        --callgrind-out-file=call.out .venv/bin/python bench/count_gateway.py call 500
    callgrind_annotate call.out | grep 'PROGRAM TOTALS'      # divide by 500

`call` sends the `tools/call` of bench/wrk/gateway_call.lua, `list` the first `tools/list` page, `read` the
`resources/read` of the same operation as a resource template (issue 22: within 10% of its `tools/call`). `--tree DIR`
measures another checkout (its src/ and bench/ first on the path), e.g. the commit before a change in a
`git worktree`. Without valgrind it runs the same requests and prints the first answer (a check that the
requests work). A request that would wait for I/O stops the run: the stubbed upstream answers at once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import sys
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

LIST_BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
READ_BODY = b'{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"crank://bench/agent/get_item/7"}}'
"""`get_item` read as a resource (the bench agent binds it with `resource: true`): the same GET as `call`."""


def post_scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The ASGI scope of a POST to `path` on a loopback server (bench/profile_gateway.py sends it too)."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}  # fmt: skip


def asgi_post(app: Any, scope: dict[str, Any], body: bytes, answers: list[bytes]) -> Coroutine[Any, Any, None]:
    """The app's coroutine for one request with `body`, in one message (returned, not awaited here: no frame of
    this function is counted); the first answer's body goes into `answers`. A second receive (the app waiting
    for a disconnect) never returns."""
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await asyncio.sleep(3600)
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not answers:
            answers.append(message["body"])

    coroutine: Coroutine[Any, Any, None] = app(dict(scope), receive, send)
    return coroutine


def count_requests(app: Any, scope: dict[str, Any], body: bytes, answers: list[bytes], requests: int) -> None:
    """`requests` requests, each driven to its end without the event loop (one that waits for I/O is an error),
    inside `math.fsum`: what callgrind's `--toggle-collect=math_fsum` counts, and nothing else."""

    def step(_: int) -> float:
        coroutine = asgi_post(app, scope, body, answers)
        try:
            while True:
                if coroutine.send(None) is not None:
                    raise RuntimeError("a request waited for I/O: the count would include the event loop")
        except StopIteration:
            return 0.0

    math.fsum(step(i) for i in range(requests))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("call", "list", "read"))
    p.add_argument("requests", type=int, nargs="?", default=500)
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1], help="checkout to measure")
    args = p.parse_args()
    sys.path[:0] = [str(args.tree / "src"), str(args.tree)]
    os.environ.setdefault("BENCH_UPSTREAM", "http://127.0.0.1:9")  # never reached: the client is stubbed
    asyncio.run(run(args.kind, args.requests))


async def run(kind: str, requests: int) -> None:
    from bench.profile_gateway import BODY, load

    body = {"call": BODY, "list": LIST_BODY, "read": READ_BODY}[kind]
    with tempfile.TemporaryDirectory() as tmp:
        app, path, headers = load("crank", tmp, True)
        source = getattr(app, "source", None) or app.catalogs  # `catalogs` in checkouts before issue 10
        source.poll_interval = 3600  # no registry poll among the counted requests
        scope = post_scope(path, [*headers, (b"content-length", str(len(body)).encode())])
        answers: list[bytes] = []

        for _ in range(300):  # warm-up: caches, the watcher started
            await asgi_post(app, scope, body, answers)
        await asyncio.sleep(0.05)
        print(answers[0][:160], file=sys.stderr)
        keys = getattr(source, "keys", None)
        if keys is not None:  # under valgrind the set-up is slow: the keys must stay trusted (not 503) while counted
            keys.list_max_age = 86400.0
            keys.confirmed()
        gc.collect()
        answers.clear()  # the first counted request's answer, checked below: a count of refusals is no count
        count_requests(app, scope, body, answers, requests)
        if not answers[0].startswith(b'{"jsonrpc":"2.0","id":1,"result":'):
            raise SystemExit(f"the counted requests failed: {answers[0][:300]!r}")


if __name__ == "__main__":
    main()
