"""An RPCApp for the tests that serve it from several processes (`crank serve tests.rpc.apps_shared:app`,
behind nginx: tests/cluster.py, which waits for `/readyz`).

Its Redis is `CRANK_REDIS_URL` (none: each process on its own); what the methods did is counted in another
Redis, `CRANK_TEST_COUNTER_URL`, under `CRANK_TEST_PREFIX`, so that a test sees every process's runs.
"""

from __future__ import annotations

import asyncio
import os

import redis.asyncio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from crank.rpc import RPCApp, fencing_token

PREFIX = os.environ["CRANK_TEST_PREFIX"]
counter = redis.asyncio.Redis.from_url(os.environ["CRANK_TEST_COUNTER_URL"])

rpc = RPCApp(title="Shared", redis_prefix=PREFIX + "rpc:")


@rpc.method("critical", lock=True)
async def critical() -> dict[str, int | None]:
    """Records how many runs of it are under way at once, across processes."""
    active = await counter.incr(PREFIX + "active")
    await counter.rpush(PREFIX + "seen", active)
    await asyncio.sleep(0.05)
    await counter.decr(PREFIX + "active")
    return {"pid": os.getpid(), "token": fencing_token()}


@rpc.method("square", cache=60)
async def square(n: int) -> dict[str, int]:
    await counter.incr(PREFIX + "square_runs")
    return {"square": n * n, "pid": os.getpid()}


@rpc.method("limited", rate_limit="5/minute")
async def limited() -> int:
    return os.getpid()


async def ready(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ready")


app = Starlette(routes=[Route("/readyz", ready), Mount("/", rpc)], lifespan=rpc.lifespan)
