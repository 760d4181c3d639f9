"""The rpc executor's cache and rate limit, in process and in Redis, side by side in one process.

`/local/rpc` and `/redis/rpc` serve the same three methods: `plain` (nothing around the call, the baseline),
`cached` (`cache=3600`: after the first call every call is a hit) and `limited` (a rate limit too high to
refuse anything, so every call is counted and runs). `/redis/rpc`'s app uses `CRANK_BENCH_REDIS_URL`.
Served by bench/rpc_shared.py.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.routing import Mount

from crank.rpc import RPCApp


def build(redis_url: str | None) -> RPCApp:
    rpc = RPCApp(title="bench", redis_url=redis_url, redis_prefix="bench:rpc:")

    @rpc.method("plain")
    async def plain(n: int) -> int:
        return n * n

    @rpc.method("cached", cache=3600)
    async def cached(n: int) -> int:
        return n * n

    @rpc.method("limited", rate_limit="1000000000/minute")
    async def limited(n: int) -> int:
        return n * n

    return rpc


local = build(None)
shared = build(os.environ["CRANK_BENCH_REDIS_URL"])
app = Starlette(routes=[Mount("/local", local), Mount("/redis", shared)], lifespan=shared.lifespan)
