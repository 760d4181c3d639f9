"""Gateway target: the simplest proxy of `gateway_proxy` on Crank's own upstream client.

The same ASGI app (orjson, a dict lookup, one pooled upstream GET, the same `CallToolResult`) with
`crank.gateway.client.UpstreamClient`, the client Crank's gateway uses. Not the reference of the
issue's targets (that is the proxy on aiohttp, the fastest common Python client): against this one,
Crank and the proxy share the client, so the ratio is what Crank's own work costs (parsing, keys,
validation, mapping, metrics, the protocol envelope).
"""

from __future__ import annotations

from bench.apps.gateway_proxy import make_app
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import LOOPBACK, EgressPolicy

_client = UpstreamClient(egress=EgressPolicy(LOOPBACK))  # the bench's upstream runs on loopback


async def fetch(url: str) -> tuple[int, bytes]:
    response = await _client.request("GET", url, params=None, headers={}, body=None, timeout=10)
    return response.status, response.body


app = make_app(fetch)
