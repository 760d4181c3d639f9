"""OAuth end to end: the official MCP SDK's OAuth client (authorization code, PKCE, dynamic client registration,
RFC 8707 resource indicators) signs in at a real authorization server (npm `oidc-provider`, tests/oauth.py), then
lists and calls tools through a gateway agent whose workspace takes access tokens, in both protocol eras; a
token's scopes decide what it sees and calls; an ID token, and a token for another agent, open nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import jwt
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from crank.registry import Registry
from crank.registry.runtime import OAuthPolicy
from crank.server import GatewayService
from crank.types import Receive, Scope, Send
from mcp import Client
from tests.gateway import upstream
from tests.gateway.test_gateway import operations, publish_demo
from tests.oauth import REDIRECT_URI, MemoryTokenStorage, SignIn, authorization_server, obtain_tokens
from tests.services import free_port

pytestmark = pytest.mark.anyio
MODES = ["auto", "legacy"]
LIMIT = 60  # seconds any one test may take, sign-in included
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
ALL_TOOLS = set(operations(""))  # tests/gateway/test_gateway.py's demo agent
READ_TOOLS = {"get_user"}  # its only tool with readOnlyHint: the others are writes, which need tools:write


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    """One authorization server for the module's tests: each registers its own clients and users sign in anew."""
    with authorization_server() as url:
        yield url


@dataclass
class Gateway:
    root: str
    url: str
    """The `support` agent's endpoint, which is also its resource (the audience of its tokens)."""
    received: list[dict[str, str]]
    """The headers of every request the upstream received."""

    def agent(self, name: str) -> str:
        return f"{self.root}/mcp/v1/acme/{name}"

    @property
    def metadata(self) -> str:
        """Where the `support` agent's protected resource metadata is (RFC 9728 §3.1)."""
        return f"{self.root}/.well-known/oauth-protected-resource/mcp/v1/acme/support"


@pytest.fixture
def gateway(sqlite_registry: Registry, serve: Callable[..., str], issuer: str) -> Gateway:
    """The demo agent `acme/support`, and `acme/other`, behind a gateway whose public URL names their resources;
    workspace `acme` trusts the test issuer: every request needs `tools:read`, and a call of a write tool
    `tools:write` besides."""
    upstream.seen.clear()
    received: list[dict[str, str]] = []

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            received.append({name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]})
        await upstream.app(scope, receive, send)

    base = serve(recording)
    publish_demo(sqlite_registry, base)
    sqlite_registry.put_agent("acme", "other", {"bindings": [{"operation": "get_user"}]})
    sqlite_registry.publish("acme", "other")
    policy = OAuthPolicy(
        issuers=(issuer,), agent_scopes={"*": ("tools:read",)}, tool_scopes={"write": ("tools:write",)}
    )
    sqlite_registry.set_workspace_oauth("acme", policy)
    # The public URL must be known before the service is built (it names the resources): choose the port first.
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    assert serve(GatewayService(sqlite_registry, poll_interval=0.05, public_url=root), port=port) == root
    return Gateway(root, root + "/mcp/v1/acme/support", received)


def _sdk_auth(gateway: Gateway, user: SignIn, storage: MemoryTokenStorage, scope: str) -> OAuthClientProvider:
    metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(REDIRECT_URI)], scope=scope, client_name="crank test client")
    return OAuthClientProvider(gateway.url, metadata, storage, redirect_handler=user.redirect,
                               callback_handler=user.callback)  # fmt: skip


