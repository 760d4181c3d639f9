"""Secret references (crank.gateway.secrets): only what the operator gave a workspace, refused at publish and
at call time without a value, never another workspace's."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from crank.admin.actions import publish_agent
from crank.exceptions import ConfigurationError
from crank.gateway.secrets import ENV_ALLOW_VARIABLE, ENV_PREFIX_VARIABLE, SECRET_DIRS_VARIABLE
from crank.registry import Registry
from crank.server import CrankServer, GatewayService
from crank.settings import given_settings
from mcp import Client

pytestmark = pytest.mark.anyio

received: list[str] = []


async def echo(request: Request) -> JSONResponse:
    received.append(request.headers.get("authorization", ""))
    return JSONResponse({"ok": True})


upstream = Starlette(routes=[Route("/{rest:path}", echo)])


def publish(registry: Registry, workspace: str, secret: str, url: str = "http://127.0.0.1:9/x") -> None:
    if workspace not in {info["slug"] for info in registry.workspaces()}:
        registry.create_workspace(workspace, workspace.title())
    registry.put_operation(workspace, "get_thing", {
        "protocol": "http", "target": {"url": url}, "description": "A thing.",
        "execution_config": {"auth": {"type": "bearer", "secret": secret}},
    })  # fmt: skip
    registry.put_agent(workspace, "desk", {"bindings": [{"operation": "get_thing"}]})
    publish_agent(registry, workspace, "desk")


@pytest.mark.parametrize("secret", ["env:HOME", "env:PGPASSWORD", "env:AWS_SECRET_ACCESS_KEY"])
def test_a_variable_nobody_gave_the_workspace_is_refused_at_publish(
    sqlite_registry: Registry, secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGPASSWORD", "pg-value")
    with pytest.raises(ConfigurationError, match=r"tool 'get_thing': environment variable '\w+' is not given to "
                                                 r"workspace 'acme' \(the operator lists it in CRANK_SECRET_ENV_ALLOW"
                       ) as refused:  # fmt: skip
        publish(sqlite_registry, "acme", secret)
    assert "pg-value" not in str(refused.value) and sqlite_registry.versions("acme", "desk") == []


def test_another_workspaces_secret_is_refused(sqlite_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ALLOW_VARIABLE, "billing:STRIPE_KEY")
    monkeypatch.setenv(ENV_PREFIX_VARIABLE, "billing:BILLING_, shop:SHOP_")
    for secret in ("env:STRIPE_KEY", "env:BILLING_TOKEN"):
        with pytest.raises(ConfigurationError, match="is not given to workspace 'shop'"):
            publish(sqlite_registry, "shop", secret)
    publish(sqlite_registry, "billing", "env:STRIPE_KEY")
    publish(sqlite_registry, "billing", "env:BILLING_TOKEN")
    publish(sqlite_registry, "shop", "env:SHOP_TOKEN")
    # A variable two workspaces' entries match belongs to neither: a prefix cannot reach into another's.
    monkeypatch.setenv(ENV_PREFIX_VARIABLE, "billing:BILLING_, shop:SHOP_, shop-eu:SHOP_EU_")
    with pytest.raises(ConfigurationError, match="is not given to workspace 'shop' alone"):
        publish(sqlite_registry, "shop", "env:SHOP_EU_TOKEN")


def test_secret_files_lie_in_the_workspaces_own_folder(
    sqlite_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_DIRS_VARIABLE, str(tmp_path / "secrets"))
    for workspace in ("shop", "billing"):
        (tmp_path / "secrets" / workspace).mkdir(parents=True)
        (tmp_path / "secrets" / workspace / "key").write_text(f"{workspace}-value")
    publish(sqlite_registry, "shop", f"file:{tmp_path / 'secrets' / 'shop' / 'key'}")
    for other in (tmp_path / "secrets" / "billing" / "key", tmp_path / "secrets" / "shop" / ".." / "billing" / "key"):
        with pytest.raises(ConfigurationError, match=r"secret files of workspace 'shop' must be in one of"):
            publish(sqlite_registry, "shop", f"file:{other}")


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error is True
    payload: dict[str, Any] = json.loads(result.content[0].text)
    return payload


async def test_a_withdrawn_allowance_is_a_configuration_error_at_call_time(
    sqlite_registry: Registry, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    received.clear()
    monkeypatch.setenv("HOME", "/home/someone-private")
    monkeypatch.setenv(ENV_ALLOW_VARIABLE, "acme:HOME")  # given when the version was built...
    publish(sqlite_registry, "acme", "env:HOME", serve(upstream) + "/x")
    url = serve(GatewayService(sqlite_registry, require_api_keys=False)) + "/mcp/v1/acme/desk"
    monkeypatch.setenv(ENV_ALLOW_VARIABLE, "acme:SHOP_TOKEN")  # ...and withdrawn before the first call
    with caplog.at_level(logging.INFO, logger="crank"):
        async with Client(url, mode="auto") as client:
            result = await client.call_tool("get_thing", {})
    error = _error(result)
    assert (error["error_code"], error["error_class"]) == ("configuration_error", "configuration")
    assert received == []  # nothing went upstream
    assert "someone-private" not in result.content[0].text and "someone-private" not in caplog.text
    assert "environment variable 'HOME' is not given to workspace 'acme'" in caplog.text


async def test_a_replica_without_the_allowance_serves_the_agent_and_is_not_ready(
    sqlite_registry: Registry, serve: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    received.clear()
    monkeypatch.setenv("SHOP_TOKEN", "shop-token-value")
    monkeypatch.setenv(ENV_ALLOW_VARIABLE, "acme:SHOP_TOKEN")  # the publisher's allowance...
    publish(sqlite_registry, "acme", "env:SHOP_TOKEN", serve(upstream) + "/x")
    monkeypatch.delenv(ENV_ALLOW_VARIABLE)  # ...which the serving replica does not have
    settings = given_settings(data_dir=tmp_path, admin_token="t" * 32, require_api_keys=False,
                              egress_allow="127.0.0.0/8")  # fmt: skip
    root = serve(CrankServer(settings, registry=sqlite_registry))
    with caplog.at_level(logging.INFO, logger="crank"):
        async with Client(root + "/mcp/v1/acme/desk", mode="auto") as client:
            result = await client.call_tool("get_thing", {})
    error = _error(result)
    assert (error["error_code"], error["error_class"]) == ("configuration_error", "configuration")
    assert received == [] and "shop-token-value" not in result.content[0].text + caplog.text
    ready = httpx.get(root + "/readyz")
    assert ready.status_code == 503
    [missing] = ready.json()["missing_secrets"]
    assert (missing["agent"], missing["tool"], missing["reference"]) == ("desk", "get_thing", "env:SHOP_TOKEN")
    assert "is not given to workspace 'acme'" in missing["problem"]
