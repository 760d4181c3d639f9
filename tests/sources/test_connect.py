"""Users' own connections to an API (docs/gateway.md, Acting as the user): two real authorization servers (npm
`oidc-provider`, src/crank/demo/oauth_server.mjs), one the workspace's identity provider, which the MCP client signs in
with, the other the API's own. The official SDK's OAuth client calls a tool whose scheme acts through each user's
connection; its elicitation callback opens the connect link in Debian's chromium (Playwright), signs in at both
providers and consents, and a recording API checks every bearer token: the API's own, for the user who called.

Hostile cases, each with nothing connected and nothing sent upstream: a link opened by another user, a step
replayed or forged, a step carried to another browser, a redirect elsewhere asked for."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import httpx2
import mcp.types as types
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from playwright.sync_api import sync_playwright
from pydantic import AnyUrl

from crank.admin.actions import check_runtime
from crank.gateway.user_connections import ConnectLinks, ConnectRequest
from crank.registry import Registry
from crank.registry.runtime import OAuthPolicy, SchemeCredential, SignInClient, UserConnection, origin_of
from crank.registry.vault import Vault, VaultKeys, new_vault_key
from crank.server import GatewayService
from crank.sources import connect as connect_module
from crank.sources.agent_cache import AgentCacheLimits
from crank.sources.connect import MAX_WAITING
from crank.state.store import MemoryStore
from crank.telemetry import JSONLogFormatter
from mcp import Client
from tests.connect_flow import API_RESOURCE, PeopleAPI, Visit, browse, call_tool, register, through_providers
from tests.oauth import REDIRECT_URI, MemoryTokenStorage, SignIn, authorization_server, obtain_tokens
from tests.services import free_port

pytestmark = pytest.mark.anyio
LIMIT = 90  # seconds any one test may take, sign-ins and browsers included
MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def identity() -> Iterator[str]:
    """The workspace's identity provider: the MCP client's tokens, and the connect page's sign-in."""
    with authorization_server() as url:
        yield url


@pytest.fixture(scope="module")
def api_server() -> Iterator[str]:
    """The API's own authorization server, where each user connects their account."""
    with authorization_server() as url:
        yield url


@dataclass
class Setup:
    root: str
    url: str
    api: PeopleAPI
    registry: Registry
    vault: Vault
    connect_client: tuple[str, str]
    state: MemoryStore


@pytest.fixture
def setup(
    sqlite_registry: Registry, serve: Callable[..., str], identity: str, api_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Setup:  # fmt: skip
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    sign_in_client = register(identity, root + "/connect/acme/_/signed-in", ["authorization_code"])
    connect_client = register(
        api_server, root + "/connect/acme/people/callback", ["authorization_code", "refresh_token"]
    )
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "acme:CONNECT_SECRET,acme:SIGN_IN_SECRET")
    monkeypatch.setenv("CONNECT_SECRET", connect_client[1])
    monkeypatch.setenv("SIGN_IN_SECRET", sign_in_client[1])
    api = PeopleAPI(api_server)
    base = serve(api.app())
    registry = sqlite_registry
    registry.create_workspace("acme", "Acme")
    metadata = httpx.get(api_server + "/.well-known/openid-configuration").json()
    # As an OpenAPI import records it: the scheme `people` is OAuth 2 with an authorization code flow.
    flow = {"authorization_url": metadata["authorization_endpoint"], "token_url": metadata["token_endpoint"]}
    registry.put_operation("acme", "whoami", {
        "protocol": "http", "target": {"method": "GET", "url": base + "/me"}, "description": "Who I am at the API.",
        "annotations": {"readOnlyHint": True},
        "execution_config": {"requires": [{"scheme": "people", "type": "bearer", "authorization_code": flow}]},
    })  # fmt: skip
    connection = UserConnection(scopes=("offline_access", "tools:read"), resource=API_RESOURCE)
    credential = SchemeCredential(secret="env:CONNECT_SECRET", client_id=connect_client[0], connection=connection,
                                  origins=(origin_of(base), origin_of(api_server)))  # fmt: skip
    registry.set_workspace_credential("acme", "people", credential)
    registry.put_operation("acme", "forget_me", {
        "protocol": "http", "target": {"method": "DELETE", "url": base + "/me"}, "description": "Forget me.",
        "execution_config": {"requires": [{"scheme": "people", "type": "bearer", "authorization_code": flow}]},
    })  # fmt: skip
    registry.put_agent("acme", "people", {"bindings": [{"operation": "whoami"}, {"operation": "forget_me"}]})
    registry.publish("acme", "people", check=check_runtime)
    signing_in = SignInClient(issuer=identity, client_id=sign_in_client[0], client_secret="env:SIGN_IN_SECRET")
    registry.set_workspace_oauth("acme", OAuthPolicy(issuers=(identity,), agent_scopes={"*": ("tools:read",)},
                                                     sign_in_client=signing_in))  # fmt: skip
    keys = VaultKeys.from_references(_key_reference(monkeypatch))
    state = MemoryStore()
    gateway = GatewayService(registry, poll_interval=0.05, public_url=root, vault_keys=keys, state=state)
    assert serve(gateway, port=port) == root
    return Setup(root, root + "/mcp/v1/acme/people", api, registry, Vault(registry.engine, keys), connect_client,
                 state)  # fmt: skip