def _claims(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


def _challenge(response: httpx.Response | httpx2.Response) -> dict[str, str]:
    """The auth-params of a `WWW-Authenticate: Bearer ...` challenge (quoted values without escapes)."""
    value = response.headers["www-authenticate"]
    scheme, _, params = value.partition(" ")
    assert scheme == "Bearer", value
    parsed = {}
    for part in params.split('", '):
        name, _, quoted = part.partition("=")
        parsed[name.strip()] = quoted.strip('"')
    return parsed


def _tools_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _assert_token_stayed_here(gateway: Gateway, *tokens: str) -> None:
    """The upstream never saw the caller's credentials: no Authorization header, no token anywhere."""
    assert gateway.received
    for headers in gateway.received:
        assert "authorization" not in headers, headers
        assert not any(token in value for token in tokens for value in headers.values()), headers


@pytest.mark.parametrize("mode", MODES)
async def test_the_sdk_signs_in_then_lists_and_calls(gateway: Gateway, issuer: str, mode: str) -> None:
    user, storage = SignIn(user="alice"), MemoryTokenStorage()
    auth = _sdk_auth(gateway, user, storage, "tools:read tools:write")
    with anyio.fail_after(LIMIT):
        async with httpx2.AsyncClient(auth=auth, timeout=20) as http:
            async with Client(streamable_http_client(gateway.url, http_client=http), mode=mode) as client:
                listed = await client.list_tools()
                result = await client.call_tool("get_user", {"id": 2})
                again = await client.call_tool("get_user", {"id": 3})
    assert result.is_error is False and result.structured_content == {"result": {"id": 2, "name": "user2"}}
    assert again.structured_content == {"result": {"id": 3, "name": "user3"}}
    # One sign-in, for this agent's resource, with the scope of the gateway's challenge (`tools:read`: the MCP
    # scope selection puts the challenge's scope before the client's own), plus offline_access for a refresh token.
    assert len(user.urls) == 1
    asked = user.requested()
    assert asked["resource"] == gateway.url and asked["code_challenge_method"] == "S256"
    assert set(asked["scope"].split()) == {"tools:read", "offline_access"}
    assert storage.client_info is not None and storage.client_info.client_id == asked["client_id"]
    assert storage.tokens is not None and storage.tokens.refresh_token
    token = storage.tokens.access_token
    claims = _claims(token)
    assert claims["iss"] == issuer and claims["aud"] == gateway.url and claims["sub"] == "alice"
    assert claims["client_id"] == asked["client_id"] and claims["scope"] == "tools:read"
    # The listing shows what the token's scopes open: the read tools.
    assert {tool.name for tool in listed.tools} == READ_TOOLS
    # The calls reached the upstream, without the caller's token.
    assert [entry["path"] for entry in upstream.seen if "path" in entry] == ["/users/2", "/users/3"]
    _assert_token_stayed_here(gateway, token, storage.tokens.refresh_token)


@pytest.mark.parametrize("mode", MODES)
async def test_a_read_token_sees_read_tools_and_steps_up_to_write(gateway: Gateway, issuer: str, mode: str) -> None:
    user, storage = SignIn(user="bob"), MemoryTokenStorage()
    auth = _sdk_auth(gateway, user, storage, "tools:read")
    statuses: list[tuple[int, str]] = []  # of every POST to the agent, as the SDK's HTTP client saw them

    async def note(response: httpx2.Response) -> None:
        if str(response.request.url) == gateway.url and response.request.method == "POST":
            statuses.append((response.status_code, response.headers.get("www-authenticate", "")))

    with anyio.fail_after(LIMIT):
        async with httpx2.AsyncClient(auth=auth, timeout=20, event_hooks={"response": [note]}) as http:
            async with Client(streamable_http_client(gateway.url, http_client=http), mode=mode) as client:
                listed = await client.list_tools()
                assert storage.tokens is not None
                read_token = storage.tokens.access_token
                # The same token, straight: a write tool's call is 403 insufficient_scope, naming what it needs.
                bearer = {"Authorization": f"Bearer {read_token}"}
                async with httpx.AsyncClient(timeout=20) as direct:
                    create = {"name": "create_user", "arguments": {"name": "eve"}}
                    refused = await direct.post(gateway.url, json=_tools_call(**create), headers=MCP_HEADERS | bearer)
                    plain = await direct.post(gateway.url + "/call", json=create, headers=bearer)
                    unlisted = await direct.get(gateway.url + "/tools", headers=bearer)
                assert not [entry for entry in upstream.seen if "body" in entry]
                # The SDK meets the same 403, signs in again for the union of the scopes, and the call goes through.
                created = await client.call_tool("create_user", {"name": "eve"})
                relisted = await client.list_tools(cache_mode="bypass")

    assert {tool.name for tool in listed.tools} == READ_TOOLS
    assert _claims(read_token)["scope"].split() == ["tools:read"]
    for response in (refused, plain):
        assert response.status_code == 403, response.text
        challenge = _challenge(response)
        assert challenge["error"] == "insufficient_scope"
        assert set(challenge["scope"].split()) == {"tools:read", "tools:write"}
        assert challenge["resource_metadata"] == gateway.metadata
    assert unlisted.status_code == 200
    assert {tool["name"] for tool in unlisted.json()["tools"]} == READ_TOOLS

    assert created.is_error is False, created
    assert [entry["body"] for entry in upstream.seen if "body" in entry] == [{"name": "eve"}]
    assert [status for status, _ in statuses if status >= 400] == [401, 403], statuses
    assert 'error="insufficient_scope"' in dict(statuses)[403]
    assert len(user.urls) == 2
    assert set(user.requested(1)["scope"].split()) >= {"tools:read", "tools:write"}
    assert storage.tokens is not None and storage.tokens.access_token != read_token
    write_token = storage.tokens.access_token
    assert set(_claims(write_token)["scope"].split()) >= {"tools:read", "tools:write"}
    assert {tool.name for tool in relisted.tools} == ALL_TOOLS
    _assert_token_stayed_here(gateway, read_token, write_token)


async def test_an_id_token_is_not_an_access_token(gateway: Gateway, issuer: str) -> None:
    with anyio.fail_after(LIMIT):
        # With a nonce, and without one (then nothing but its audience, the client, tells it from an access token).
        responses = [await obtain_tokens(issuer, scope="openid tools:read", resource=gateway.url, nonce="n-0"),
                     await obtain_tokens(issuer, scope="openid tools:read", resource=gateway.url)]  # fmt: skip
        refusals = []
        async with httpx.AsyncClient(timeout=20) as http:
            for tokens in responses:
                id_token = tokens["id_token"]
                claims = _claims(id_token)  # signed by the issuer the workspace trusts, with its key
                assert claims["iss"] == issuer and claims["aud"] == _claims(tokens["access_token"])["client_id"]
                headers = {**MCP_HEADERS, "Authorization": f"Bearer {id_token}"}
                refusals.append(await http.get(gateway.url + "/tools", headers=headers))
                refusals.append(await http.post(gateway.url, json=_tools_call("get_user", {"id": 2}), headers=headers))
            # The access token of the same response opens the agent: the refusal is about the kind of token.
            accepted = await http.get(
                gateway.url + "/tools", headers={"Authorization": f"Bearer {tokens['access_token']}"}
            )
    for response in refusals:
        assert response.status_code == 401, response.text
        assert _challenge(response)["error"] == "invalid_token"
    assert "ID token" in _challenge(refusals[0])["error_description"]
    assert accepted.status_code == 200, accepted.text
    assert upstream.seen == [] and gateway.received == []


async def test_a_token_for_another_agent_opens_nothing_here(gateway: Gateway, issuer: str) -> None:
    other = gateway.agent("other")
    with anyio.fail_after(LIMIT):
        tokens = await obtain_tokens(issuer, scope="tools:read tools:write", resource=other)
        token = tokens["access_token"]
        assert _claims(token)["aud"] == other
        async with httpx.AsyncClient(timeout=20) as http:
            headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
            listing = await http.get(gateway.url + "/tools", headers=headers)
            call = await http.post(gateway.url, json=_tools_call("get_user", {"id": 2}), headers=headers)
            assert upstream.seen == []
            there = await http.post(other, json=_tools_call("get_user", {"id": 2}), headers=headers)
    for response in (listing, call):
        assert response.status_code == 401, response.text
        challenge = _challenge(response)
        assert challenge["error"] == "invalid_token"
        assert challenge["resource_metadata"] == gateway.metadata
    # At the agent it was minted for, the same token calls.
    assert there.status_code == 200, there.text
    assert there.json()["result"]["isError"] is False
    assert [entry["path"] for entry in upstream.seen if "path" in entry] == ["/users/2"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_sdk_signs_in_at_an_in_process_endpoint(serve: Callable[..., str], issuer: str, mode: str) -> None:
    """`RPCService` with `MCPConfig(oauth=...)`: the same sign-in, then a call of an rpc method."""
    from crank.rpc import MCP, RPCApp
    from crank.server import MCPConfig, RPCService

    rpc = RPCApp(title="Notes", version="1.0.0")

    @rpc.method("note.get", groups=["mcp"], mcp=MCP(read_only_hint=True))
    def get_note(id: int) -> str:
        return f"note {id}"

    port = free_port()
    root = f"http://127.0.0.1:{port}"
    policy = OAuthPolicy(issuers=(issuer,), audience=root, agent_scopes={"*": ("tools:read",)})
    serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True, oauth=policy)}), port=port)
    user, storage = SignIn(user="dana"), MemoryTokenStorage()
    metadata = OAuthClientMetadata(redirect_uris=[AnyUrl(REDIRECT_URI)], scope="tools:read", client_name="crank test")
    auth = OAuthClientProvider(root + "/mcp", metadata, storage, redirect_handler=user.redirect,
                               callback_handler=user.callback)  # fmt: skip
    with anyio.fail_after(LIMIT):
        async with httpx2.AsyncClient(auth=auth, timeout=20) as http:
            async with Client(streamable_http_client(root + "/mcp", http_client=http), mode=mode) as client:
                listed = await client.list_tools()
                result = await client.call_tool("note.get", {"id": 4})
    assert [tool.name for tool in listed.tools] == ["note.get"]
    assert result.structured_content == {"result": "note 4"}
    assert user.requested()["resource"] == root + "/mcp"
    assert storage.tokens is not None and _claims(storage.tokens.access_token)["aud"] == root + "/mcp"
