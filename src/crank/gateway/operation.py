"""A published tool's remote operation, compiled once: input mapping -> adapter -> output mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crank.exceptions import ConfigurationError
from crank.gateway.adapters.base import Adapter
from crank.gateway.adapters.http import HTTPAdapter
from crank.gateway.adapters.jsonrpc import JSONRPCAdapter
from crank.gateway.client import UpstreamClient
from crank.gateway.credentials import TokenCache
from crank.gateway.mapping import InputMapping, OutputMapping, RequestParts
from crank.gateway.safety import Confirmation, Idempotency, fingerprint
from crank.registry.runtime import RuntimeTool
from crank.state import MemoryStore, StateStore
from crank.types import JSONObject
from crank.wire.auth import Principal

__all__ = ["Outcome", "Placement", "RemoteOperation"]


@dataclass(frozen=True)
class Outcome:
    value: Any
    omitted: int  # list items the output mapping left out


@dataclass(frozen=True)
class Placement:
    """Where a published operation serves: what idempotency keys and confirmation tokens are bound to."""

    workspace: str
    agent: str
    version: int


class RemoteOperation:
    def __init__(
        self,
        tool: RuntimeTool,
        client: UpstreamClient,
        *,
        state: StateStore | None = None,
        placement: Placement | None = None,
        tokens: TokenCache | None = None,
    ) -> None:
        """`tokens`: the process's OAuth client-credentials tokens, shared by the operations that use the same
        token (crank.gateway.credentials); a fresh cache when None."""
        where = f"tool {tool.tool_name!r}"
        config = tool.execution_config
        placement = placement or Placement("", "", 0)
        workspace = placement.workspace  # whose secrets and share of the upstream's connections its calls use
        tokens = tokens if tokens is not None else TokenCache()
        self.workspace = workspace
        self.connections = tokens.connections
        """The users' own connections its credential may use (`crank.gateway.user_connections`)."""
        if tool.protocol == "http":
            self.adapter: Adapter = HTTPAdapter(client, tool.target, config, where=where, workspace=workspace,
                                                tokens=tokens)  # fmt: skip
        else:  # every argument goes to `params` unless the mapping says otherwise
            self.adapter = JSONRPCAdapter(client, tool.target, config, where=where, workspace=workspace, tokens=tokens)
        method = tool.http_method
        operation = f"{placement.workspace}/{tool.operation_id or tool.tool_name}"
        self.state = state or MemoryStore()
        self.idempotency = Idempotency.compile(config.idempotency, tool.input_schema or {}, operation, where=where)
        definition = fingerprint(placement.agent, placement.version, operation, tool.to_json())
        self.confirmation = Confirmation.compile(config.confirmation, method, definition)
        # oauth2: a token request, and after a 401 a renewal and the one request sent again, may come on top.
        fetched = config.auth is not None and config.auth.type in ("oauth2", "token_exchange", "user_connection")
        # A user's own connection is asked for before anything else: a confirmation token is not used up by a call
        # whose user must connect first (and calls again).
        self.prepares = config.auth is not None and config.auth.type == "user_connection"
        self.spends = self.confirmation is not None or self.idempotency is not None
        """Whether a call spends something before its request (a confirmation, an idempotency key)."""
        self.checks_body = self.spends and tool.protocol == "http" and config.body.kind != "json"
        """Whether its request is written once before anything is spent: a form or file that cannot be written (a
        value that is no file, a body over the bound) fails before the user is asked to confirm it."""
        attempts = self.adapter.retries + 1 + (3 if fetched else 0)
        self.in_flight_ttl = self.adapter.timeout * attempts + 10
        url = tool.target.url if tool.protocol == "http" else ""
        self.target = f"{method} {url}" if url else f"the JSON-RPC method {tool.target.method} at {tool.target.url}"
        """What the call reaches, in plain words (the question a person is asked to confirm names it)."""
        unplaced = frozenset({self.idempotency.argument}) if self.idempotency else frozenset()
        self.input = InputMapping.compile(tool.input_mapping, method, url, where=where, unplaced=unplaced)
        self.output = OutputMapping.compile(tool.output_mapping, where=where)
        self.forward_headers = _forward_headers(config.forward_headers, where=where)

    async def call(
        self,
        arguments: dict[str, Any],
        client_headers: Mapping[str, str] | None = None,
        caller: Principal | None = None,
        *,
        confirmed: bool = False,
    ) -> Outcome:
        """Confirmation (destructive operations), then idempotency, then the request.

        `client_headers` (lower-case names) are the MCP request's; only `forward_headers` of them go on (never
        its credentials). `caller` is who made the call: its id is what confirmation tokens and idempotency keys
        are bound to, and a tool acting as the user sends its credentials (a token exchange). `confirmed`: the
        user confirmed this very call through the client (no token is asked for).
        """
        who = caller.id if caller is not None else ""
        # A user's own connection before a confirmation or an idempotency key is spent on the call (the request
        # itself obtains it otherwise: one look-up less per call).
        if self.prepares and self.spends and not self.adapter.prepared(caller):
            await self.adapter.prepare(caller)
        if self.checks_body:
            unconfirmed = self.confirmation.without_token(arguments) if self.confirmation is not None else arguments
            self.adapter.check(self._parts(unconfirmed, client_headers))
        if self.confirmation is not None:
            if confirmed:
                arguments = self.confirmation.without_token(arguments)
            else:
                arguments = await self.confirmation.check(self.state, arguments, who)
        if self.idempotency is None:  # the common case, awaited here: one coroutine level less per call
            value, omitted = self.output.apply(await self.adapter.call(self._parts(arguments, client_headers), caller))
            return Outcome(value, omitted)

        async def once() -> JSONObject:
            value, omitted = self.output.apply(await self.adapter.call(self._parts(arguments, client_headers), caller))
            return {"value": value, "omitted": omitted}

        stored = await self.idempotency.run(self.state, arguments, self.in_flight_ttl, once, who)
        return Outcome(stored["value"], stored["omitted"])

    def _parts(self, arguments: dict[str, Any], client_headers: Mapping[str, str] | None) -> RequestParts:
        parts = self.input.apply(arguments)
        if self.forward_headers and client_headers:
            forwarded = {name: client_headers[name] for name in self.forward_headers if name in client_headers}
            parts.headers = {**forwarded, **parts.headers}  # the mapping's own headers win
        if self.idempotency is not None and arguments.get(self.idempotency.argument) is not None:
            parts.headers[self.idempotency.header] = str(arguments[self.idempotency.argument])
        return parts


# The caller's credentials for Crank, and what describes the MCP request itself, never go upstream.
_NEVER_FORWARDED = frozenset({
    "authorization", "cookie", "host", "content-length", "content-type", "transfer-encoding", "connection",
    "proxy-authorization", "te", "upgrade", "keep-alive", "accept-encoding",
})  # fmt: skip


def _forward_headers(names: tuple[str, ...], *, where: str) -> tuple[str, ...]:
    """`execution_config.forward_headers`: the client headers this operation passes upstream."""
    lowered = tuple(name.lower() for name in names)
    refused = sorted(name for name in lowered if name in _NEVER_FORWARDED or name.startswith("mcp-"))
    if refused:
        raise ConfigurationError(f"{where}: forward_headers may not include {', '.join(refused)}")
    return lowered
