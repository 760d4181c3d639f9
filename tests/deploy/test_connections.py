"""Users' own connections across replicas (docs/gateway.md, Acting as the user; docs/deployment.md, The token
vault): two `crank serve` processes behind nginx sharing one PostgreSQL registry and one Redis, the same vault key,
and nginx's address as their public URL. A user connects through nginx (each step of the flow may land on either
replica), the connection is used by both, and when the API refuses the token, calls on both replicas at once
refresh it once: a second refresh would reuse the rotated refresh token, which the authorization server refuses."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from crank.registry.runtime import origin_of
from crank.registry.vault import new_vault_key
from tests import services
from tests.cluster import StartCluster, admin, until
from tests.connect_flow import API_RESOURCE, PeopleAPI, browse, call_tool, register
from tests.oauth import authorization_server, obtain_tokens


@pytest.fixture(scope="module")
def identity() -> Iterator[str]:
    with authorization_server() as url:
        yield url


@pytest.fixture(scope="module")
def api_server() -> Iterator[str]:
    with authorization_server() as url:
        yield url


def test_a_connection_made_through_one_replica_is_used_by_both_and_refreshed_once(
    start_cluster: StartCluster, serve: Callable[..., str], identity: str, api_server: str
) -> None:
    port = services.free_port()
    public = f"http://{services.HOST}:{port}"
    sign_in_client = register(identity, public + "/connect/acme/_/signed-in", ["authorization_code"])
    connect_client = register(
        api_server, public + "/connect/acme/people/callback", ["authorization_code", "refresh_token"]
    )
    api = PeopleAPI(api_server)
    base = serve(api.app())
    env = {
        "CRANK_PUBLIC_URL": public, "CRANK_VAULT_KEYS": "env:CLUSTER_VAULT_KEY", "CLUSTER_VAULT_KEY": new_vault_key(),
        "CRANK_SECRET_ENV_ALLOW": "acme:CONNECT_SECRET,acme:SIGN_IN_SECRET",
        "CONNECT_SECRET": connect_client[1], "SIGN_IN_SECRET": sign_in_client[1],
    }  # fmt: skip
    cluster = start_cluster(2, env=env, nginx_port=port)
    metadata = httpx.get(api_server + "/.well-known/openid-configuration").json()
    flow = {"authorization_url": metadata["authorization_endpoint"], "token_url": metadata["token_endpoint"]}
    admin(public, "PUT", "/workspaces/acme", {"name": "Acme"})
    admin(public, "PUT", "/workspaces/acme/operations/whoami", {
        "protocol": "http", "target": {"method": "GET", "url": base + "/me"}, "description": "Who I am at the API.",
        "annotations": {"readOnlyHint": True},
        "execution_config": {"requires": [{"scheme": "people", "type": "bearer", "authorization_code": flow}]},
    })  # fmt: skip
    admin(public, "PUT", "/workspaces/acme/credentials/people", {
        "secret": "env:CONNECT_SECRET", "client_id": connect_client[0], "origins": [base, api_server],
        "connection": {"scopes": ["offline_access", "tools:read"], "resource": API_RESOURCE},
    })  # fmt: skip
    admin(public, "PUT", "/workspaces/acme/oauth", {
        "issuers": [identity], "agent_scopes": {"*": ["tools:read"]},
        "sign_in_client": {"issuer": identity, "client_id": sign_in_client[0], "client_secret": "env:SIGN_IN_SECRET"},
    })  # fmt: skip
    admin(public, "PUT", "/workspaces/acme/agents/people", {"bindings": [{"operation": "whoami"}]})
    admin(public, "POST", "/workspaces/acme/agents/people/publish")
    path = "/mcp/v1/acme/people"
    token = _user_token(identity, public + path)
    for replica in cluster.replicas:
        until(lambda url=replica.url: _asks_to_connect(url + path, token), what=f"the publish on {replica.url}")

    # Alice connects through nginx: the link is the public URL's, and any replica takes each step.
    answer = call_tool(cluster.replicas[0].url + path, token)
    link = json.loads(answer["content"][0]["text"])["details"]["connect_url"]
    assert link.startswith(public + "/connect/acme/people?request=")
    users = {origin_of(identity): "alice", origin_of(api_server): "alice"}
    assert browse(link, users).heading == "Connected"
    for replica in cluster.replicas:  # made on one, used by both
        assert call_tool(replica.url + path, token)["structuredContent"] == {"user": "alice"}
    first = api.seen[-1]["token"]

    # The API stops taking the token: twenty calls at once on both replicas, one refresh for them all.
    api.refused.add(first)
    targets = [cluster.replicas[n % 2].url + path for n in range(20)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(lambda url: call_tool(url, token), targets))
    assert [outcome.get("structuredContent") for outcome in outcomes] == [{"user": "alice"}] * 20, outcomes[:2]
    renewed = {entry["token"] for entry in api.seen if entry["token"] != first}
    assert len(renewed) == 1  # one new token, every call retried with it: one refresh across the replicas
    listed = admin(public, "GET", "/workspaces/acme/connections").json()["connections"]
    assert [(entry["scheme"], entry["subject"]) for entry in listed] == [("people", "alice")]
    assert first not in json.dumps(listed)


def _user_token(identity: str, resource: str) -> str:
    import anyio

    tokens = anyio.run(lambda: obtain_tokens(identity, scope="tools:read", resource=resource, user="alice"))
    return str(tokens["access_token"])


def _asks_to_connect(url: str, token: str) -> bool:
    try:
        answer = call_tool(url, token)
    except (httpx.HTTPError, KeyError, ValueError):
        return False
    return "upstream_connection_required" in json.dumps(answer)
