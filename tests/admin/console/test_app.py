"""The console over HTTP: sign-in, sessions, CSRF, escaping, security headers, and what the pages change."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from crank.registry import Registry
from crank.server import CrankServer
from crank.settings import given_settings
from tests.admin.console.conftest import HOSTILE, TOKEN

pytestmark = pytest.mark.anyio


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found.group(1)


async def signed_in(client: httpx.AsyncClient, url: str) -> str:
    """Sign in; the CSRF token of the signed-in session."""
    form = await client.get(url + "/login")
    answer = await client.post(url + "/login", data={"csrf": csrf_of(form.text), "token": TOKEN, "next": "/console/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    return csrf_of((await client.get(url + "/")).text)


async def test_every_page_needs_a_signed_in_session(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        for path in ("/", "/workspaces/shop", "/workspaces/shop/agents/desk", "/workspaces/shop/keys"):
            answer = await client.get(console_url + path)
            assert answer.status_code == 303 and answer.headers["location"].startswith("/console/login?next=")
        posted = await client.post(console_url + "/workspaces/shop/agents/desk/publish", data={"csrf": "x"})
        assert posted.status_code == 403


async def test_a_wrong_token_or_a_forged_cookie_does_not_sign_in(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        form = await client.get(console_url + "/login")
        wrong = await client.post(console_url + "/login", data={"csrf": csrf_of(form.text), "token": "not-it"})
        assert wrong.status_code == 401 and "not the admin token" in wrong.text
        client.cookies.set("crank_console", "eyJ0ZXN0IjoxfQ.forged.sig", path="/console")
        assert (await client.get(console_url + "/")).status_code == 303


async def test_sign_in_sets_a_strict_http_only_cookie_and_goes_back_only_to_the_console(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        form = await client.get(console_url + "/login")
        answer = await client.post(
            console_url + "/login", data={"csrf": csrf_of(form.text), "token": TOKEN, "next": "//evil.example/"}
        )
        assert answer.headers["location"] == "/console/"
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
        assert "Secure" not in cookie  # plain HTTP on loopback; behind TLS it is Secure
        assert "crank_console" not in form.cookies  # the sign-in page's session has a cookie of its own
        assert form.cookies["crank_console_login"] and answer.cookies["crank_console"]  # a new session at sign-in
        assert 'crank_console_login=""' in str(answer.headers.get_list("set-cookie")) or any(
            value.startswith("crank_console_login=;") for value in answer.headers.get_list("set-cookie")
        )  # and the sign-in page's is cleared


async def test_a_post_without_its_csrf_token_or_with_another_sessions_is_refused(
    console_url: str, sqlite_registry: Registry
) -> None:
    publish = console_url + "/workspaces/shop/agents/desk/publish"
    async with httpx.AsyncClient() as mine, httpx.AsyncClient() as theirs:
        await signed_in(mine, console_url)
        their_token = await signed_in(theirs, console_url)
        assert (await mine.post(publish, data={})).status_code == 403
        assert (await mine.post(publish, data={"csrf": their_token})).status_code == 403
    assert sqlite_registry.versions("shop", "desk") == [1]  # nothing was published


async def test_untrusted_text_is_escaped_everywhere(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        await signed_in(client, console_url)
        page = (await client.get(console_url + "/workspaces/shop")).text
        assert "&lt;script&gt;window.pwned = true&lt;/script&gt;" in page
        assert HOSTILE not in page and "<script>window" not in page
        search = await client.get(console_url + "/workspaces/shop", params={"q": '"><script>alert(1)</script>'})
        assert "<script>alert(1)" not in search.text and "&lt;script&gt;alert(1)" in search.text


async def test_every_answer_forbids_inline_script_framing_and_caching(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        for answer in (await client.get(console_url + "/login"), await client.get(console_url + "/nowhere"),
                       await client.get(console_url + "/static/console.css")):  # fmt: skip
            policy = answer.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert "frame-ancestors 'none'" in policy
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["cache-control"] == "no-store"
        page = (await client.get(console_url + "/login")).text
        assert "<script>" not in page and " style=" not in page and "onclick" not in page


async def test_the_live_search_answers_only_the_operations_table(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        await signed_in(client, console_url)
        whole = await client.get(console_url + "/workspaces/shop", params={"q": "order"})
        part = await client.get(console_url + "/workspaces/shop", params={"q": "order"}, headers={"HX-Request": "true"})
    assert "<html" in whole.text and "<html" not in part.text
    assert part.text.lstrip().startswith('<div id="operations"')
    assert re.search(r"(\d+) of (\d+) operations match", part.text)


async def test_publish_roll_back_and_revoke_change_the_registry(console_url: str, sqlite_registry: Registry) -> None:
    agent = console_url + "/workspaces/shop/agents/desk"
    async with httpx.AsyncClient() as client:
        csrf = await signed_in(client, console_url)
        sqlite_registry.put_agent("shop", "desk", {"bindings": [{"operation": "search_books"}]})
        published = await client.post(agent + "/publish", data={"csrf": csrf})
        assert published.status_code == 303 and published.headers["location"].endswith("?published=2")
        assert "Published version 2." in (await client.get(console_url + published.headers["location"][8:])).text
        diff = (await client.get(agent + "/diff", params={"from": 1, "to": 2})).text
        assert "Tools removed" in diff and "get_book" in diff
        rolled = await client.post(agent + "/rollback", data={"csrf": csrf, "version": "1"})
        assert rolled.headers["location"].endswith("?rolled_back=1")
        created = await client.post(console_url + "/workspaces/shop/keys", data={"csrf": csrf, "agents": "desk"})
        assert created.status_code == 201
        key = re.search(r'id="new-key" class="key" readonly value="([^"]+)"', created.text)
        (info,) = sqlite_registry.api_key_infos("shop")
        assert key is not None and info.agents == ["desk"]
        assert "readonly value" not in (await client.get(console_url + "/workspaces/shop/keys")).text  # shown once
        revoked = await client.post(console_url + f"/workspaces/shop/keys/{info.id}/revoke", data={"csrf": csrf})
        assert revoked.status_code == 303
    assert [v.version for v in sqlite_registry.version_history("shop", "desk") if v.current] == [1]
    assert sqlite_registry.api_key_infos("shop") == []


@pytest.mark.parametrize(("role", "served"), [("admin", True), ("all", True), ("mcp", False)])
async def test_crank_serve_serves_the_console_for_the_admin_role_only(
    tmp_path: Path, serve: Callable[..., str], role: str, served: bool
) -> None:
    settings = given_settings(data_dir=tmp_path, admin_token=TOKEN, role=role)
    base = serve(CrankServer(settings))
    async with httpx.AsyncClient() as client:
        login = await client.get(base + "/console/login")
        assert (login.status_code == 200) is served
        if served:
            answer = await client.post(base + "/console/login", data={"csrf": csrf_of(login.text), "token": TOKEN})
            assert answer.status_code == 303
        else:
            assert login.status_code == 404 and "content-security-policy" not in login.headers


async def test_hostile_forms_and_missing_things_get_plain_pages(console_url: str) -> None:
    agent = console_url + "/workspaces/shop/agents/desk"
    async with httpx.AsyncClient() as client:
        csrf = await signed_in(client, console_url)
        huge = await client.post(agent + "/publish", data={"csrf": csrf, "pad": "x" * 70_000})
        many = await client.post(agent + "/publish", content="&".join(f"f{n}=1" for n in range(150)),
                                 headers={"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        json = await client.post(agent + "/publish", json={"csrf": csrf})
        no_version = await client.post(agent + "/rollback", data={"csrf": csrf, "version": "latest"})
        missing = await client.get(console_url + "/workspaces/nope")
        no_diff = await client.get(agent + "/diff", params={"from": "1"})
        unknown_version = await client.get(agent + "/diff", params={"from": "1", "to": "99"})
    assert (huge.status_code, many.status_code, json.status_code) == (413, 413, 415)
    assert no_version.status_code == 422 and "Choose a version." in no_version.text
    assert missing.status_code == 404 and "no workspace" in missing.text
    assert no_diff.status_code == 404 and unknown_version.status_code == 404 and "no version 99" in unknown_version.text
    for page in (huge, missing, no_diff):
        assert "Traceback" not in page.text and page.headers["content-type"].startswith("text/html")


async def test_a_draft_that_cannot_publish_says_why_on_its_page(console_url: str, sqlite_registry: Registry) -> None:
    sqlite_registry.put_agent("shop", "desk", {"bindings": [{"operation": "ghost"}]})
    async with httpx.AsyncClient() as client:
        csrf = await signed_in(client, console_url)
        page = await client.get(console_url + "/workspaces/shop/agents/desk")
        refused = await client.post(console_url + "/workspaces/shop/agents/desk/publish", data={"csrf": csrf})
    assert "compile-error" in page.text and "no operation &#39;ghost&#39;" in page.text
    assert (
        refused.status_code == 422 and 'role="alert"' in refused.text and "no operation &#39;ghost&#39;" in refused.text
    )
    assert sqlite_registry.versions("shop", "desk") == [1]


def newer_demo() -> str:
    """The demo's description, one version on: an order can no longer be cancelled, and a search needs a query."""
    import yaml

    from tests.admin.console.conftest import DEMO_SPEC

    document = yaml.safe_load(DEMO_SPEC.read_text())
    del document["paths"]["/orders/{order_id}"]["delete"]
    search = document["paths"]["/books"]["get"]
    search["parameters"][0]["required"] = True
    document["servers"] = [{"url": "http://127.0.0.1:9/demo-api"}]  # where the first import pointed it
    return yaml.safe_dump(document)