async def asked_to_connect(setup: Setup, identity: str, user: str) -> tuple[dict[str, Any], str]:
    """`user`'s tokens at the identity provider, and the connect link their first call (by a client without URL
    elicitation) was answered with."""
    tokens = await obtain_tokens(identity, scope="tools:read", resource=setup.url, user=user)
    answer = call_tool(setup.url, tokens["access_token"])
    link: str = json.loads(answer["content"][0]["text"])["details"]["connect_url"]
    return tokens, link


def _key_reference(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CRANK_TEST_VAULT_KEY", new_vault_key())
    return "env:CRANK_TEST_VAULT_KEY"


# -- a person in front of a browser ------------------------------------------------------------------------------


# -- the MCP client ----------------------------------------------------------------------------------------------


@dataclass
class Person:
    """A user at both providers (the same login at each), and the connect links their client was asked to open."""

    name: str
    setup: Setup
    identity: str
    api_server: str
    asked: list[types.ElicitRequestURLParams] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    visits: list[Visit] = field(default_factory=list)

    async def elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        if not isinstance(params, types.ElicitRequestURLParams):  # a destructive call's confirmation: yes
            self.confirmed.append(params.message)
            return types.ElicitResult(action="accept", content={"confirm": True})
        self.asked.append(params)
        users = {origin_of(self.identity): self.name, origin_of(self.api_server): self.name}
        self.visits.append(await anyio.to_thread.run_sync(lambda: browse(params.url, users)))
        return types.ElicitResult(action="accept")

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            self.completed.append(message.params.elicitation_id)

    async def calls(self, mode: str, count: int = 2, tool: str = "whoami", *, at_once: bool = False) -> list[Any]:
        storage = MemoryTokenStorage()
        signing_in = SignIn(user=self.name)
        metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(REDIRECT_URI)], scope="tools:read", client_name="t")
        auth = OAuthClientProvider(self.setup.url, metadata, storage, redirect_handler=signing_in.redirect,
                                   callback_handler=signing_in.callback)  # fmt: skip
        results = []
        with anyio.fail_after(LIMIT):
            async with httpx2.AsyncClient(auth=auth, timeout=60) as http:
                transport = streamable_http_client(self.setup.url, http_client=http)
                async with Client(transport, mode=mode, elicitation_callback=self.elicit,
                                  message_handler=self.message) as client:  # fmt: skip
                    if not at_once:
                        for _ in range(count):
                            results.append(await client.call_tool(tool, {}))
                        return results

                    async def one() -> None:
                        results.append(await client.call_tool(tool, {}))

                    async with anyio.create_task_group() as group:
                        for _ in range(count):
                            group.start_soon(one)
        return results


