"""Mounting an endpoint in a Starlette app at a path that answers without a trailing slash.

A plain `Mount("/mcp", ...)` answers `POST /mcp` with a 307 redirect to `/mcp/`; MCP clients post to
the URL they were given, and not every client follows a redirect for a POST. `mount()` serves both.
"""

from __future__ import annotations

from typing import Any

from starlette.routing import Match, Mount

from crank.types import ASGIApp, Scope

__all__ = ["mount"]


class _ExactMount(Mount):
    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        root_path = scope.get("root_path", "")
        route_path = scope["path"][len(root_path) :] if scope["path"].startswith(root_path) else scope["path"]
        if scope["type"] == "http" and route_path == self.path:
            child: dict[str, Any] = {
                "path_params": dict(scope.get("path_params", {})),
                "app_root_path": scope.get("app_root_path", root_path),
                "root_path": root_path + self.path,
                "endpoint": self.app,
            }
            return Match.FULL, child
        return super().matches(scope)


def mount(path: str, endpoint: ASGIApp, *, name: str | None = None) -> Mount:
    """A Starlette route serving `endpoint` at `path` itself and below it (`path/tools`, `path/call`)."""
    return _ExactMount(path.rstrip("/"), app=endpoint, name=name)
