"""Acting as the user through a token exchange (RFC 8693; docs/gateway.md, Acting as the user): the official SDK's
OAuth client signs in at a real authorization server (npm `oidc-provider`, src/crank/demo/oauth_server.mjs, which has a
token-exchange grant of the tests' own), calls a gateway tool whose scheme's workspace credential exchanges the
user's token, and a recording API checks every bearer token it receives: issued by that server, for the API's
audience, for the user who called, never the MCP client's own token. A call with an API key, and a user the
server refuses, send nothing upstream."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from crank.admin.actions import check_runtime
from crank.registry import Registry
from crank.registry.runtime import OAuthPolicy, SchemeCredential, TokenExchange, origin_of
from crank.server import GatewayService
from mcp import Client
from tests.connect_flow import API_RESOURCE, PeopleAPI
from tests.oauth import REDIRECT_URI, MemoryTokenStorage, SignIn, authorization_server, obtain_tokens
from tests.services import free_port

pytestmark = pytest.mark.anyio
LIMIT = 60  # seconds any one test may take, sign-in included
MODES = ["auto", "legacy"]


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with authorization_server() as url:
        yield url


@dataclass
class Setup:
    root: str
    url: str
    api: PeopleAPI
    registry: Registry
    key: str


@pytest.fixture
def setup(sqlite_registry: Registry, serve: Callable[..., str], issuer: str, monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "acme:EXCHANGE_SECRET")
    monkeypatch.setenv("EXCHANGE_SECRET", "exchange-secret")
    api = PeopleAPI(issuer)
    base = serve(api.app())
    registry = sqlite_registry
    registry.create_workspace("acme", "Acme")
    # The description says the API takes a bearer token (scheme `people`); the workspace's credential for it
    # exchanges the signed-in user's token instead of sending one account's.
    registry.put_operation("acme", "whoami", {
        "protocol": "http", "target": {"method": "GET", "url": base + "/me"}, "description": "Who I am at the API.",
        "annotations": {"readOnlyHint": True},
        "execution_config": {"requires": [{"scheme": "people", "type": "bearer"}]},
    })  # fmt: skip
    exchange = TokenExchange(issuer=issuer, token_url=issuer + "/token", audience=API_RESOURCE, scopes=("people:read",))
    credential = SchemeCredential(secret="env:EXCHANGE_SECRET", client_id="crank-exchange",
                                  origins=(origin_of(base), origin_of(issuer)), exchange=exchange)  # fmt: skip
    registry.set_workspace_credential("acme", "people", credential)
    registry.put_agent("acme", "people", {"bindings": [{"operation": "whoami"}]})
    registry.publish("acme", "people", check=check_runtime)
    registry.set_workspace_oauth("acme", OAuthPolicy(issuers=(issuer,), agent_scopes={"*": ("tools:read",)}))
    key = registry.create_api_key("acme")
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    assert serve(GatewayService(registry, poll_interval=0.05, public_url=root), port=port) == root
    return Setup(root, root + "/mcp/v1/acme/people", api, registry, key)


def _sdk_auth(setup: Setup, user: SignIn, storage: MemoryTokenStorage) -> OAuthClientProvider:
    metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(REDIRECT_URI)], scope="tools:read", client_name="test")
    return OAuthClientProvider(setup.url, metadata, storage, redirect_handler=user.redirect,
                               callback_handler=user.callback)  # fmt: skip


async def _whoami(setup: Setup, user: str, mode: str, calls: int = 2) -> tuple[list[Any], str]:
    """`calls` calls of `whoami` by `user`, signed in through the SDK; their results and the user's own token."""
    signing_in, storage = SignIn(user=user), MemoryTokenStorage()
    results = []
    with anyio.fail_after(LIMIT):
        async with httpx2.AsyncClient(auth=_sdk_auth(setup, signing_in, storage), timeout=20) as http:
            async with Client(streamable_http_client(setup.url, http_client=http), mode=mode) as client:
                for _ in range(calls):
                    results.append(await client.call_tool("whoami", {}))
    assert storage.tokens is not None
    return results, storage.tokens.access_token


async def _exchanges(issuer: str) -> int:
    async with httpx.AsyncClient() as http:
        return int((await http.get(issuer + "/test/exchanges")).json()["exchanges"])


@pytest.mark.parametrize("mode", MODES)
async def test_each_user_calls_the_api_with_a_token_of_their_own(setup: Setup, issuer: str, mode: str) -> None:
    before = await _exchanges(issuer)
    alice, alice_token = await _whoami(setup, "alice", mode)
    bob, bob_token = await _whoami(setup, "bob", mode)
    assert [result.structured_content for result in alice] == [{"user": "alice", "acting": "crank-exchange"}] * 2
    assert [result.structured_content for result in bob] == [{"user": "bob", "acting": "crank-exchange"}] * 2
    seen = setup.api.seen
    assert [entry["claims"]["sub"] for entry in seen] == ["alice", "alice", "bob", "bob"]
    assert all(entry["claims"]["aud"] == API_RESOURCE and entry["claims"]["iss"] == issuer for entry in seen)
    assert all(entry["claims"]["scope"] == "people:read" for entry in seen)
    # One exchange per user, kept for the user's next call; never one user's token for another's call.
    assert await _exchanges(issuer) - before == 2
    assert seen[0]["token"] == seen[1]["token"] != seen[2]["token"] == seen[3]["token"]
    # The MCP client's own tokens never reach the API.
    assert not any(entry["token"] in (alice_token, bob_token) for entry in seen)


async def test_a_call_with_an_api_key_is_refused_and_nothing_is_sent(setup: Setup) -> None:
    headers = {"authorization": f"Bearer {setup.key}", "accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
    async with httpx.AsyncClient(timeout=20) as http:
        answer = (await http.post(setup.url, json=body, headers=headers)).json()["result"]
    error = json.loads(answer["content"][0]["text"])
    assert answer["isError"] is True and error["error_code"] == "user_credentials_required"
    assert error["error_class"] == "user_credentials" and error["recoverable"] is False
    assert "signed-in user" in error["message"] and setup.api.seen == []


async def test_a_user_the_identity_provider_refuses_gets_a_clear_error_and_nothing_is_sent(
    setup: Setup, issuer: str
) -> None:
    tokens = await obtain_tokens(issuer, scope="tools:read", resource=setup.url, user="mallory")
    headers = {"authorization": f"Bearer {tokens['access_token']}", "accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
    async with httpx.AsyncClient(timeout=20) as http:
        answer = (await http.post(setup.url, json=body, headers=headers)).json()["result"]
    error = json.loads(answer["content"][0]["text"])
    assert error["error_code"] == "upstream_token_refused" and error["recoverable"] is False
    assert "consent" in error["message"] and tokens["access_token"] not in json.dumps(answer)
    assert setup.api.seen == []