# -- the tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_each_user_is_asked_once_to_connect_and_then_calls_with_their_own_token(
    setup: Setup, identity: str, api_server: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    alice = Person("alice", setup, identity, api_server)
    first = await alice.calls(mode)
    assert [result.structured_content for result in first] == [{"user": "alice"}] * 2
    assert len(alice.asked) == 1 and alice.visits[0].heading == "Connected"  # asked once, then kept
    assert alice.asked[0].url.startswith(setup.root + "/connect/acme/people?request=")
    if mode == "legacy":  # 2025-11-25: an id, and the completion notice naming it
        assert alice.asked[0].elicitation_id and alice.completed == [alice.asked[0].elicitation_id]
    else:  # 2026-07-28: no ids, no notification; the retry ran
        assert alice.asked[0].elicitation_id is None and alice.completed == []
    bob = Person("bob", setup, identity, api_server)
    assert [result.structured_content for result in await bob.calls(mode, 1)] == [{"user": "bob"}]
    assert len(bob.asked) == 1  # asked separately
    again = Person("alice", setup, identity, api_server)
    assert [result.structured_content for result in await again.calls(mode, 1)] == [{"user": "alice"}]
    assert again.asked == []  # a new session of alice's: her connection is there
    seen = setup.api.seen
    assert [entry["claims"]["sub"] for entry in seen] == ["alice", "alice", "bob", "alice"]
    assert all(entry["claims"]["aud"] == API_RESOURCE and entry["claims"]["iss"] == api_server for entry in seen)
    assert seen[0]["token"] != seen[2]["token"]  # each user's own token
    # In the vault, encrypted, by user: no token in the database.
    entries = setup.vault.entries("acme")
    assert sorted(entry.subject for entry in entries) == ["alice", "bob"]
    with setup.registry.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT ciphertext FROM vault_entries").all()
    assert not any(entry["token"].encode() in bytes(row[0]) for entry in seen for row in rows)
    # No token, access or refresh, in a log line or the metrics.
    kept = [setup.vault.get("acme", "people", identity, user) for user in ("alice", "bob")]
    secrets = [entry["token"] for entry in seen] + [str(entry["refresh_token"]) for entry in kept if entry]
    metrics = httpx.get(setup.root + "/metrics").text
    logged = "\n".join(JSONLogFormatter().format(record) for record in caplog.records)
    assert "connected people" in logged  # the connections are logged, by subject
    assert not any(secret in logged or secret in metrics for secret in secrets)


