"""The gateway as an OAuth 2.1 resource server (docs/security.md, OAuth): protected resource metadata, challenges
as HTTP statuses, token validation against a real issuer on loopback (tests/gateway/issuer.py), what a token
opens, lazy sign-in, and an issuer that is away. Every refused request is checked to reach no upstream."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from crank.gateway.safety import CONFIRMATION_ARGUMENT
from crank.registry import Registry
from crank.registry.runtime import IntrospectionClient, OAuthPolicy
from crank.server import GatewayService
from crank.sources.workspace_policies import Unknown
from tests.gateway import upstream
from tests.gateway.issuer import Issuer
from tests.gateway.test_gateway import publish_demo

pytestmark = pytest.mark.anyio

READ, WRITE = "tools:read", "tools:write"


@dataclass
class Setup:
    base: str  # the gateway's public URL
    url: str  # the agent's endpoint, and its resource
    issuer: Issuer
    other_issuer: Issuer
    registry: Registry
    gateway: GatewayService

    def post(
        self, token: str | None, method: str, params: dict[str, Any] | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        return httpx.post(kwargs.pop("url", self.url), json=body, headers=headers, timeout=15, **kwargs)

    def call(
        self, token: str | None, tool: str = "get_user", arguments: dict[str, Any] | None = None
    ) -> httpx.Response:
        return self.post(token, "tools/call", {"name": tool, "arguments": arguments or {"id": 2}})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _policy(issuer: Issuer, **overrides: Any) -> OAuthPolicy:
    settings: dict[str, Any] = {"issuers": (issuer.url,), "agent_scopes": {"*": (READ,)},
                                "tool_scopes": {"write": (WRITE,)}}  # fmt: skip
    return OAuthPolicy(**{**settings, **overrides})


@pytest.fixture
def oauth(sqlite_registry: Registry, serve: Callable[..., str]) -> Iterator[Setup]:
    issuer, other = Issuer(), Issuer()
    issuer.url, other.url = serve(issuer.app), serve(other.app)
    registry = sqlite_registry
    publish_demo(registry, serve(upstream.app))
    registry.create_workspace("beta", "Beta")
    registry.set_workspace_oauth("beta", _policy(other))
    registry.set_workspace_oauth("acme", _policy(issuer))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    gateway = GatewayService(registry, poll_interval=0.05, public_url=base)
    serve(gateway, port=port)
    upstream.seen.clear()
    yield Setup(base, base + "/mcp/v1/acme/support", issuer, other, registry, gateway)


def _challenge(response: httpx.Response) -> str:
    return response.headers.get("www-authenticate", "")


def test_the_protected_resource_metadata_names_the_agent_its_issuer_and_scopes(oauth: Setup) -> None:
    path = "/.well-known/oauth-protected-resource/mcp/v1/acme/support"
    response = httpx.get(oauth.base + path, headers={"host": "evil.example", "origin": "https://app.example"})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"
    document = response.json()
    assert document["resource"] == oauth.url  # from the configured public URL, never from the Host header
    assert document["authorization_servers"] == [oauth.issuer.url]
    assert document["bearer_methods_supported"] == ["header"]
    assert set(document["scopes_supported"]) == {READ, WRITE}
    assert httpx.options(oauth.base + path).status_code == 204
    assert httpx.get(oauth.base + "/.well-known/oauth-protected-resource/mcp/v1/acme/ghost").status_code == 404
    # No document at the root: a server of many tenants has no one resource there (clients try the agent's path).
    assert httpx.get(oauth.base + "/.well-known/oauth-protected-resource").status_code == 404


def test_a_public_url_with_a_path_names_metadata_after_the_host(oauth: Setup, serve: Callable[..., str]) -> None:
    port = _free_port()
    gateway = GatewayService(oauth.registry, poll_interval=0.05, public_url=f"http://127.0.0.1:{port}/crank")
    serve(gateway, port=port)
    refused = httpx.post(f"http://127.0.0.1:{port}/mcp/v1/acme/support", json={}, timeout=10)
    metadata = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/crank/mcp/v1/acme/support"
    assert f'resource_metadata="{metadata}"' in _challenge(refused)
    document = httpx.get(metadata).json()  # as a proxy that serves /crank/ from this server passes it on
    assert document["resource"] == f"http://127.0.0.1:{port}/crank/mcp/v1/acme/support"


def test_no_token_is_401_with_the_metadata_and_the_scopes_to_ask_for(oauth: Setup) -> None:
    for response in (oauth.post(None, "tools/list"), oauth.call(None)):
        assert response.status_code == 401
        challenge = _challenge(response)
        assert challenge.startswith("Bearer ")
        metadata = oauth.base + "/.well-known/oauth-protected-resource/mcp/v1/acme/support"
        assert f'resource_metadata="{metadata}"' in challenge
        assert f'scope="{READ}"' in challenge
    assert upstream.seen == []


def test_a_valid_token_lists_and_calls_and_never_reaches_the_upstream(oauth: Setup) -> None:
    token = oauth.issuer.token(oauth.url, scope=f"{READ} {WRITE}")
    listed = oauth.post(token, "tools/list")
    assert listed.status_code == 200
    assert {tool["name"] for tool in listed.json()["result"]["tools"]} >= {"get_user", "create_user"}
    called = oauth.call(token)
    assert called.json()["result"]["structuredContent"] == {"result": {"id": 2, "name": "user2"}}
    created = oauth.call(token, "create_user", {"name": "ann"})
    assert created.json()["result"]["isError"] is False
    assert all(token not in str(seen) for seen in upstream.seen)
    assert all("authorization" not in seen.get("headers", {}) for seen in upstream.seen)


def test_a_token_lists_only_what_it_may_call_and_a_call_past_its_scopes_is_403(oauth: Setup) -> None:
    reader = oauth.issuer.token(oauth.url, scope=READ)
    names = {tool["name"] for tool in oauth.post(reader, "tools/list").json()["result"]["tools"]}
    assert names == {"get_user"}  # the only read-only tool
    plain = httpx.get(oauth.url + "/tools", headers={"authorization": f"Bearer {reader}"})
    assert {tool["name"] for tool in plain.json()["tools"]} == {"get_user"}
    refused = oauth.call(reader, "create_user", {"name": "ann"})
    assert refused.status_code == 403
    challenge = _challenge(refused)
    assert 'error="insufficient_scope"' in challenge
    assert f'scope="{READ} {WRITE}"' in challenge  # every scope the call needs, at once
    assert upstream.seen == []
    # Step-up: the same user with the scope now granted.
    writer = oauth.issuer.token(oauth.url, scope=f"{READ} {WRITE}")
    assert oauth.call(writer, "create_user", {"name": "ann"}).json()["result"]["isError"] is False
    # Without the agent's own scope, nothing at all.
    nothing = oauth.issuer.token(oauth.url, scope="profile")
    assert oauth.post(nothing, "tools/list").status_code == 403


@pytest.mark.parametrize(
    "kind",
    ["expired", "other_audience", "other_issuer", "untrusted_iss", "id_token", "alg_none", "hs256_public_key",
     "garbled", "unknown_kid"],
)  # fmt: skip
def test_tokens_that_prove_nothing_here_are_401_and_reach_no_upstream(oauth: Setup, kind: str) -> None:
    issuer = oauth.issuer
    tokens = {
        "expired": lambda: issuer.token(oauth.url, ttl=-120),
        "other_audience": lambda: issuer.token(oauth.base + "/mcp/v1/acme/other"),
        "other_issuer": lambda: oauth.other_issuer.token(oauth.url),  # beta's issuer, not acme's
        "untrusted_iss": lambda: issuer.token(oauth.url, issuer="https://elsewhere.example"),
        "id_token": lambda: issuer.token(oauth.url, nonce="n-0S6_WzA2Mj", at_hash="x"),
        "alg_none": lambda: issuer.unsigned(oauth.url),
        "hs256_public_key": lambda: issuer.hmac_with_public_key(oauth.url),
        "garbled": lambda: issuer.token(oauth.url)[:-8] + "AAAAAAAA",
        "unknown_kid": lambda: _signed_by_a_stranger(issuer, oauth.url),
    }
    token = tokens[kind]()
    for response in (oauth.post(token, "tools/list"), oauth.call(token)):
        assert response.status_code == 401, (kind, response.text)
        assert 'error="invalid_token"' in _challenge(response)
        assert "resource_metadata=" in _challenge(response)
    if kind in ("expired", "untrusted_iss", "alg_none", "garbled", "unknown_kid"):  # refused by the verifier
        assert f'scope="{READ}"' in _challenge(response)  # what to ask for with a new token
    assert upstream.seen == []


def _signed_by_a_stranger(issuer: Issuer, audience: str) -> str:
    stranger = Issuer()
    stranger.url, stranger.kid = issuer.url, "not-published"
    return stranger.token(audience)


def test_a_token_in_the_query_string_is_not_taken(oauth: Setup) -> None:
    token = oauth.issuer.token(oauth.url)
    response = oauth.post(None, "tools/list", url=f"{oauth.url}?access_token={token}")
    assert response.status_code == 401


def test_an_audience_with_or_without_a_trailing_slash_is_this_resource(oauth: Setup) -> None:
    token = oauth.issuer.token(oauth.url + "/")
    assert oauth.call(token).status_code == 200


def test_a_rotated_signing_key_is_accepted_after_one_refetch(oauth: Setup) -> None:
    assert oauth.call(oauth.issuer.token(oauth.url)).status_code == 200
    oauth.issuer.rotate()
    fetched = oauth.issuer.requests.count("/jwks")
    assert oauth.call(oauth.issuer.token(oauth.url)).status_code == 200
    assert oauth.issuer.requests.count("/jwks") == fetched + 1
    # A flood of tokens with unknown keys right after costs the issuer no more fetches (MIN_REFETCH).
    for _ in range(5):
        assert oauth.call(_signed_by_a_stranger(oauth.issuer, oauth.url)).status_code == 401
    assert oauth.issuer.requests.count("/jwks") == fetched + 1


def test_the_signature_is_checked_once_per_token_and_kept_while_the_issuer_is_away(oauth: Setup) -> None:
    token = oauth.issuer.token(oauth.url)
    assert oauth.call(token).status_code == 200
    oauth.issuer.broken = "error"
    for _ in range(3):  # the validated token keeps working: no fetch, no new check
        assert oauth.call(token).status_code == 200
    oauth.issuer.rotate()  # a new token needs the new key, which the issuer cannot give now
    refused = oauth.call(oauth.issuer.token(oauth.url))
    assert refused.status_code == 503  # the cause is not the token: no sign-in loop
    assert "retry-after" in refused.headers


def test_an_issuer_that_answers_garbage_is_503_not_a_hang(oauth: Setup) -> None:
    oauth.issuer.broken = "garbage"
    response = oauth.call(oauth.issuer.token(oauth.url))
    assert response.status_code == 503
    assert upstream.seen == []


def test_opaque_tokens_are_introspected(oauth: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "acme:INTROSPECTION_SECRET")
    monkeypatch.setenv("INTROSPECTION_SECRET", "introspection-secret")
    client = IntrospectionClient(client_id="crank", client_secret="env:INTROSPECTION_SECRET")
    oauth.registry.set_workspace_oauth("acme", _policy(oauth.issuer, introspection=client))
    _until(lambda: _held(oauth, lambda held: held.policy.introspection is not None))
    good = oauth.issuer.opaque_token(oauth.url)
    assert oauth.call(good).status_code == 200
    assert oauth.call(oauth.issuer.opaque_token(oauth.url, active=False)).status_code == 401
    assert oauth.call(oauth.issuer.opaque_token(oauth.base + "/mcp/v1/acme/other")).status_code == 401
    asked = oauth.issuer.requests.count("/introspect")
    assert oauth.call(good).status_code == 200
    assert oauth.issuer.requests.count("/introspect") == asked  # kept, bounded (INTROSPECTION_MAX_AGE)


def test_lazy_sign_in_leaves_the_listing_open_and_asks_for_a_token_on_a_call(oauth: Setup) -> None:
    oauth.registry.set_workspace_oauth("acme", _policy(oauth.issuer, sign_in="calls"))
    _until(lambda: _held(oauth, lambda held: held.policy.sign_in == "calls"))
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    assert oauth.post(None, "initialize", initialize).status_code == 200
    listed = oauth.post(None, "tools/list")
    # Listed what a token with the agent's own scopes would see: a tool that needs a scope of its own (write) is
    # listed only once signed in with it (issue 36, hole 5).
    reader = oauth.issuer.token(oauth.url, scope=READ)
    as_reader = {tool["name"] for tool in oauth.post(reader, "tools/list").json()["result"]["tools"]}
    assert listed.status_code == 200 and {tool["name"] for tool in listed.json()["result"]["tools"]} == as_reader
    assert "create_user" not in as_reader and "get_user" in as_reader
    refused = oauth.call(None)
    assert refused.status_code == 401  # an HTTP status on the call itself, never an in-band tool error
    assert 'resource_metadata="' in _challenge(refused) and f'scope="{READ}"' in _challenge(refused)
    assert upstream.seen == []
    assert oauth.call(oauth.issuer.token(oauth.url)).status_code == 200


def test_keys_and_tokens_side_by_side_or_tokens_only_or_keys_only(oauth: Setup) -> None:
    key = oauth.registry.create_api_key("acme")
    token = oauth.issuer.token(oauth.url)
    assert oauth.call(key).status_code == 200 and oauth.call(token).status_code == 200
    oauth.registry.set_workspace_oauth("acme", _policy(oauth.issuer, credentials="oauth"))
    _until(lambda: _held(oauth, lambda held: held.policy.credentials == "oauth"))
    assert oauth.call(key).status_code == 401
    assert oauth.call(token).status_code == 200
    oauth.registry.set_workspace_oauth("acme", _policy(oauth.issuer, credentials="keys"))
    _until(lambda: _held(oauth, lambda held: held is None))
    assert oauth.call(token).status_code == 401  # even a token it had accepted before
    assert oauth.call(key).status_code == 200
    assert httpx.get(oauth.base + "/.well-known/oauth-protected-resource/mcp/v1/acme/support").status_code == 404


def test_a_tightened_policy_applies_to_tokens_already_seen(oauth: Setup) -> None:
    token = oauth.issuer.token(oauth.url, scope=READ)
    assert oauth.call(token).status_code == 200
    oauth.registry.set_workspace_oauth("acme", _policy(oauth.issuer, agent_scopes={"*": (READ, "tools:admin")}))
    _until(lambda: _held(oauth, lambda held: "tools:admin" in held.policy.agent_needs("support")))
    assert oauth.call(token).status_code == 403


def test_an_issuer_that_publishes_only_openid_discovery_is_found(oauth: Setup) -> None:
    oauth.issuer.rfc8414 = False
    assert oauth.call(oauth.issuer.token(oauth.url)).status_code == 200
    assert oauth.issuer.requests[:2] == ["/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"]


def test_one_workspace_introspection_answer_opens_nothing_in_another(
    oauth: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An introspection answer is what one endpoint told one client: another workspace trusting the same issuer
    string, without that introspection client, never takes it from the cache."""
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "beta:INTROSPECTION_SECRET")
    monkeypatch.setenv("INTROSPECTION_SECRET", "introspection-secret")
    client = IntrospectionClient(client_id="crank", client_secret="env:INTROSPECTION_SECRET")
    oauth.registry.set_workspace_oauth("beta", _policy(oauth.issuer, introspection=client))
    # An agent published in beta: a workspace's policy is read (and its tokens checked) where it serves agents.
    target = {"method": "GET", "url": _upstream_base(oauth) + "/users/{id}"}
    oauth.registry.put_operation("beta", "get_user", {"protocol": "http", "target": target})
    oauth.registry.put_agent("beta", "desk", {"bindings": [{"operation": "get_user"}]})
    oauth.registry.publish("beta", "desk")
    _until(lambda: oauth.gateway.source.serves("beta", "desk"))
    _until(lambda: _held(oauth, lambda held: held.policy.introspection is not None, "beta"))
    token = oauth.issuer.opaque_token(oauth.url)  # its answer names acme's agent as audience
    beta = oauth.post(token, "tools/list", url=oauth.base + "/mcp/v1/beta/desk")
    assert beta.status_code in (401, 404)  # introspected by beta's client: not beta's resource
    assert oauth.call(token).status_code == 401  # acme has no introspection: the cached answer is not its own


