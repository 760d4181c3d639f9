"""Mounting an endpoint in a Starlette app at a path that answers without a trailing slash.

A plain `Mount("/mcp", ...)` answers `POST /mcp` with a 307 redirect to `/mcp/`; MCP clients post to
the URL they were given, and not every client follows a redirect for a POST. `mount()` serves both.
"""

from __future__ import annotations

from starlette.routing import Match, Mount

from crank.types import ASGIApp, Scope

__all__ = ["mount"]


class _ExactMount(Mount):
    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and not scope["path"].endswith("/"):
            # Match `path` as if it were `path/`: the child's root path is then the mount path itself and
            # the request keeps its own path, so the endpoint sees its root (path parameters such as
            # {workspace} still work).
            match, child = super().matches({**scope, "path": scope["path"] + "/"})
            if match == Match.FULL:
                return match, child
        return super().matches(scope)


def mount(path: str, endpoint: ASGIApp, *, name: str | None = None) -> Mount:
    """A Starlette route serving `endpoint` at `path` itself and below it (`path/tools`, `path/call`)."""
    return _ExactMount(path.rstrip("/"), app=endpoint, name=name)
