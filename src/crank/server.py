"""ASGI apps that put the layers together.

`RPCService` serves an `RPCApp`'s JSON-RPC routes and, for each configured path, the MCP endpoint of
one API group at that path (the first API version) and at `<path>/<version>`.

```python
app = RPCService(rpc, mcp={"/mcp": MCPConfig(group="mcp", enabled=True)})
```
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from crank.mcp.routing import mount
from crank.mcp.rpc_source import MCPConfig, MCPSource
from crank.rpc import RPCApp
from crank.types import Receive, Scope, Send

__all__ = ["MCPConfig", "RPCService"]


class RPCService:
    """An `RPCApp` with its MCP endpoints. Publication stays off for a path until its config says `enabled`."""

    def __init__(self, rpc: RPCApp, *, mcp: Mapping[str, MCPConfig] | None = None) -> None:
        self.rpc = rpc
        self.mcp = dict(mcp or {})
        self._asgi: Starlette | None = None

    def build(self) -> Starlette:
        """Compile every schema, catalog and route now (also done on the first request)."""
        if self._asgi is None:
            routes: list[BaseRoute] = self.rpc.routes()
            self.rpc.build()  # no more methods from here on
            for path, config in self.mcp.items():
                if config.enabled:
                    routes += self._mcp_routes(path.rstrip("/"), config)
            self._asgi = Starlette(routes=routes)
        return self._asgi

    def _mcp_routes(self, path: str, config: MCPConfig) -> list[BaseRoute]:
        default, *others = self.rpc.versions
        # Versioned paths first: `path` itself is a mount that would also match `path/v2`.
        routes = [mount(f"{path}/{version}", MCPSource(self.rpc, config, version).endpoint()) for version in others]
        return [*routes, mount(path, MCPSource(self.rpc, config, default).endpoint())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.build()(scope, receive, send)