def test_a_confirmation_token_is_bound_to_the_user_it_was_issued_to(oauth: Setup) -> None:
    oauth.registry.put_operation("acme", "delete_user", {
        "protocol": "http", "target": {"method": "DELETE", "url": _upstream_base(oauth) + "/users/{id}"},
        "description": "Delete a user.", "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}},
    })  # fmt: skip
    agent = oauth.registry.agent_spec("acme", "support") if hasattr(oauth.registry, "agent_spec") else None
    bindings = (agent or {}).get("bindings") or [{"operation": name} for name in ("get_user", "create_user")]
    oauth.registry.put_agent("acme", "support", {"description": "Support", "bindings": [*bindings,
                             {"operation": "delete_user"}]})  # fmt: skip
    oauth.registry.publish("acme", "support")
    _until(lambda: "delete_user" in _names(oauth))
    alice = oauth.issuer.token(oauth.url, scope=f"{READ} {WRITE}", subject="alice")
    bob = oauth.issuer.token(oauth.url, scope=f"{READ} {WRITE}", subject="bob")
    first = oauth.call(alice, "delete_user", {"id": 3}).json()["result"]
    confirmation = json.loads(first["content"][0]["text"])["details"]["confirmation_token"]
    stolen = oauth.call(bob, "delete_user", {"id": 3, CONFIRMATION_ARGUMENT: confirmation}).json()["result"]
    assert stolen["isError"] and json.loads(stolen["content"][0]["text"])["error_code"] == "confirmation_invalid"


