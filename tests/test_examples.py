"""The examples run: the quick start answers both eras through the official client."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples.quickstart import app

from mcp import Client

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_quickstart_serves_books(serve: Callable[..., str], mode: str) -> None:
    url = serve(app) + "/mcp"
    async with Client(url, mode=mode) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        found = await client.call_tool("books.search", {"query": "forest"})
        missing = await client.call_tool("books.get", {"id": 99})
    assert names == ["books.search", "books.get"]
    assert found.structured_content == {
        "result": [{"id": 2, "title": "The Forest Song", "author": "Lesya Ukrainka", "year": 1911}]
    }
    assert found.content[0].text.startswith("| id | title | author | year |")
    assert missing.is_error and '"error_code":"not_found"' in missing.content[0].text


async def test_quickstart_plain_pair_in_ukrainian(serve: Callable[..., str]) -> None:
    url = serve(app) + "/mcp"
    async with httpx.AsyncClient() as client:
        response = await client.get(url + "/tools", headers={"Accept-Language": "uk"})
    titles = [tool["title"] for tool in response.json()["tools"]]
    assert titles == ["Пошук книжок", "Книжка за id"]


async def test_rpc_app_serves_rpc_openrpc_and_mcp(serve: Callable[..., str]) -> None:
    from examples.rpc_app import app as rpc_app

    url = serve(rpc_app)
    async with httpx.AsyncClient() as client:
        found = await client.post(
            url + "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "Catalog.search", "params": {"query": "kob"}}
        )
        document = (await client.get(url + "/rpc/v2")).json()
        titles = (await client.get(url + "/mcp/tools", headers={"Accept-Language": "uk"})).json()
    assert found.json()["result"][0]["internal_sku"] == "B-001"  # /rpc sees the whole product
    assert "user.delete" in [method["name"] for method in document["methods"]]
    assert [tool["title"] for tool in titles["tools"]] == ["Пошук товарів", "Товар за id", "Користувач за email"]
    async with Client(url + "/mcp") as client:
        result = await client.call_tool("Catalog.search", {"query": "kob"})
        user = await client.call_tool("user.get", {"email": "olena@example.com"})
    assert result.structured_content == {"result": [{"id": 1, "name": "Kobzar", "category": "books", "price": 12.5}]}
    assert user.structured_content == {"result": {"id": 1, "email": "olena@example.com", "name": "Olena",
                                                  "joined": "2024-03-01"}}  # fmt: skip
    async with Client(url + "/mcp/v2", mode="legacy") as client:
        refused = await client.call_tool("user.delete", {"id": 1})
    assert refused.is_error and '"code":-32001' in refused.content[0].text


def test_the_oauth_client_example_signs_in_and_calls_through_the_gateway(
    sqlite_registry: Any, serve: Callable[..., str]
) -> None:
    """examples/oauth_client.py as a user runs it: it prints the sign-in URL, the person signs in (tests/oauth.py
    plays them at npm oidc-provider), the browser lands on the example's loopback listener, and the call goes
    through a gateway agent whose workspace takes access tokens."""
    import os
    import subprocess
    import sys

    import anyio

    from crank.registry.runtime import OAuthPolicy
    from crank.server import GatewayService
    from tests.gateway import upstream
    from tests.gateway.test_gateway import publish_demo
    from tests.oauth import authorization_server, sign_in
    from tests.services import free_port

    with authorization_server() as issuer:
        publish_demo(sqlite_registry, serve(upstream.app))
        sqlite_registry.set_workspace_oauth("acme", OAuthPolicy(issuers=(issuer,)))
        port = free_port()
        root = f"http://127.0.0.1:{port}"
        serve(GatewayService(sqlite_registry, poll_interval=0.05, public_url=root), port=port)
        callback_port = free_port()
        environment = {**os.environ, "NO_BROWSER": "1", "CALLBACK_PORT": str(callback_port)}
        example = subprocess.Popen(
            [sys.executable, "examples/oauth_client.py", root + "/mcp/v1/acme/support", "get_user", '{"id": 2}'],
            cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert example.stdout is not None
            line = example.stdout.readline()
            assert line.startswith("Sign in at: "), (line, example.stderr.read() if example.poll() is not None else "")
            redirect = f"http://127.0.0.1:{callback_port}/callback"
            result = anyio.run(lambda: sign_in(line.removeprefix("Sign in at: ").strip(), redirect_uri=redirect))
            # A browser asks for the page's icon too: not the redirect, and no end to the sign-in.
            icon = httpx.get(f"http://127.0.0.1:{callback_port}/favicon.ico", timeout=10)
            assert icon.status_code == 404 and example.poll() is None
            landed = httpx.get(
                redirect, params={"code": result.code, "state": result.state, "iss": result.iss}, timeout=10
            )
            assert landed.status_code == 200
            output, errors = example.communicate(timeout=60)
        finally:
            example.kill()
    assert example.returncode == 0, errors
    assert "get_user" in output and '{"result": {"id": 2, "name": "user2"}}' in output
