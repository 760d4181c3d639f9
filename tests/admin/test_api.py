"""The admin HTTP API over real HTTP, end to end with the gateway and the official MCP client: import an
OpenAPI document, bind an agent, publish, list and call, republish while a client keeps calling, roll back."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openapi_spec_validator import validate

from crank.admin.api import AdminAPI, openapi_document
from crank.demo.api import create_app
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client

pytestmark = pytest.mark.anyio

TOKEN = "admin-token-for-tests-0123456789"
DEMO_SPEC = Path(__file__).resolve().parents[2] / "src" / "crank" / "demo" / "openapi.yaml"


class Admin:
    def __init__(self, base: str) -> None:
        self.client = httpx.AsyncClient(base_url=base + "/admin/v1", headers={"Authorization": f"Bearer {TOKEN}"})

    async def __call__(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        response = await self.client.request(method, path, json=body)
        assert response.status_code == status, response.text
        return response.json() if response.content else None


@pytest.fixture
async def admin(registry: Registry, serve: Callable[..., str]) -> Any:
    api = Admin(serve(AdminAPI(registry, token=TOKEN)))
    yield api
    await api.client.aclose()


async def test_the_token_is_required(registry: Registry, serve: Callable[..., str]) -> None:
    base = serve(AdminAPI(registry, token=TOKEN)) + "/admin/v1"
    async with httpx.AsyncClient() as client:
        for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": TOKEN}):
            response = await client.get(base + "/workspaces", headers=headers)
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == 'Bearer realm="crank-admin"'
            assert response.json()["error"]["code"] == "unauthorized"
        assert (await client.get(base + "/openapi.json")).status_code == 200  # the document is public


async def test_a_path_or_method_the_api_does_not_serve_is_answered_in_its_error_shape(admin: Admin) -> None:
    """Found by tests/test_fuzz.py: the router's own 404 and 405 were Starlette's plain text."""
    missing = await admin.client.get("/nowhere")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong = await admin.client.patch("/workspaces/acme", json={"name": "Acme"})
    assert wrong.status_code == 405 and "PUT" in wrong.headers["allow"]
    assert wrong.json()["error"] == {"code": "method_not_allowed", "message": "this path does not take this method"}


def test_the_admin_openapi_document_is_valid() -> None:
    document = openapi_document()
    validate(document)
    assert "/admin/v1/workspaces/{workspace}/agents/{agent}/publish" in document["paths"]
    body = document["paths"]["/admin/v1/workspaces/{workspace}/agents/{agent}"]["put"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AgentIn"}
    assert "BindingIn" in document["components"]["schemas"]


async def test_errors_say_what_and_where(admin: Admin) -> None:
    await admin("PUT", "/workspaces/acme", {"name": "Acme"})
    missing = await admin("GET", "/workspaces/nope/agents", status=404)
    assert missing["error"]["message"] == "no workspace 'nope'"
    bad = await admin("PUT", "/workspaces/acme/agents/desk", {"bindings": [{"tool_name": "x y"}]}, status=422)
    assert "bindings.0.operation: Field required" in bad["error"]["message"]
    assert "bindings.0.tool_name: String should match pattern" in bad["error"]["message"]
    response = await admin.client.put("/workspaces/acme/agents/desk", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"
    await admin("PUT", "/workspaces/acme/agents/desk", {"bindings": [{"operation": "ghost"}]})
    publish = await admin("POST", "/workspaces/acme/agents/desk/publish", status=422)
    assert "binding 0: no operation 'ghost'" in publish["error"]["message"]
    broken = {"protocol": "http", "target": {"method": "GET"}}  # no url
    await admin("PUT", "/workspaces/acme/operations/broken", broken)
    await admin("PUT", "/workspaces/acme/agents/desk", {"bindings": [{"operation": "broken"}]})
    publish = await admin("POST", "/workspaces/acme/agents/desk/publish", status=422)
    assert "agent acme/desk, tool 'broken': target.url: Field required" in publish["error"]["message"]
    assert (await admin("GET", "/workspaces/acme/agents/desk/versions")) == {"versions": []}
    invalid_spec = {"format": "openapi", "document": {"openapi": "3.0.3", "paths": {}}}
    failed = await admin("POST", "/workspaces/acme/imports", invalid_spec, status=422)
    assert "info" in failed["error"]["message"]
    assert (await admin("GET", "/workspaces/acme/operations"))["operations"].keys() == {"broken"}


async def test_a_draft_whose_documents_are_too_heavy_together_is_refused_at_once(admin: Admin) -> None:
    await admin("PUT", "/workspaces/acme", {"name": "Acme"})
    documents = [{"uri": f"docs://{n}", "name": f"d{n}", "text": "x" * 250_000} for n in range(17)]
    refused = await admin("PUT", "/workspaces/acme/agents/desk", {"documents": documents}, status=422)
    assert "more than the 4194304 allowed" in refused["error"]["message"]
    many = [{"uri": f"docs://{n}", "name": f"d{n}", "text": "x"} for n in range(65)]
    refused = await admin("PUT", "/workspaces/acme/agents/desk", {"documents": many}, status=422)
    assert "documents: List should have at most 64 items" in refused["error"]["message"]


async def test_import_bind_publish_call_republish_and_roll_back(
    admin: Admin, registry: Registry, serve: Callable[..., str]
) -> None:
    shop = serve(create_app())
    await admin("PUT", "/workspaces/shop", {"name": "Shop", "default_language": "en"})
    document = yaml.safe_load(DEMO_SPEC.read_text())
    imported = await admin("POST", "/workspaces/shop/imports", {"format": "openapi", "document": document,
                                                                "base_url": shop}, status=200)  # fmt: skip
    assert sorted(imported["imported"]) == ["cancel_order", "create_order", "get_book", "get_order", "search_books"]
    await admin("PUT", "/workspaces/shop/agents/desk", {"description": "Books", "bindings": []})
    await admin("PUT", "/workspaces/shop/agents/desk/bindings/find_books", {"operation": "search_books"})
    await admin("PUT", "/workspaces/shop/agents/desk/bindings/get_book", {"operation": "get_book"})
    published = await admin("POST", "/workspaces/shop/agents/desk/publish", status=201)
    assert published["version"] == 1 and published["token_budget"] == 4096 and 0 < published["token_estimate"] < 4096
    # The linter's findings come with the publish (they never block it): the imported search returns a list.
    assert {(f["tool"], f["rule"]) for f in published["findings"]} == {("find_books", "uncapped-array")}
    key = (await admin("POST", "/workspaces/shop/api-keys", {"agents": ["desk"]}, status=201))["key"]

    url = serve(GatewayService(registry, poll_interval=0.05)) + "/mcp/v1/shop/desk"
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert list(tools) == ["find_books", "get_book"]
            assert tools["get_book"].annotations is not None and tools["get_book"].annotations.read_only_hint
            found = await client.call_tool("find_books", {"query": "kotsiubynsky", "limit": 1})
            assert found.structured_content is not None
            assert [b["id"] for b in found.structured_content["result"]["items"]] == [3]
            book = await client.call_tool("get_book", {"book_id": 2})
            assert book.structured_content == {"result": {"id": 2, "title": "The Forest Song", "author":
                                               "Lesya Ukrainka", "year": 1911, "price": 9.0, "stock": 7}}  # fmt: skip

            # Republish with one more tool while the client keeps calling; then roll back.
            seen: list[frozenset[str]] = []
            errors: list[BaseException] = []
            stop = asyncio.Event()

            async def keep_calling() -> None:
                while not stop.is_set():
                    try:
                        seen.append(frozenset(t.name for t in (await client.list_tools()).tools))
                        result = await client.call_tool("get_book", {"book_id": 1})
                        assert result.structured_content["result"]["title"] == "Kobzar"  # type: ignore[index]
                    except Exception as exc:
                        errors.append(exc)

            worker = asyncio.create_task(keep_calling())
            await admin("PUT", "/workspaces/shop/agents/desk/bindings/get_order", {"operation": "get_order"})
            assert (await admin("POST", "/workspaces/shop/agents/desk/publish", status=201))["version"] == 2
            await _until(lambda: bool(seen) and "get_order" in seen[-1])
            await admin("POST", "/workspaces/shop/agents/desk/rollback", {"version": 1})
            await _until(lambda: "get_order" not in seen[-1])
            stop.set()
            await worker
    assert errors == []
    assert set(seen) <= {frozenset({"find_books", "get_book"}), frozenset({"find_books", "get_book", "get_order"})}
    versions = await admin("GET", "/workspaces/shop/agents/desk/versions")
    assert [(v["version"], v["current"]) for v in versions["versions"]] == [(1, True), (2, False)]


async def test_apply_through_the_api_publishes_only_what_changed(admin: Admin, serve: Callable[..., str]) -> None:
    shop = serve(create_app())
    catalog = {
        "workspace": {"slug": "shop", "name": "Shop"},
        "operations": {"book": {"protocol": "http", "target": {"method": "GET", "url": shop + "/books/{book_id}"},
                                "input_schema": {"type": "object", "properties": {"book_id": {"type": "integer"}}}}},
        "agents": {"desk": {"bindings": [{"operation": "book"}]}},
    }  # fmt: skip
    first = await admin("POST", "/apply", catalog)
    assert (first["agents"]["desk"]["version"], first["agents"]["desk"]["published"]) == (1, True)
    assert "name-shape" in {finding["rule"] for finding in first["agents"]["desk"]["findings"]}  # `book`
    again = await admin("POST", "/apply", catalog)
    assert (again["agents"]["desk"]["version"], again["agents"]["desk"]["published"]) == (1, False)
    response = await admin.client.post("/apply", content=yaml.safe_dump(catalog).replace("book", "volume"),
                                       headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert response.status_code == 200 and response.json()["agents"]["desk"]["version"] == 2
    for location in ("/etc/passwd", "file:///etc/passwd", "x://../../etc/passwd"):
        local = {**catalog, "sources": [{"openapi": location}]}
        refused = await admin("POST", "/apply", local, status=422)
        assert "only URLs" in refused["error"]["message"]


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not served in time"
        await asyncio.sleep(0.02)


async def test_an_api_key_is_listed_without_its_secret_and_deleted_by_id(
    admin: Admin, registry: Registry, serve: Callable[..., str]
) -> None:
    await admin("PUT", "/workspaces/shop", {"name": "Shop"})
    created = await admin("POST", "/workspaces/shop/api-keys", {"agents": ["desk"]}, status=201)
    other = await admin("POST", "/workspaces/shop/api-keys", {}, status=201)
    listed = (await admin("GET", "/workspaces/shop/api-keys"))["api_keys"]
    assert [(k["id"], k["agents"]) for k in listed] == [(created["id"], ["desk"]), (other["id"], None)]
    assert created["key"] not in str(listed) and other["key"] not in str(listed)

    gateway = serve(GatewayService(registry, poll_interval=0.05))
    probe = gateway + "/mcp/v1/shop/desk/tools"
    async with httpx.AsyncClient() as http:
        before = await http.get(probe, headers={"Authorization": f"Bearer {created['key']}"})
        assert before.status_code == 404  # the key is accepted; the agent is not published
        await admin("DELETE", f"/workspaces/shop/api-keys/{created['id']}", status=204)
        await _until_status(http, probe, created["key"], 401)
        kept = await http.get(probe, headers={"Authorization": f"Bearer {other['key']}"})
        assert kept.status_code == 404
    again = await admin("DELETE", f"/workspaces/shop/api-keys/{created['id']}", status=404)
    assert created["id"] in again["error"]["message"]
    assert [k["id"] for k in (await admin("GET", "/workspaces/shop/api-keys"))["api_keys"]] == [other["id"]]


async def _until_status(http: httpx.AsyncClient, url: str, key: str, status: int) -> None:
    for _ in range(200):
        if (await http.get(url, headers={"Authorization": f"Bearer {key}"})).status_code == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never answered {status}")


async def test_a_reference_chain_over_the_limit_is_a_422_with_one_line(admin: Admin, registry: Registry) -> None:
    from tests.admin.test_openapi import reference_chain

    registry.create_workspace("chain", "Chain")
    failed = await admin("POST", "/workspaces/chain/imports", {"format": "openapi", "document": reference_chain(500)},
                         status=422)  # fmt: skip
    assert failed["error"]["code"] == "invalid_definition"
    assert "nest more than 400 levels deep" in failed["error"]["message"] and "\n" not in failed["error"]["message"]


async def test_limits_are_set_and_shown_through_the_admin_api(admin: Admin, registry: Registry) -> None:
    rate, quota = {"calls": 10, "window": 1.0}, {"calls": 1000, "period": "day"}
    shown = await admin("PUT", "/workspaces/shop", {"name": "Shop", "limits": {"rate": rate},
                                                    "key_limits": {"quota": quota}})  # fmt: skip
    assert (shown["limits"], shown["key_limits"]) == ({"rate": rate}, {"quota": quota})
    await admin("PUT", "/workspaces/shop/agents/desk", {"limits": {"quota": {"calls": 5, "period": "month"}}})
    assert (await admin("GET", "/workspaces/shop/agents/desk"))["limits"] == {"quota": {"calls": 5, "period": "month"}}
    created = await admin("POST", "/workspaces/shop/api-keys", {"limits": {"rate": {"calls": 2, "window": 60}}},
                          status=201)  # fmt: skip
    assert created["limits"] == {"rate": {"calls": 2, "window": 60.0}}
    (scope,) = registry.api_keys().values()
    assert scope.limits is not None and scope.limits.rate is not None and scope.limits.rate.calls == 2
    assert scope.workspace_limits is not None and scope.workspace_limits.rate is not None
    cleared = await admin("PUT", f"/workspaces/shop/api-keys/{created['id']}/limits", {"limits": None})
    assert cleared["limits"] is None
    (scope,) = registry.api_keys().values()  # back to the workspace's key_limits
    assert scope.limits is not None and scope.limits.quota is not None and scope.limits.quota.calls == 1000
    wrong = await admin("PUT", f"/workspaces/shop/api-keys/{created['id']}/limits",
                        {"limits": {"rate": {"calls": 0, "window": 1}}}, status=422)  # fmt: skip
    assert "limits.rate.calls" in wrong["error"]["message"]
    assert "ApiKeyLimitsIn" in openapi_document()["components"]["schemas"]


async def test_a_workspace_oauth_policy_is_set_shown_and_removed(admin: Admin) -> None:
    await admin("PUT", "/workspaces/acme", {"name": "Acme"})
    assert await admin("GET", "/workspaces/acme/oauth") == {"oauth": None}
    policy = {"issuers": ["https://id.example"], "tool_scopes": {"write": ["tools:write"]}}
    put = await admin("PUT", "/workspaces/acme/oauth", policy)
    assert put["oauth"]["issuers"] == ["https://id.example"] and put["oauth"]["credentials"] == "both"
    assert (await admin("GET", "/workspaces/acme/oauth"))["oauth"]["tool_scopes"] == {"write": ["tools:write"]}
    await admin("PUT", "/workspaces/acme/oauth", {"issuers": []}, status=422)  # at least one issuer
    await admin("DELETE", "/workspaces/acme/oauth", status=204)
    assert await admin("GET", "/workspaces/acme/oauth") == {"oauth": None}


async def test_a_workspace_credential_per_scheme_is_set_listed_and_removed(admin: Admin) -> None:
    await admin("PUT", "/workspaces/acme", {"name": "Acme"})
    assert await admin("GET", "/workspaces/acme/credentials") == {"credentials": {}}
    given = {"secret": "env:ACME_CLIENT_SECRET", "client_id": "crank", "origins": ["https://api.example.com"]}
    assert await admin("PUT", "/workspaces/acme/credentials/OAuth2", given) == {"scheme": "OAuth2", **given}
    listed = await admin("GET", "/workspaces/acme/credentials")
    assert listed == {"credentials": {"OAuth2": given}}  # references only: nothing secret is stored
    await admin("PUT", "/workspaces/acme/credentials/ApiKey", {"secret": "s3cr3t", "origins": ["https://a.example"]},
                status=422)  # a value, refused  # fmt: skip
    await admin("PUT", "/workspaces/acme/credentials/ApiKey", {"secret": "env:K"}, status=422)  # bound to nothing
    await admin("DELETE", "/workspaces/acme/credentials/OAuth2", status=204)
    assert await admin("GET", "/workspaces/acme/credentials") == {"credentials": {}}


async def test_users_connections_are_listed_without_tokens_and_revoked_by_scheme_or_user(
    admin: Admin, registry: Registry
) -> None:
    from crank.registry.vault import Vault, VaultKeys, new_vault_key

    await admin("PUT", "/workspaces/acme", {"name": "Acme"})
    vault = Vault(registry.engine, VaultKeys([base64.urlsafe_b64decode(new_vault_key())]))
    for scheme, subject in (("people", "alice"), ("people", "bob"), ("mail", "alice")):
        vault.put("acme", scheme, "https://id.example", subject, {"access_token": f"{scheme}-{subject}-token"})
    listed = await admin("GET", "/workspaces/acme/connections")
    assert [(entry["scheme"], entry["subject"]) for entry in listed["connections"]] == [
        ("mail", "alice"), ("people", "alice"), ("people", "bob")]  # fmt: skip
    assert "token" not in json.dumps(listed)  # whose and since when, never a token
    only_alice = await admin.client.get("/workspaces/acme/connections", params={"subject": "alice"})
    assert len(only_alice.json()["connections"]) == 2
    await admin("DELETE", "/workspaces/acme/connections", status=422)  # say which
    removed = await admin.client.delete("/workspaces/acme/connections", params={"scheme": "people", "subject": "bob"})
    assert removed.json() == {"removed": 1}
    everyone = await admin.client.delete("/workspaces/acme/connections", params={"all": "true"})
    assert everyone.json() == {"removed": 2} and vault.entries("acme") == []
    await admin("GET", "/workspaces/nobody/connections", status=404)


async def test_an_import_through_the_api_names_the_credentials_its_operations_need(admin: Admin) -> None:
    from tests.realapis import SECURITY, document

    await admin("PUT", "/workspaces/sec", {"name": "Security"})
    body = {"format": "openapi", "document": document(SECURITY), "base_url": "https://api.example.com"}
    report = await admin("POST", "/workspaces/sec/imports", body)
    missing = {gap["scheme"]: gap for gap in report["missing_credentials"]}
    assert missing["apiKey_header"]["origins"] == ["https://api.example.com"]
    assert missing["apiKey_header"]["tools"] == ["put_anything_api_key", "post_status_401"]
