"""Upstream credentials from the API description (issue 21): the import reads `securitySchemes` and `security`,
each operation records what it requires, a scheme without a credential is said before the first call (the import,
the publish, `/readyz`), and the workspace's credential per scheme reaches the upstream: Prism serving a real
description that declares every kind of scheme (`@readme/oas-examples`' security.json), which answers 401 when a
declared scheme is not satisfied."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from crank.admin.actions import credential_gaps, publish_agent
from crank.admin.changes import reimport
from crank.cli import main
from crank.gateway.secrets import missing_credentials
from crank.registry import Registry
from crank.registry.runtime import ExecutionConfig, SchemeCredential, UserConnection
from crank.server import GatewayService
from mcp import Client
from tests.realapis import SECURITY, TRAIN_TRAVEL, document, prism

OPERATIONS = {  # security.json: the operation, the scheme it requires, how it is sent
    "put_anything_api_key": ("apiKey_header", "header"),
    "get_anything_api_key": ("apiKey_query", "query"),
    "post_anything_bearer": ("bearer", "bearer"),
    "post_anything_basic": ("basic", "basic"),
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with prism(SECURITY) as base:
        yield base


def _imported(registry: Registry, base: str) -> None:
    registry.create_workspace("sec", "Security")
    reimport(registry, "sec", "openapi", document(SECURITY), base_url=base, republish=False)
    registry.put_agent("sec", "desk", {"bindings": [{"operation": name} for name in OPERATIONS]})


def test_the_import_records_what_each_operation_requires(sqlite_registry: Registry, upstream: str) -> None:
    _imported(sqlite_registry, upstream)
    specs = sqlite_registry.operations("sec")
    for name, (scheme, kind) in OPERATIONS.items():
        (requirement,) = ExecutionConfig.model_validate(specs[name]["execution_config"]).requires
        assert (requirement.scheme, requirement.type) == (scheme, kind)
    # Its client-credentials token URL is plain http on another host: never a client secret in clear text, so the
    # scheme is a token the operator gives (bearer), as for the other flows.
    insecure = ExecutionConfig.model_validate(specs["put_anything_oauth2"]["execution_config"]).requires[0]
    assert (insecure.scheme, insecure.type) == ("oauth2_clientCredentials", "bearer")
    assert "execution_config" not in specs["post_anything_no_auth"]  # no security: nothing required
    assert "requires" not in (specs["get_anything_optional_auth"].get("execution_config") or {})  # `{}`: optional
    gaps = {gap.scheme: gap for gap in credential_gaps(sqlite_registry, "sec", list(OPERATIONS))}
    assert set(gaps) == {scheme for scheme, _ in OPERATIONS.values()}
    assert gaps["bearer"].how().startswith("crank workspace credential sec bearer env:NAME")


def test_a_scheme_without_a_credential_is_said_before_the_first_call_and_fails_clearly(
    sqlite_registry: Registry, upstream: str, serve: Callable[..., str]
) -> None:
    _imported(sqlite_registry, upstream)
    report = publish_agent(sqlite_registry, "sec", "desk")
    missing = [finding for finding in report.findings if finding.rule == "missing-credential"]
    assert {finding.message.split(" ")[3] for finding in missing} == {s for s, _ in OPERATIONS.values()}
    gateway = serve(GatewayService(sqlite_registry, require_api_keys=False))
    assert httpx.get(gateway + "/readyz", timeout=10).json() == {"status": "ready"}  # nothing built yet
    assert httpx.get(gateway + "/mcp/v1/sec/desk/tools", timeout=10).status_code == 200  # built on this request
    ready = httpx.get(gateway + "/readyz", timeout=10)
    assert ready.status_code == 200  # a tenant's gap, listed: never a replica out of its load balancer
    listed = {entry["scheme"]: entry for entry in ready.json()["missing_credentials"]}
    assert listed["apiKey_header"]["origins"] == [upstream]
    assert listed["apiKey_header"]["tools"] == ["put_anything_api_key"]
    assert (
        f"crank workspace credential sec apiKey_header env:NAME --origin {upstream}" in listed["apiKey_header"]["how"]
    )
    result = _call(gateway, "put_anything_api_key")  # Prism: 401, the declared key is missing
    assert result["error_code"] == "upstream_unauthorized" and result["recoverable"] is False


def test_the_workspaces_credential_per_scheme_reaches_the_upstream(
    sqlite_registry: Registry, upstream: str, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "sec:SEC_KEY,sec:SEC_TOKEN,sec:SEC_BASIC")
    monkeypatch.setenv("SEC_KEY", "key-value")
    monkeypatch.setenv("SEC_TOKEN", "token-value")
    monkeypatch.setenv("SEC_BASIC", "user:password")
    _imported(sqlite_registry, upstream)
    for scheme, reference in (("apiKey_header", "env:SEC_KEY"), ("apiKey_query", "env:SEC_KEY"),
                              ("bearer", "env:SEC_TOKEN"), ("basic", "env:SEC_BASIC")):  # fmt: skip
        credential = SchemeCredential(secret=reference, origins=(upstream,))
        sqlite_registry.set_workspace_credential("sec", scheme, credential)
    report = publish_agent(sqlite_registry, "sec", "desk")
    assert not [finding for finding in report.findings if finding.rule == "missing-credential"]
    view = sqlite_registry.published()[0].runtime
    auth = {tool.tool_name: tool.execution_config.auth for tool in view.tools}
    assert auth["post_anything_basic"] is not None and auth["post_anything_basic"].type == "basic"
    assert auth["put_anything_api_key"] is not None and auth["put_anything_api_key"].name == "X-API-KEY"
    gateway = serve(GatewayService(sqlite_registry, require_api_keys=False))
    assert httpx.get(gateway + "/readyz", timeout=10).json() == {"status": "ready"}
    for name in OPERATIONS:  # Prism checks that each declared scheme is satisfied: 401 otherwise
        assert "error_code" not in _call(gateway, name), name


def test_credentials_from_the_cli_and_the_import_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream: str
) -> None:
    for name in ("DATABASE_URL", "ADMIN_TOKEN", "LISTEN", "ROLE", "SETTINGS_FILE"):
        monkeypatch.delenv(f"CRANK_{name}", raising=False)
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    assert runner.invoke(main, ["workspace", "create", "sec"]).exit_code == 0
    schemes = ["--auth-scheme", "bearer=env:SEC_TOKEN", "--auth-scheme", "oauth2=crank-client:env:SEC_CLIENT"]
    imported = runner.invoke(main, ["import", "openapi", str(SECURITY), "-w", "sec", "--base-url", upstream, *schemes])
    assert imported.exit_code == 0, imported.output
    assert "credentials: apiKey_header (header) is required by 2 operation(s)" in imported.output
    assert "credentials: bearer (" not in imported.output  # given on the command line
    assert "credentials given: publish the agents that bind these operations" in imported.output
    listed = json.loads(runner.invoke(main, ["workspace", "credential", "sec"]).output)
    bound = [upstream.lower()]  # the origin the operations that require each scheme call
    client = {"secret": "env:SEC_CLIENT", "client_id": "crank-client", "origins": bound}
    assert listed == {"bearer": {"secret": "env:SEC_TOKEN", "origins": bound}, "oauth2": client}
    given = ["workspace", "credential", "sec", "apiKey_header", "env:SEC_KEY", "--origin", upstream]
    assert runner.invoke(main, given).exit_code == 0
    unbound = runner.invoke(main, ["workspace", "credential", "sec", "apiKey_query", "env:SEC_KEY"])
    assert unbound.exit_code != 0 and "origins" in unbound.output  # where it may go must be said
    refused = runner.invoke(main, ["workspace", "credential", "sec", "basic", "hunter2", "--origin", upstream])
    assert refused.exit_code != 0 and "never the value itself" in refused.output
    assert runner.invoke(main, ["workspace", "credential", "sec", "bearer", "--remove"]).exit_code == 0
    assert set(json.loads(runner.invoke(main, ["workspace", "credential", "sec"]).output)) == {
        "apiKey_header",
        "oauth2",
    }
    # Acting as the signed-in user: the scheme's token comes from an exchange of the user's own (RFC 8693).
    exchange = ["workspace", "credential", "sec", "bearer", "env:SEC_EXCHANGE", "--client-id", "crank",
                "--token-exchange", "https://id.example.com/token", "--issuer", "https://id.example.com",
                "--audience", "https://api.example.com", "--scope", "people:read", "--origin", upstream,
                "--origin", "https://id.example.com"]  # fmt: skip
    assert runner.invoke(main, exchange).exit_code == 0
    as_user = json.loads(runner.invoke(main, ["workspace", "credential", "sec"]).output)["bearer"]
    assert as_user["exchange"] == {"issuer": "https://id.example.com", "token_url": "https://id.example.com/token",
                                   "audience": "https://api.example.com", "scopes": ["people:read"]}  # fmt: skip
    without_client = runner.invoke(main, [*exchange[:5], *exchange[7:]])
    assert without_client.exit_code != 0 and "client id" in without_client.output
    without_issuer = runner.invoke(main, [*exchange[:9], *exchange[11:]])
    assert without_issuer.exit_code != 0 and "issuer" in without_issuer.output
    stray = ["workspace", "credential", "sec", "bearer", "env:SEC_TOKEN", "--audience", "https://api.example.com",
             "--origin", upstream]  # fmt: skip
    refused = runner.invoke(main, stray)
    assert refused.exit_code != 0 and "describe a --token-exchange" in refused.output
    # Acting as each user through their own connection (the authorization code flow at the API's server).
    connect = ["workspace", "credential", "sec", "oauth2", "env:SEC_CONNECT", "--client-id", "crank", "--connect",
               "--scope", "offline_access", "--origin", upstream]  # fmt: skip
    assert runner.invoke(main, connect).exit_code == 0
    as_each = json.loads(runner.invoke(main, ["workspace", "credential", "sec"]).output)["oauth2"]
    assert as_each["connection"] == {"scopes": ["offline_access"]}
    both = runner.invoke(main, [*connect, "--token-exchange", "https://id.example.com/token"])
    assert both.exit_code != 0 and "not both" in both.output
    half = runner.invoke(main, [*connect, "--authorization-url", "https://id.example.com/authorize"])
    assert half.exit_code != 0 and "both authorization_url and token_url" in half.output


def test_serve_openapi_says_which_scheme_the_train_travel_api_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Train Travel API declares OAuth2 (authorization code): a token the operator obtains, sent as bearer."""
    from crank.instant import build_instant
    from crank.settings import given_settings

    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "")
    settings = given_settings(listen="127.0.0.1:9", data_dir=tmp_path)
    with prism(TRAIN_TRAVEL) as upstream:
        built = build_instant(settings, str(TRAIN_TRAVEL), base_url=upstream)
        banner = built.banner()
        assert "Credentials:    OAuth2 (bearer) is required by" in banner
        # Its flow is the authorization code's: each user may connect their own account instead of one for all.
        assert "or let each user connect their own at https://example.com/oauth/authorize" in banner
        assert "add --auth-scheme OAuth2=env:NAME" in built.banner()
        monkeypatch.setenv("TRAIN_TOKEN", "a-token-the-operator-got")
        given: dict[str, tuple[str, str | None]] = {"OAuth2": ("env:TRAIN_TOKEN", None)}
        again = build_instant(settings, str(TRAIN_TRAVEL), base_url=upstream, credentials=given)
        assert "Credentials:" not in again.banner()
        tools = {tool.tool_name: tool for tool in again.server.registry.published()[0].runtime.tools}
        auth = tools["get_bookings"].execution_config.auth
        assert auth is not None and auth.type == "bearer" and auth.scheme == "OAuth2"


