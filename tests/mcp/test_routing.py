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
