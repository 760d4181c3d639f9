"""A published tool's remote operation, compiled once: input mapping -> adapter -> output mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from crank.exceptions import ConfigurationError
from crank.gateway.adapters.base import Adapter
from crank.gateway.adapters.http import HTTPAdapter
from crank.gateway.adapters.jsonrpc import JSONRPCAdapter
from crank.gateway.mapping import InputMapping, OutputMapping
from crank.types import JSONObject

__all__ = ["Outcome", "RemoteOperation"]


@dataclass(frozen=True)
class Outcome:
    value: Any
    omitted: int  # list items the output mapping left out


class RemoteOperation:
    def __init__(self, runtime: JSONObject, client: httpx.AsyncClient) -> None:
        where = f"tool {runtime.get('tool_name')!r}"
        protocol = runtime.get("protocol")
        target = runtime.get("target") or {}
        config = runtime.get("execution_config") or {}
        if protocol == "http":
            self.adapter: Adapter = HTTPAdapter(client, target, config, where=where)
            method = str(target.get("method", "GET"))
        elif protocol == "jsonrpc":
            self.adapter = JSONRPCAdapter(client, target, config, where=where)
            method = "POST"  # every argument goes to `params` unless the mapping says otherwise
        else:
            raise ConfigurationError(f"{where}: protocol {protocol!r} is not supported (supported: http, jsonrpc)")
        url = str(target.get("url", "")) if protocol == "http" else ""
        self.input = InputMapping.compile(runtime.get("input_mapping"), method, url, where=where)
        self.output = OutputMapping.compile(runtime.get("output_mapping"), where=where)
        self.forward_headers = _forward_headers(config.get("forward_headers"), where=where)

    async def call(self, arguments: dict[str, Any], client_headers: Mapping[str, str] | None = None) -> Outcome:
        """`client_headers` (lower-case names) are the MCP request's; only `forward_headers` of them go on."""
        parts = self.input.apply(arguments)
        if self.forward_headers and client_headers:
            forwarded = {name: client_headers[name] for name in self.forward_headers if name in client_headers}
            parts.headers = {**forwarded, **parts.headers}  # the mapping's own headers win
        answer = await self.adapter.call(parts)
        value, omitted = self.output.apply(answer)
        return Outcome(value, omitted)


# The caller's credentials for Crank, and what describes the MCP request itself, never go upstream.
_NEVER_FORWARDED = frozenset({
    "authorization", "cookie", "host", "content-length", "content-type", "transfer-encoding", "connection",
    "proxy-authorization", "te", "upgrade", "keep-alive", "accept-encoding",
})  # fmt: skip


def _forward_headers(names: Any, *, where: str) -> tuple[str, ...]:
    """`execution_config.forward_headers`: the client headers this operation passes upstream."""
    if names is None:
        return ()
    if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
        raise ConfigurationError(f"{where}: forward_headers must be a list of header names")
    lowered = tuple(name.lower() for name in names)
    refused = sorted(name for name in lowered if name in _NEVER_FORWARDED or name.startswith("mcp-"))
    if refused:
        raise ConfigurationError(f"{where}: forward_headers may not include {', '.join(refused)}")
    return lowered