async def test_a_client_without_url_elicitation_gets_the_link_and_the_link_works(
    setup: Setup, identity: str, api_server: str
) -> None:
    tokens = await obtain_tokens(identity, scope="tools:read", resource=setup.url, user="carol")
    answer = call_tool(setup.url, tokens["access_token"])
    error = json.loads(answer["content"][0]["text"])
    assert answer["isError"] is True and error["error_code"] == "upstream_connection_required"
    assert error["error_class"] == "user_credentials" and error["recoverable"] is False
    link = error["details"]["connect_url"]
    assert link.startswith(setup.root + "/connect/acme/people?request=") and link in error["message"]
    assert "connect_url" in error["suggested_action"] and setup.api.seen == []
    users = {origin_of(identity): "carol", origin_of(api_server): "carol"}
    visit = await anyio.to_thread.run_sync(lambda: browse(link, users))
    assert visit.heading == "Connected", visit.text
    answer = call_tool(setup.url, tokens["access_token"])
    assert answer.get("isError") is not True and answer["structuredContent"] == {"user": "carol"}
    # The agent offers the user their own connections (never a token), and the page to remove them.
    headers = {"authorization": f"Bearer {tokens['access_token']}", "accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "crank://connections"}}
    read = httpx.post(setup.url, json=body, headers=headers, timeout=30).json()["result"]["contents"][0]
    own = json.loads(read["text"])
    assert [entry["scheme"] for entry in own["connections"]] == ["people"]
    assert own["manage_url"] == setup.root + "/connect/acme" and "token" not in read["text"]
    # The page says nothing of tokens, and sent the API's authorization server no return URL of anyone else's.
    assert tokens["access_token"] not in visit.text and setup.api.seen[0]["token"] not in visit.text


async def test_a_link_opened_by_another_user_connects_nobody(setup: Setup, identity: str, api_server: str) -> None:
    tokens, link = await asked_to_connect(setup, identity, "dave")
    # Dave sends his link to Mallory, who opens it signed in as herself: her API account would be linked to
    # Dave's identity (the account-linking attack). Refused once the identity provider says who she is.
    users = {origin_of(identity): "mallory", origin_of(api_server): "mallory"}
    visit = await anyio.to_thread.run_sync(lambda: browse(link, users))
    assert visit.heading == "Nothing was connected" and "another account" in visit.text
    assert not any(origin_of(url) == origin_of(api_server) for url in visit.urls)  # never sent to the API's server
    assert setup.vault.entries("acme") == [] and setup.api.seen == []


async def test_steps_replayed_forged_or_carried_to_another_browser_connect_nobody(
    setup: Setup, identity: str, api_server: str
) -> None:
    tokens, link = await asked_to_connect(setup, identity, "erin")
    users = {origin_of(identity): "erin", origin_of(api_server): "erin"}
    # Erin's browser goes as far as the API's authorization server, and stops there: its URL carries the step's
    # state. Opened in another browser (a victim's, sent the URL), the callback comes back without Erin's cookie.
    started = await anyio.to_thread.run_sync(lambda: browse(link, users, stop_at=api_server))
    to_api = next(url for url in started.urls if url.startswith(api_server + "/auth?"))
    query = parse_qs(urlsplit(to_api).query)
    assert query["redirect_uri"] == [setup.root + "/connect/acme/people/callback"] and query[
        "code_challenge_method"
    ] == ["S256"]
    victim = {origin_of(api_server): "victim"}
    carried = await anyio.to_thread.run_sync(lambda: browse(to_api, victim))
    assert carried.heading == "Nothing was connected" and "not started in this browser" in carried.text
    # A callback made up, and one replayed after its flow finished: refused.
    async with httpx.AsyncClient(timeout=10) as http:
        forged = await http.get(
            setup.root + "/connect/acme/people/callback", params={"code": "stolen", "state": "guessed"}
        )
        assert forged.status_code == 400 and "Nothing was connected" in forged.text
        signed_in = await http.get(setup.root + "/connect/acme/_/signed-in", params={"code": "x", "state": "y"})
        assert signed_in.status_code == 400
        # A link asking to be sent elsewhere afterwards: the only redirect is to the identity provider's.
        asked = await http.get(link + "&next=https://evil.example/&redirect_uri=https://evil.example/")
        assert asked.status_code == 303 and asked.headers["location"].startswith(identity + "/auth?")
        assert "evil" not in asked.headers["location"]
        assert asked.headers["referrer-policy"] == "no-referrer"
        tampered = await http.get(link.replace("acme/people", "acme/other"))
        assert tampered.status_code == 400 and "not valid" in tampered.text
    finished = await anyio.to_thread.run_sync(lambda: browse(link, users))
    assert finished.heading == "Connected"
    callback = next(url for url in finished.urls if url.startswith(setup.root + "/connect/acme/people/callback"))
    async with httpx.AsyncClient(timeout=10) as http:
        replayed = await http.get(callback)
    assert replayed.status_code == 400 and "used already" in replayed.text
    assert [entry.subject for entry in setup.vault.entries("acme")] == ["erin"]
    assert "victim" not in json.dumps([entry.to_json() for entry in setup.vault.entries()])


async def test_a_refused_token_is_refreshed_once_for_all_calls_and_a_revoked_refresh_token_asks_again(
    setup: Setup, identity: str, api_server: str
) -> None:
    tokens, link = await asked_to_connect(setup, identity, "frank")
    users = {origin_of(identity): "frank", origin_of(api_server): "frank"}
    assert (await anyio.to_thread.run_sync(lambda: browse(link, users))).heading == "Connected"
    kept = setup.vault.get("acme", "people", identity, "frank")
    assert kept is not None and kept["refresh_token"]
    # The API stops taking the access token (revoked there, its keys rotated). Ten calls at once meet its 401:
    # one refresh for them all, each sent again once with the new token.
    setup.api.refused.add(kept["access_token"])
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as group:
            for _ in range(10):
                group.start_soon(anyio.to_thread.run_sync, lambda: call_tool(setup.url, tokens["access_token"]))
    refreshed = setup.vault.get("acme", "people", identity, "frank")
    assert refreshed is not None and refreshed["access_token"] != kept["access_token"]
    retried = [entry["token"] for entry in setup.api.seen if entry["token"] != kept["access_token"]]
    assert retried == [refreshed["access_token"]] * 10  # every call of the ten: the one new token
    # The refresh token is revoked at the API's server, and the API refuses the access token again: the user is
    # asked to connect again, and the ended connection is gone.
    client_id, secret = setup.connect_client
    metadata = httpx.get(api_server + "/.well-known/openid-configuration").json()
    revoked = httpx.post(metadata["revocation_endpoint"], data={"token": refreshed["refresh_token"]},
                         auth=(client_id, secret))  # fmt: skip
    assert revoked.status_code == 200
    setup.api.refused.add(refreshed["access_token"])
    answer = call_tool(setup.url, tokens["access_token"])
    assert json.loads(answer["content"][0]["text"])["error_code"] == "upstream_connection_required"
    assert setup.vault.get("acme", "people", identity, "frank") is None


async def test_a_call_with_an_api_key_is_refused_and_given_no_link(setup: Setup) -> None:
    key = setup.registry.create_api_key("acme")
    answer = call_tool(setup.url, key)
    error = json.loads(answer["content"][0]["text"])
    assert error["error_code"] == "user_credentials_required" and setup.api.seen == []
    assert "connect_url" not in json.dumps(error)  # an API key is nobody: no link to connect it


def _own_connections(root: str, identity: str, user: str) -> tuple[str, str, list[int]]:
    """A user's own connections page in chromium: signed in at the identity provider, then one removed; the page's
    text before and after, and the statuses of removals forged with the page's session (a wrong CSRF token, and
    the right one sent to another workspace's page)."""
    chromium = shutil.which("chromium")
    assert chromium is not None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_context().new_page()
            page.goto(root + "/connect/acme")
            through_providers(page, {origin_of(identity): user}, None)
            before = page.locator("body").inner_text()
            csrf = page.locator('input[name="csrf"]').first.get_attribute("value")
            forged = [
                page.request.post(root + "/connect/acme/remove", form={"scheme": "people", "csrf": "wrong"}).status,
                page.request.post(root + "/connect/other/remove", form={"scheme": "people", "csrf": csrf or ""}).status,
            ]
            with page.expect_navigation():
                page.get_by_role("button", name="Remove people").click()
            return before, page.locator("body").inner_text(), forged
        finally:
            browser.close()


async def test_a_user_sees_and_removes_their_own_connections(setup: Setup, identity: str, api_server: str) -> None:
    for user in ("grace", "heidi"):
        tokens, link = await asked_to_connect(setup, identity, user)
        users = {origin_of(identity): user, origin_of(api_server): user}
        assert (await anyio.to_thread.run_sync(browse, link, users)).heading == "Connected"
    before, after, forged = await anyio.to_thread.run_sync(lambda: _own_connections(setup.root, identity, "grace"))
    assert "Signed in as grace" in before and "people" in before and "heidi" not in before
    assert forged == [403, 403]  # the session's own page and its CSRF token, or nothing
    assert "You have connected no account here" in after
    assert [entry.subject for entry in setup.vault.entries("acme")] == ["heidi"]  # only her own went
    async with httpx.AsyncClient(timeout=10) as http:  # a removal without the page's session and token: refused
        forged = await http.post(setup.root + "/connect/acme/remove", data={"scheme": "people", "csrf": "x"})
    assert forged.status_code == 403 and len(setup.vault.entries("acme")) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_destructive_call_asks_to_connect_then_to_confirm_and_runs_once(
    setup: Setup, identity: str, api_server: str, mode: str
) -> None:
    """The connection is asked for before the confirmation: a confirmation is never spent by a call whose user must
    connect first (2026-07-28: three rounds, each answer counted once)."""
    ivan = Person("ivan", setup, identity, api_server)
    (result,) = await ivan.calls(mode, 1, tool="forget_me")
    assert result.is_error is False and result.structured_content == {"user": "ivan"}, result.content[0].text
    assert len(ivan.asked) == 1 and len(ivan.confirmed) == 1
    assert [(entry["method"], entry["claims"]["sub"]) for entry in setup.api.seen] == [("DELETE", "ivan")]


async def test_visitors_store_nothing_before_they_sign_in(setup: Setup, identity: str) -> None:
    """The connect pages keep a step in the browser's signed cookie until the provider signed someone in: links
    replayed and pages opened by anyone (without signing in) never fill the state store every tenant shares."""
    tokens, link = await asked_to_connect(setup, identity, "judy")
    before = len(setup.state)
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(50):
            assert (await http.get(link)).status_code == 303  # a valid link, replayed
            assert (await http.get(setup.root + "/connect/acme")).status_code == 303  # the user's own page
            forged = await http.get(setup.root + "/connect/acme/people/callback", params={"state": "x", "code": "y"})
            assert forged.status_code == 400
    assert len(setup.state) == before


def _step(response: httpx.Response) -> tuple[str, dict[str, str]]:
    """The state a connect page's redirect carries, and the cookie that remembers its step."""
    state = parse_qs(urlsplit(response.headers["location"]).query)["state"][0]
    return state, dict(response.cookies)


async def test_a_connect_page_whose_workspace_agents_cannot_be_built_now_answers_503_and_connects_nobody(
    setup: Setup, identity: str, serve: Callable[..., str]
) -> None:
    """A replica that has not built the workspace's agents builds them to find the API the link connects, within
    its build budget: past it, the page says so with 503 (the user retries), not an error page of the server."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    gateway = GatewayService(
        setup.registry,
        poll_interval=0.05,
        public_url=root,
        vault_keys=setup.vault.keys,
        agent_cache=AgentCacheLimits(builds_per_second=0.01),
    )  # one build, then one a 100 s
    assert serve(gateway, port=port) == root
    registry = setup.registry
    registry.create_workspace("globex", "Globex")
    target = {"method": "GET", "url": "http://127.0.0.1:9/ping"}
    registry.put_operation("globex", "ping", {"protocol": "http", "target": target})
    registry.put_agent("globex", "desk", {"bindings": [{"operation": "ping"}]})
    registry.publish("globex", "desk")
    key = registry.create_api_key("globex")
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(200):  # the publish reaches the replica at its next poll
            if gateway.source.serves("globex", "desk"):
                break
            await anyio.sleep(0.05)
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        listed = await http.post(root + "/mcp/v1/globex/desk", headers=headers, json=body)
        assert listed.status_code == 200  # another workspace's agent spent the replica's budget
        link = ConnectLinks(root, setup.vault.keys).link(ConnectRequest("acme", "people", identity, "ivan", "e1"))
        page = await http.get(link)
    assert page.status_code == 503 and "building many agents" in page.text
    assert "location" not in page.headers  # nobody was sent to sign in


async def test_each_step_that_cannot_go_on_says_why_and_connects_nobody(
    setup: Setup, identity: str, api_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = ConnectLinks(setup.root, setup.vault.keys)
    async with httpx.AsyncClient(timeout=10) as http:

        async def page(url: str, **params: str) -> httpx.Response:
            return await http.get(url, params=params or None)

        assert (await page(setup.root + "/connect/nowhere")).status_code == 404  # no sign-in client there
        other_scheme = links.link(ConnectRequest("acme", "mail", identity, "ivan", "e1"))
        refused = await page(other_scheme)
        assert refused.status_code == 404 and "No published tool" in refused.text
        other_issuer = links.link(ConnectRequest("acme", "people", "https://id.elsewhere.example", "ivan", "e2"))
        refused = await page(other_issuer)
        assert refused.status_code == 403 and "another identity provider" in refused.text
        link = links.link(ConnectRequest("acme", "people", identity, "ivan", "e3"))
        monkeypatch.delenv("SIGN_IN_SECRET")
        refused = await page(link)
        assert refused.status_code == 503 and "not set up on this server" in refused.text
        monkeypatch.setenv("SIGN_IN_SECRET", "a wrong secret")  # the identity provider will refuse the code
        started = await page(link)
        assert started.status_code == 303
        state, cookie = _step(started)
        http.cookies.clear()
        http.cookies.update(cookie)
        signed_in = setup.root + "/connect/acme/_/signed-in"
        for params, status, said in [
            ({"error": "access_denied"}, 400, "You did not allow access"),
            ({"iss": "https://id.elsewhere.example", "code": "c"}, 400, "another identity provider"),
            ({"code": "not-a-code"}, 403, ""),  # the identity provider refuses it
        ]:
            refused = await page(signed_in, state=state, **params)
            assert refused.status_code == status and "Nothing was connected" in refused.text and said in refused.text
        refused = await page(setup.root + "/connect/other/_/signed-in", state=state, code="c")  # another workspace's
        assert refused.status_code == 400 and "not started in this browser" in refused.text
        with monkeypatch.context() as later:  # the step's ten minutes have passed
            later.setattr(connect_module, "STATE_MAX_AGE", -1)
            refused = await page(signed_in, state=state, code="c")
        assert refused.status_code == 400 and "took too long" in refused.text
        http.cookies.clear()
        http.cookies.set("crank_connect_step", "forged", path="/connect")
        assert (await page(signed_in, state=state, code="c")).status_code == 400
        http.cookies.clear()
        http.cookies.set("crank_connect_session", "forged", path="/connect")
        own = await page(setup.root + "/connect/acme")  # a forged session: signed in again
        assert own.status_code == 303 and own.headers["location"].startswith(identity + "/auth?")
    assert setup.vault.entries("acme") == [] and setup.api.seen == []


async def test_the_apis_server_refusing_the_user_or_the_code_connects_nobody(
    setup: Setup, identity: str, api_server: str
) -> None:
    tokens, link = await asked_to_connect(setup, identity, "judy")
    users = {origin_of(identity): "judy", origin_of(api_server): "judy"}
    at_api = await anyio.to_thread.run_sync(lambda: browse(link, users, stop_at=api_server))
    to_api = next(url for url in at_api.urls if url.startswith(api_server + "/auth?"))
    state = parse_qs(urlsplit(to_api).query)["state"][0]
    callback = setup.root + "/connect/acme/people/callback"
    async with httpx.AsyncClient(timeout=10, cookies=at_api.cookies) as http:
        denied = await http.get(callback, params={"state": state, "error": "access_denied"})
        assert denied.status_code == 400 and "You did not allow access" in denied.text
        other = await http.get(callback, params={"state": state, "error": "server_error"})
        assert other.status_code == 400 and "refused the connection" in other.text
        wrong_way = await http.get(setup.root + "/connect/acme/mail/callback", params={"state": state, "code": "c"})
        assert wrong_way.status_code == 400  # a step of one scheme never finishes on another's way back
        bad_code = await http.get(callback, params={"state": state, "code": "made-up"})
        assert bad_code.status_code == 502 and "gave no token" in bad_code.text and "made-up" not in bad_code.text
    assert setup.vault.entries("acme") == [] and setup.api.seen == []


async def test_a_user_who_declines_to_connect_is_not_asked_again_by_that_call(
    setup: Setup, identity: str, api_server: str
) -> None:
    class Declines(Person):
        async def elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            self.asked.append(params)  # type: ignore[arg-type]
            return types.ElicitResult(action="decline")

    kate = Declines("kate", setup, identity, api_server)
    (result,) = await kate.calls("auto", 1)
    error = json.loads(result.content[0].text)
    assert result.is_error and error["error_code"] == "upstream_connection_declined"
    assert len(kate.asked) == 1 and setup.vault.entries("acme") == [] and setup.api.seen == []


async def test_a_user_is_asked_by_at_most_four_calls_at_once_and_the_others_get_the_link(
    setup: Setup, identity: str, api_server: str
) -> None:
    class Waits(Person):
        """Answers no question until four are asked (or the test's limit passes), then declines them all."""

        four = anyio.Event()

        async def elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            self.asked.append(params)  # type: ignore[arg-type]
            if len(self.asked) >= MAX_WAITING:
                self.four.set()
            with anyio.move_on_after(10):
                await self.four.wait()
            return types.ElicitResult(action="decline")

    ivan = Waits("ivan", setup, identity, api_server)
    results = await ivan.calls("legacy", MAX_WAITING + 1, at_once=True)
    codes = sorted(json.loads(result.content[0].text)["error_code"] for result in results)
    assert codes == ["upstream_connection_declined"] * MAX_WAITING + ["upstream_connection_required"]
    assert len(ivan.asked) == MAX_WAITING  # the fifth call was given its link, never asked
    assert setup.vault.entries("acme") == [] and setup.api.seen == []
