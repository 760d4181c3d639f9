"""Tool sources: adapters between a layer below and the MCP core (DESIGN.md). Each turns what it adapts
into `crank.mcp.Tool`s and offers a `CatalogProvider` (`provide(scope) -> Catalog`); `crank.server` puts an
`MCPEndpoint` in front of each, the same way for both:

- `crank.sources.rpc`: the methods of an `RPCApp` (`RPCSource`, `MCPConfig`);
- `crank.sources.agents`: the published agents of a registry (`AgentSource`, `build_catalog`);
- `crank.sources.discovery` and `crank.sources.search`: an agent in discovery mode (`Discovery`, its three
  tools; `OperationIndex`, the full-text index they search).
"""

from __future__ import annotations

from crank.sources.agents import AgentSource, build_catalog
from crank.sources.discovery import Discovery
from crank.sources.rpc import MCPConfig, RPCSource, is_published
from crank.sources.search import OperationIndex

__all__ = ["AgentSource", "Discovery", "MCPConfig", "OperationIndex", "RPCSource", "build_catalog", "is_published"]