async def test_a_re_import_is_previewed_without_change_then_applied(
    console_url: str, sqlite_registry: Registry
) -> None:
    imports = console_url + "/workspaces/shop/import"
    async with httpx.AsyncClient() as client:
        csrf = await signed_in(client, console_url)
        assert (await client.get(imports)).status_code == 200
        form = {"csrf": csrf, "kind": "openapi", "document": newer_demo()}
        preview = await client.post(imports, data={**form, "action": "preview"})
        assert preview.status_code == 200 and "Preview: nothing was changed" in preview.text
        assert "agent <code>desk</code>, tool <code>cancel_order</code>" in preview.text
        assert "parameter query: now required" in preview.text and "Would republish <code>desk</code>" in preview.text
        assert "cancel_order" in sqlite_registry.operations("shop") and sqlite_registry.versions("shop", "desk") == [1]
        applied = await client.post(imports, data={**form, "action": "apply"})
        assert "Applied" in applied.text and "Republished <code>desk</code> as version 2" in applied.text
        assert "cancel_order" not in sqlite_registry.operations("shop")
        neither = await client.post(imports, data={"csrf": csrf, "action": "preview"})
        a_file = await client.post(imports, data={"csrf": csrf, "url": "file:///etc/passwd", "action": "preview"})
        not_yaml = await client.post(imports, data={"csrf": csrf, "document": "a: [", "action": "preview"})
        invalid = await client.post(imports, data={"csrf": csrf, "document": "openapi: 3.0.3", "action": "preview"})
    assert neither.status_code == 422 and "one of the two" in neither.text
    assert a_file.status_code == 422 and "must be http(s)" in a_file.text
    assert not_yaml.status_code == 422 and "the pasted description: not valid YAML" in not_yaml.text
    assert invalid.status_code == 422 and "info" in invalid.text


