"""Serving endpoints at paths: inside a Starlette app (`mount`), or in front of one (`EndpointRouter`).

A plain `Mount("/mcp", ...)` answers `POST /mcp` with a 307 redirect to `/mcp/`; MCP clients post to
the URL they were given, and not every client follows a redirect for a POST. `mount()` serves both.

`EndpointRouter` sends each request under an endpoint's path straight to it and the rest to an app of your
own: one prefix check per request instead of that app's middleware and router, which cost a served
`tools/call` about a fifth of its speed (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Protocol

from starlette.routing import Match, Mount

from crank.types import ASGIApp, Receive, Scope, Send
from crank.wire.asgi import send_response, serve_lifespan

__all__ = ["EndpointRouter", "mount"]


class _Endpoint(Protocol):
    """What `EndpointRouter` serves: an `MCPEndpoint`, or anything with its `http_app` and `aclose`."""

    http_app: ASGIApp

    def aclose(self) -> Awaitable[None]: ...


class EndpointRouter:
    """An ASGI app: requests to each endpoint's path (`/mcp`, and below it) go to that endpoint, everything else
    to `app` (a 404 without one). Lifespan goes to `app`; without one, the router answers it and closes the
    endpoints at shutdown.

        app = EndpointRouter({"/mcp": endpoint}, app=Starlette(routes=[...]))
    """

    def __init__(self, endpoints: Mapping[str, _Endpoint], app: ASGIApp | None = None) -> None:
        self._endpoints = [(path.rstrip("/"), endpoint) for path, endpoint in endpoints.items()]
        # The longest path first, so that `/mcp/v2` wins over `/mcp` for its own requests.
        self._endpoints.sort(key=lambda item: len(item[0]), reverse=True)
        self._targets = [(path, path + "/", endpoint.http_app) for path, endpoint in self._endpoints]
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            root: str = scope.get("root_path", "")
            if root and path.startswith(root):  # served below a prefix (`uvicorn --root-path`): paths are after it
                path = path[len(root) :]
            for prefix, below, target in self._targets:
                if path == prefix or path.startswith(below):
                    # As Starlette's Mount does it: the endpoint finds its routes below its root path.
                    scope["root_path"] = root + prefix
                    await target(scope, receive, send)
                    return
        if self.app is not None:
            await self.app(scope, receive, send)
        elif scope["type"] == "lifespan":
            await serve_lifespan(receive, send, shutdown=self._close)
        elif scope["type"] == "http":
            await send_response(send, 404, b'{"error":"Not found"}')
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1000})

    async def _close(self) -> None:
        for _, endpoint in self._endpoints:
            await endpoint.aclose()


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