def _names(oauth: Setup) -> set[str]:
    token = oauth.issuer.token(oauth.url, scope=f"{READ} {WRITE}")
    return {tool["name"] for tool in oauth.post(token, "tools/list").json()["result"]["tools"]}


def _upstream_base(oauth: Setup) -> str:
    view = oauth.registry.published()[0].runtime
    return view.tools[0].target.url.split("/users")[0]


def _held(oauth: Setup, condition: Callable[[Any], bool], workspace: str = "acme") -> bool:
    """Whether the workspace's policy as the replica checks a request now meets `condition`: the one it holds (a
    reload reads it again after a change), or, when none is held, the registry's (the next request reads it)."""
    held = oauth.gateway.source.policies.held(workspace)
    return isinstance(held, Unknown) or _met(condition, held)


def _met(condition: Callable[[Any], bool], held: Any) -> bool:
    try:
        return condition(held)
    except AttributeError:  # None (no policy) where the condition reads one
        return False


def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_the_subject_and_client_of_a_failed_call_are_in_the_log(oauth: Setup, caplog: pytest.LogCaptureFixture) -> None:
    token = oauth.issuer.token(oauth.url, scope=f"{READ} {WRITE}", subject="carol")
    with caplog.at_level("INFO", logger="crank"):
        assert oauth.call(token, "broken", {}).json()["result"]["isError"]
    failed = [record for record in caplog.records if record.getMessage().startswith("tool broken failed")]
    assert failed and failed[0].__dict__["subject"] == "carol" and failed[0].__dict__["client_id"] == "test-client"
    assert failed[0].__dict__["auth"] == "jwt" and token not in caplog.text


