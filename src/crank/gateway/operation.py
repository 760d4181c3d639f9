"""A published tool's remote operation, compiled once: input mapping -> adapter -> output mapping."""

from __future__ import annotations

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

    async def call(self, arguments: dict[str, Any]) -> Outcome:
        answer = await self.adapter.call(self.input.apply(arguments))
        value, omitted = self.output.apply(answer)
        return Outcome(value, omitted)
