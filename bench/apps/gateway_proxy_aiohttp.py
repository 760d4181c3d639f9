"""Gateway target: the simplest proxy of `gateway_proxy` with aiohttp as the upstream client (bench/.venv-peers).

The same ASGI app (orjson, a dict lookup, one pooled upstream GET, the same `CallToolResult`), with one
`aiohttp.ClientSession` (default connector: pooled keep-alive connections, at most 100), created on the
first call because aiohttp binds it to the running loop. It shows what the upstream client itself costs:
on the benchmark machine one pooled GET costs far less CPU with aiohttp than with httpx.
"""

from __future__ import annotations

import aiohttp

from bench.apps.gateway_proxy import make_app

_session: aiohttp.ClientSession | None = None


async def fetch(url: str) -> tuple[int, bytes]:
    global _session
    if _session is None:
        _session = aiohttp.ClientSession()
    async with _session.get(url) as response:
        return response.status, await response.read()


async def aclose() -> None:
    if _session is not None:
        await _session.close()


app = make_app(fetch)