def test_rate_limits_count_per_subject(oauth: Setup) -> None:
    from crank.registry.runtime import Limits, RateLimit

    oauth.registry.put_workspace("acme", "Acme", key_limits=Limits(rate=RateLimit(calls=2, window=60)))
    _until(lambda: _held(oauth, lambda held: held.key_limits is not None))
    alice = oauth.issuer.token(oauth.url, subject="alice")
    bob = oauth.issuer.token(oauth.url, subject="bob")
    assert [oauth.call(alice).json()["result"]["isError"] for _ in range(3)] == [False, False, True]
    assert oauth.call(bob).json()["result"]["isError"] is False  # bob has a count of his own
    again = oauth.issuer.token(oauth.url, subject="alice")  # a new token of the same user shares her count
    assert json.loads(oauth.call(again).json()["result"]["content"][0]["text"])["error_code"] == "rate_limited"


def test_an_issuer_that_does_not_answer_holds_no_request_past_the_fetch_timeout(oauth: Setup) -> None:
    oauth.issuer.broken = "slow"  # 8 s per metadata URL: a request that waited for both would time out below
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_user", "arguments": {"id": 2}}}
    headers = {"authorization": f"Bearer {oauth.issuer.token(oauth.url)}"}
    response = httpx.post(oauth.url, json=body, headers=headers, timeout=12)  # one bounded fetch is 5 s
    assert response.status_code == 503 and "retry-after" in response.headers
    assert upstream.seen == []


def test_a_batch_is_authorized_whole_before_any_of_its_calls_runs(oauth: Setup) -> None:
    reader = oauth.issuer.token(oauth.url, scope=READ)
    calls = [("get_user", {"id": 2}), ("create_user", {"name": "a"})]
    batch = [{"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
             for n, (name, arguments) in enumerate(calls)]  # fmt: skip
    headers = {"authorization": f"Bearer {reader}", "mcp-protocol-version": "2025-03-26"}
    refused = httpx.post(oauth.url, json=batch, headers=headers, timeout=15)
    assert refused.status_code == 403 and 'error="insufficient_scope"' in _challenge(refused)
    assert upstream.seen == []  # not even the call it may make: the batch is refused before anything runs