async def test_the_oauth_policy_is_set_refused_when_wrong_and_removed(
    console_url: str, sqlite_registry: Registry
) -> None:
    from crank.registry.runtime import SchemeCredential, TokenExchange

    credential = SchemeCredential(secret="env:SHOP_TOKEN", origins=("https://api.shop.example",))
    sqlite_registry.set_workspace_credential("shop", "bearer", credential)
    exchange = TokenExchange(
        issuer="https://id.shop.example", token_url="https://id.shop.example/token", audience="https://api.shop.example"
    )
    as_user = SchemeCredential(secret="env:SHOP_EXCHANGE", client_id="crank", exchange=exchange,
                               origins=("https://api.shop.example", "https://id.shop.example"))  # fmt: skip
    sqlite_registry.set_workspace_credential("shop", "user", as_user)
    access = console_url + "/workspaces/shop/access"
    policy = {
        "issuers": "https://id.shop.example\n", "audience": "https://mcp.shop.example", "credentials": "oauth",
        "sign_in": "calls", "agent_scopes": "desk: shop.read\n*: shop.any", "tool_scopes": "destructive: shop.write",
    }  # fmt: skip
    async with httpx.AsyncClient() as client:
        csrf = await signed_in(client, console_url)
        page = (await client.get(access)).text
        assert (
            "API keys only: no OAuth policy" in page and "env:SHOP_TOKEN" in page and "https://api.shop.example" in page
        )
        assert "one account" in page and "the signed-in user (token exchange at" in page  # who each scheme's calls are
        saved = await client.post(access, data={"csrf": csrf, **policy})
        assert saved.status_code == 303 and saved.headers["location"].endswith("?oauth_saved=1")
        stored = sqlite_registry.workspace_oauth_policy("shop")
        assert stored is not None and stored.issuers == ("https://id.shop.example",) and stored.sign_in == "calls"
        assert stored.agent_scopes == {"desk": ("shop.read",), "*": ("shop.any",)}
        assert stored.tool_scopes == {"destructive": ("shop.write",)} and stored.credentials == "oauth"
        shown = (await client.get(access)).text
        assert "OAuth access tokens only" in shown and "desk: shop.read" in shown
        wrong = await client.post(access, data={"csrf": csrf, **policy, "issuers": "http://id.shop.example"})
        lines = await client.post(access, data={"csrf": csrf, **policy, "agent_scopes": "no colon here"})
        assert wrong.status_code == 422 and "issuers" in wrong.text and "http://id.shop.example" in wrong.text
        assert lines.status_code == 422 and "name: scope scope" in lines.text
        assert sqlite_registry.workspace_oauth_policy("shop") == stored  # a refused form changes nothing
        removed = await client.post(access + "/keys-only", data={"csrf": csrf})
        assert removed.headers["location"].endswith("?keys_only=1")
    assert sqlite_registry.workspace_oauth_policy("shop") is None


