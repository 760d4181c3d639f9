"""Tool sources: adapters between a layer below and the MCP core (DESIGN.md). Each turns what it adapts
into `crank.mcp.Tool`s and offers a `CatalogProvider` (`provide(scope) -> Catalog`); `crank.server` puts an
`MCPEndpoint` in front of each, the same way for both:

- `crank.sources.rpc`: the methods of an `RPCApp` (`RPCSource`, `MCPConfig`);
- `crank.sources.agents`: the published agents of a registry (`AgentSource`, `build_catalog`);
- `crank.sources.discovery` and `crank.sources.search`: an agent in discovery mode (`Discovery`, its three
  tools; `OperationIndex`, the full-text index they search).
"""

import lazy_loader

# Each name is imported from its module when first used; `__init__.pyi` lists them (for type checkers, and for
# `attach_stub`). Importing one module of the package so imports no other: docs/architecture.md, "Imports".
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
