from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from crank.mcp import mount
from crank.types import Receive, Scope, Send


async def echo_scope(scope: Scope, receive: Receive, send: Send) -> None:
    body = f'{{"path": "{scope["path"]}", "root": "{scope["root_path"]}", "params": "{scope["path_params"]}"}}'.encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize(
    ("path", "root"),
    [("/mcp", "/mcp"), ("/mcp/", "/mcp"), ("/mcp/tools", "/mcp"), ("/mcp/v1/acme/support", "/mcp/v1/acme/support"),
     ("/mcp/v1/acme/support/call", "/mcp/v1/acme/support")],
)  # fmt: skip
def test_mount_serves_its_own_path_without_a_redirect(path: str, root: str) -> None:
    app = Starlette(routes=[mount("/mcp/v1/{workspace}/{agent}", echo_scope), mount("/mcp", echo_scope)])
    response = TestClient(app).post(path, follow_redirects=False)
    assert response.status_code == 200
    seen: dict[str, Any] = response.json()
    assert seen["path"] == path and seen["root"] == root
    if "acme" in path:
        assert "'workspace': 'acme'" in seen["params"] and "'agent': 'support'" in seen["params"]


async def _asgi(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.anyio
async def test_the_endpoint_router_sends_each_path_to_its_endpoint_below_any_root_path() -> None:
    from crank.mcp import EndpointRouter

    seen: list[tuple[str, str]] = []

    class Endpoint:
        def __init__(self, name: str) -> None:
            self.name = name

        async def http_app(self, scope: Any, receive: Any, send: Any) -> None:
            seen.append((self.name, scope["root_path"]))

        async def aclose(self) -> None:
            seen.append((self.name, "closed"))

    one, two = Endpoint("one"), Endpoint("two")
    router = EndpointRouter({"/mcp": one, "/mcp/v2/": two})
    for path, root in [("/mcp", ""), ("/mcp/tools", ""), ("/mcp/v2", ""), ("/api/mcp/call", "/api")]:
        await _asgi(router, {"type": "http", "path": path, "root_path": root})
    missing = await _asgi(router, {"type": "http", "path": "/other", "root_path": ""})
    closed = await _asgi(router, {"type": "websocket", "path": "/mcp"})
    assert seen == [("one", "/mcp"), ("one", "/mcp"), ("two", "/mcp/v2"), ("one", "/api/mcp")]
    assert missing[0]["status"] == 404 and closed == [{"type": "websocket.close", "code": 1000}]