async def test_users_connections_are_listed_without_tokens_and_revoked(
    console_url: str, sqlite_registry: Registry
) -> None:
    from crank.registry.runtime import OAuthPolicy, SchemeCredential, SignInClient, UserConnection
    from crank.registry.vault import Vault, VaultKeys, new_vault_key

    connected = SchemeCredential(secret="env:SHOP_CONNECT", client_id="crank", connection=UserConnection(),
                                 origins=("https://api.shop.example",))  # fmt: skip
    sqlite_registry.set_workspace_credential("shop", "people", connected)
    signing_in = SignInClient(issuer="https://id.shop.example", client_id="crank", client_secret="env:SHOP_SIGN_IN")
    sqlite_registry.set_workspace_oauth("shop", OAuthPolicy(issuers=("https://id.shop.example",),
                                                            sign_in_client=signing_in))  # fmt: skip
    vault = Vault(sqlite_registry.engine, VaultKeys([base64.urlsafe_b64decode(new_vault_key())]))
    for subject in ("alice", "bob"):
        vault.put("shop", "people", "https://id.shop.example", subject, {"access_token": f"{subject}-secret-token"})
    access = console_url + "/workspaces/shop/access"
    async with httpx.AsyncClient() as client:
        csrf = await signed_in(client, console_url)
        page = (await client.get(access)).text
        assert "each signed-in user, through the account they connect" in page
        assert "Revoke alice's people" in page and "Revoke bob's people" in page
        assert "secret-token" not in page  # whose and since when, never a token
        revoked = await client.post(access + "/revoke-connection",
                                    data={"csrf": csrf, "scheme": "people", "subject": "alice"})  # fmt: skip
        assert revoked.status_code == 303 and revoked.headers["location"].endswith("?connection_revoked=1")
        forged = await client.post(access + "/revoke-connection", data={"scheme": "people", "subject": "bob"})
        assert forged.status_code == 403  # no CSRF token: nothing revoked
        # Saving the policy in the console keeps its sign-in client (which the console does not edit).
        form = {"issuers": "https://id.shop.example", "audience": "", "credentials": "both", "sign_in": "always",
                "agent_scopes": "", "tool_scopes": ""}  # fmt: skip
        assert (await client.post(access, data={"csrf": csrf, **form})).status_code == 303
    assert [entry.subject for entry in vault.entries("shop")] == ["bob"]
    stored = sqlite_registry.workspace_oauth_policy("shop")
    assert stored is not None and stored.sign_in_client == signing_in


