"""Which methods an MCP endpoint publishes (seed 002), and the endpoint's settings.

Filters, first match wins: `exclude_methods` (deny), `whitelist_methods` (allow), the method's own
opt-out (`MCP(enabled=False)`), deprecated without an explicit opt-in (hidden), `exclude_prefixes`
(deny), `expose_all` (allow), the method's opt-in (`mcp=MCP(...)`), else hidden. The operator's lists
come first: whoever deploys has the last word over the developer's decorator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crank.mcp.calls import InvalidArgumentsMode
from crank.mcp.formats import DEFAULT_FORMAT
from crank.rpc.method import Method

__all__ = ["MCPConfig", "is_published"]


@dataclass(frozen=True)
class MCPConfig:
    """One MCP endpoint over an API group. Publication is off until `enabled=True`."""

    group: str = "mcp"
    enabled: bool = False
    expose_all: bool = False
    exclude_prefixes: tuple[str, ...] = ()
    exclude_methods: tuple[str, ...] = ()
    whitelist_methods: tuple[str, ...] = ()
    apply_rate_limit: bool = False
    default_format: str = DEFAULT_FORMAT
    invalid_arguments: InvalidArgumentsMode = "result"
    translations: Path | None = None
    default_language: str = "en"
    formatter: Callable[[Method, Any], Any] | None = field(default=None, compare=False)
    """Reshapes many methods' MCP results at once; runs after each method's own transformer."""


def is_published(method: Method, config: MCPConfig) -> bool:
    name = method.name
    if name in config.exclude_methods:
        return False
    if name in config.whitelist_methods:
        return True
    if method.mcp is not None and not method.mcp.enabled:
        return False
    if method.deprecated and method.mcp is None:
        return False
    if any(name.startswith(prefix) for prefix in config.exclude_prefixes):
        return False
    if config.expose_all:
        return True
    return method.mcp is not None