def _call(gateway: str, tool: str) -> dict[str, Any]:
    import anyio

    async def call() -> dict[str, Any]:
        async with Client(gateway + "/mcp/v1/sec/desk", mode="legacy") as client:
            result = await client.call_tool(tool, {})
        text = result.content[0].text if result.content else "{}"
        payload: dict[str, Any] = json.loads(text) if result.is_error else {"ok": text}
        return payload

    return anyio.run(call)


def test_a_client_credentials_flow_at_an_https_token_url_is_fetched_by_the_gateway() -> None:
    """The same document with its token URL on https (as a real API's is): an `oauth2` requirement."""
    from crank.admin.openapi import import_openapi

    changed = document(SECURITY)
    flows = changed["components"]["securitySchemes"]["oauth2_clientCredentials"]["flows"]
    flows["clientCredentials"]["tokenUrl"] = "https://id.example.com/oauth/token"
    (operation,) = import_openapi(changed, include=["put_anything_oauth2"])
    (requirement,) = ExecutionConfig.model_validate(operation.spec["execution_config"]).requires
    assert requirement.type == "oauth2" and requirement.token_url == "https://id.example.com/oauth/token"
    assert requirement.scopes == ("write:things",)


def test_an_authorization_code_flow_is_kept_so_that_each_user_may_connect_their_own_account(
    sqlite_registry: Registry,
) -> None:
    """security.json's authorization code flow, on https as a real API's is: the requirement keeps it, and the
    import's report says how to let each user connect (`--connect`) beside one account's credential."""
    from crank.admin.openapi import import_openapi

    changed = document(SECURITY)
    flows = changed["components"]["securitySchemes"]["oauth2_authorizationCode"]["flows"]
    flows["authorizationCode"] |= {"authorizationUrl": "https://alt.example.com/oauth/dialog",
                                   "tokenUrl": "https://alt.example.com/oauth/token"}  # fmt: skip
    (operation,) = [op for op in import_openapi(changed) if op.spec["target"]["url"].endswith("/anything/oauth2")
                    and op.spec["target"]["method"] == "GET"]  # fmt: skip
    (requirement,) = ExecutionConfig.model_validate(operation.spec["execution_config"]).requires
    assert requirement.type == "bearer" and requirement.authorization_code is not None
    assert requirement.authorization_code.authorization_url == "https://alt.example.com/oauth/dialog"
    assert requirement.authorization_code.token_url == "https://alt.example.com/oauth/token"
    (gap,) = missing_credentials(
        "sec",
        [
            (
                "get_oauth2",
                "https://api.example.com/anything/oauth2",
                ExecutionConfig.model_validate(operation.spec["execution_config"]),
            )
        ],
    )
    assert gap.connect_at == "https://alt.example.com/oauth/dialog"
    assert "--client-id CLIENT_ID --connect --origin https://api.example.com" in gap.how()
    # A workspace credential with a connection serves it: published as `user_connection`, its flow the description's.
    sqlite_registry.create_workspace("sec", "Security")
    sqlite_registry.put_operation("sec", "get_oauth2", {**operation.spec, "target": {
        "method": "GET", "url": "https://api.example.com/anything/oauth2"}})  # fmt: skip
    sqlite_registry.set_workspace_credential("sec", requirement.scheme, SchemeCredential(
        secret="env:SEC_CONNECT", client_id="crank", connection=UserConnection(),
        origins=("https://api.example.com", "https://alt.example.com")))  # fmt: skip
    sqlite_registry.put_agent("sec", "desk", {"bindings": [{"operation": "get_oauth2"}]})
    sqlite_registry.publish("sec", "desk")
    (published,) = [agent for agent in sqlite_registry.published() if agent.workspace == "sec"]
    (tool,) = published.runtime.tools
    auth = tool.execution_config.auth
    assert auth is not None and auth.type == "user_connection" and auth.scheme == requirement.scheme
    assert auth.authorization_url == "https://alt.example.com/oauth/dialog" and auth.client_id == "crank"