async def test_try_it_shows_a_wrong_key_and_a_failed_call_and_takes_a_tool_without_description(
    sqlite_registry: Registry, serve: Callable[..., str]
) -> None:
    from crank.admin.actions import publish_agent
    from crank.admin.console import Console
    from crank.server import GatewayService
    from tests.admin.console.conftest import fill

    fill(sqlite_registry)  # its operations point at 127.0.0.1:9, where nothing listens
    spec = sqlite_registry.operation("shop", "get_book")
    sqlite_registry.put_operation("shop", "get_book", {**spec, "description": ""})
    publish_agent(sqlite_registry, "shop", "desk")
    key = sqlite_registry.create_api_key("shop")
    gateway = GatewayService(sqlite_registry, poll_interval=0.05)
    serve(gateway)
    console_url = serve(Console(sqlite_registry, token=TOKEN, mcp=gateway)) + "/console"
    tool = console_url + "/workspaces/shop/agents/desk/tools/get_book"
    async with httpx.AsyncClient(timeout=30) as client:
        csrf = await signed_in(client, console_url)
        form = await client.get(tool)
        wrong_key = await client.post(tool, data={"csrf": csrf, "key": "crk_not-a-key", "a.book_id": "1"})
        failed = await client.post(tool, data={"csrf": csrf, "key": key, "a.book_id": "1"})
        not_a_number = await client.post(tool, data={"csrf": csrf, "key": key, "a.book_id": "one"})
    assert form.status_code == 200 and 'class="description"' not in form.text
    assert wrong_key.status_code == 200 and "The call failed." in wrong_key.text and "API key" in wrong_key.text
    assert failed.status_code == 200 and "The call failed: upstream_unavailable." in failed.text
    assert not_a_number.status_code == 422 and "book_id: a whole number is expected" in not_a_number.text


async def test_the_signed_in_person_is_named_and_a_callback_link_signs_no_one_out(console_url: str) -> None:
    async with httpx.AsyncClient() as client:
        await signed_in(client, console_url)
        page = (await client.get(console_url + "/")).text
        assert "Signed in: admin token" in page
        callback = await client.get(console_url + "/login/callback", params={"error": "access_denied"})
        assert callback.status_code == 404  # this console has no single sign-on
        assert (await client.get(console_url + "/")).status_code == 200


async def test_crank_serve_offers_single_sign_on_when_its_settings_name_a_provider(
    tmp_path: Path, serve: Callable[..., str]
) -> None:
    settings = given_settings(data_dir=tmp_path, admin_token=TOKEN, role="admin", console_sso_issuer="https://id.example",
                              console_sso_client_id="crank", console_sso_client_secret="sso-secret",
                              console_sso_admins=["alice@example.com"])  # fmt: skip
    base = serve(CrankServer(settings))
    async with httpx.AsyncClient() as client:
        login = await client.get(base + "/console/login")
    assert 'href="/console/login/sso">Sign in with id.example</a>' in login.text and "sso-secret" not in login.text


async def test_a_sign_in_page_opened_from_elsewhere_leaves_a_signed_in_session_alone(console_url: str) -> None:
    async with httpx.AsyncClient() as client, httpx.AsyncClient() as from_elsewhere:
        await signed_in(client, console_url)
        # A browser following a link from another site sends no SameSite=Strict cookie: as a client with none.
        elsewhere = await from_elsewhere.get(console_url + "/login")
        written = elsewhere.headers.get_list("set-cookie")
        assert written and all(value.startswith("crank_console_login=") for value in written)  # never the session's
        assert (await client.get(console_url + "/")).status_code == 200  # still signed in