def test_a_credential_never_reaches_another_api_that_names_its_scheme_the_same(
    sqlite_registry: Registry, upstream: str
) -> None:
    """Two documents in one workspace, both with a scheme called `bearer`: the credential bound to the first API's
    origin is not attached to the second's operations, which are reported as missing instead."""
    _imported(sqlite_registry, upstream)
    other = document(SECURITY)
    other["components"]["securitySchemes"]["bearer"] = {"type": "apiKey", "in": "query", "name": "token"}
    reimport(sqlite_registry, "sec", "openapi", other, base_url="https://elsewhere.example", include=["*bearer*"],
             republish=False)  # fmt: skip
    ops = sqlite_registry.operations("sec")
    assert ops["post_anything_bearer"]["target"]["url"].startswith("https://elsewhere.example")
    sqlite_registry.set_workspace_credential("sec", "bearer", SchemeCredential(secret="env:T", origins=(upstream,)))
    sqlite_registry.put_agent("sec", "desk", {"bindings": [{"operation": "post_anything_bearer"}]})
    view = sqlite_registry.draft_runtime("sec", "desk")
    assert view.tools[0].execution_config.auth is None  # never sent to elsewhere.example
    (gap,) = credential_gaps(sqlite_registry, "sec", ["post_anything_bearer"])
    assert gap.scheme == "bearer" and gap.origins == ("https://elsewhere.example",)
    client = SchemeCredential(secret="env:T", client_id="c", origins=("https://elsewhere.example",))
    sqlite_registry.set_workspace_credential("sec", "bearer", client)  # a client id, for a scheme not OAuth 2
    assert sqlite_registry.draft_runtime("sec", "desk").tools[0].execution_config.auth is None
