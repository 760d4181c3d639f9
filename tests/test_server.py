"""`crank serve` (`CrankServer`) when its registry or Redis fails: a private PostgreSQL and a private Redis
reached through a TCP proxy the test controls (tests/proxy.py), which forwards, refuses or black-holes.

`/readyz` says which dependency does not answer, the admin API fails fast with its JSON error, and once its key
list is older than `key_list_max_age` an MCP replica refuses every key with 503 (a key revoked meanwhile
must not go on working); all of it recovers when the proxy forwards again. Waits are generous and only
guard against a hang: nothing here measures time."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from crank.registry import Registry, migrate, open_engine
from crank.registry.runtime import Limits, RateLimit
from crank.server import CrankServer
from crank.settings import given_settings
from crank.wire.connection_limits import ConnectionLimits
from crank.wire.protocol import protocol_for
from tests import services
from tests.gateway import upstream
from tests.gateway.test_gateway import publish_demo
from tests.gateway.test_limits import Counted
from tests.proxy import TCPProxy

TOKEN = "t" * 32
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
WAIT = 60.0  # seconds before a test gives up on a change it waits for (a guard, not a measure)
OPERATION = {"protocol": "http", "target": {"method": "GET", "url": "http://127.0.0.1:9/never"}, "description": "x"}


@pytest.fixture
def database(postgres_url: str) -> Iterator[tuple[str, TCPProxy]]:
    """A fresh database of the private PostgreSQL: its direct URL, and the proxy in front of the server."""
    with services.fresh_database(postgres_url, "crank_faults") as (url, _):
        engine = open_engine(url, pooled=False)
        migrate(engine)
        engine.dispose()
        proxy = TCPProxy(make_url(url).port or 5432)
        try:
            yield url, proxy
        finally:
            proxy.close()


def proxied(url: str, proxy: TCPProxy) -> str:
    return make_url(url).set(port=proxy.port).render_as_string(hide_password=False)


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    """The servers' registry engines, disposed after the servers stopped (ask for it before `serve`): a pooled
    connection left open would be collected during a later test."""
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.dispose()


def server(engines: list[Engine], tmp_path: Path, database_url: str, **values: Any) -> CrankServer:
    """`crank serve` as its settings would build it, with a pooled registry engine of its own."""
    given: dict[str, Any] = {"poll_interval": 0.1, "database_connect_timeout": 1, "database_statement_timeout": 1}
    settings = given_settings(data_dir=tmp_path, database_url=database_url, admin_token=TOKEN, **{**given, **values})
    engine = open_engine(settings.registry_url, connect_timeout=1, statement_timeout=1)
    engines.append(engine)
    return CrankServer(settings, registry=Registry(engine))


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the change waited for did not come"
        time.sleep(0.1)


def status(url: str, headers: dict[str, str] | None = None) -> int:
    # The client's own timeout guards the test against a hang; the server must answer well within it.
    return httpx.get(url, headers=headers, timeout=WAIT).status_code


def test_readyz_and_the_admin_api_while_the_registry_is_black_holed(
    engines: list[Engine], database: tuple[str, TCPProxy], tmp_path: Path, serve: Callable[..., str]
) -> None:
    url, proxy = database
    base = serve(server(engines, tmp_path, proxied(url, proxy)))
    assert httpx.get(base + "/readyz").json() == {"status": "ready"}
    assert status(base + "/admin/v1/workspaces", ADMIN) == 200

    proxy.black_hole()
    until(lambda: status(base + "/readyz") == 503)
    ready = httpx.get(base + "/readyz", timeout=WAIT)
    assert ready.json() == {"status": "not_ready", "unavailable": ["registry"]}
    assert httpx.get(base + "/healthz").status_code == 200  # alive: only not ready
    admin = httpx.get(base + "/admin/v1/workspaces", headers=ADMIN, timeout=WAIT)
    assert admin.status_code == 503
    assert admin.headers["retry-after"].isdigit()
    assert admin.json()["error"]["code"] == "registry_unavailable"

    proxy.forward()
    until(lambda: status(base + "/readyz") == 200)
    assert status(base + "/admin/v1/workspaces", ADMIN) == 200


def test_the_admin_api_answers_json_while_the_database_refuses(
    engines: list[Engine], database: tuple[str, TCPProxy], tmp_path: Path, serve: Callable[..., str]
) -> None:
    url, proxy = database
    base = serve(server(engines, tmp_path, proxied(url, proxy), role="admin"))
    proxy.refuse()
    until(lambda: status(base + "/readyz") == 503)  # the admin role needs its registry too
    for method, path in (("GET", "/workspaces"), ("PUT", "/workspaces/shop")):
        response = httpx.request(method, base + "/admin/v1" + path, headers=ADMIN, json={"name": "Shop"}, timeout=WAIT)
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "registry_unavailable"
        assert "\n" not in error["message"] and "Traceback" not in error["message"]
    proxy.forward()
    until(lambda: status(base + "/admin/v1/workspaces", ADMIN) == 200)


def test_a_new_key_is_503_while_the_registry_refuses_its_lookup(
    engines: list[Engine], database: tuple[str, TCPProxy], tmp_path: Path, serve: Callable[..., str]
) -> None:
    url, proxy = database
    direct = Registry(open_engine(url, pooled=False))
    direct.create_workspace("shop", "Shop")
    direct.put_operation("shop", "get_book", OPERATION)
    direct.put_agent("shop", "desk", {"bindings": [{"operation": "get_book"}]})
    direct.publish("shop", "desk")
    base = serve(server(engines, tmp_path, proxied(url, proxy), role="mcp", poll_interval=20, key_list_max_age=50))
    tools = base + "/mcp/v1/shop/desk/tools"
    assert status(tools, {"Authorization": "Bearer crk_unknown"}) == 401  # loaded, and the watcher started
    fresh = direct.create_api_key("shop")  # after the replica's only reload: only a lookup can find it
    proxy.refuse()
    answer = httpx.get(tools, headers={"Authorization": f"Bearer {fresh}"}, timeout=WAIT)
    assert answer.status_code == 503  # the key may be good: not 401, which would tell the client to drop it
    assert "cannot look up API keys" in answer.json()["error"]["message"]
    proxy.forward()
    until(lambda: status(tools, {"Authorization": f"Bearer {fresh}"}) == 200)
    direct.engine.dispose()


def test_a_replica_refuses_keys_it_cannot_confirm_once_its_key_list_is_too_old(
    engines: list[Engine],
    database: tuple[str, TCPProxy],
    tmp_path: Path,
    serve: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, proxy = database
    direct = Registry(open_engine(url, pooled=False))  # the registry itself, not behind the proxy
    direct.create_workspace("shop", "Shop")
    direct.put_operation("shop", "get_book", OPERATION)
    direct.put_agent("shop", "desk", {"bindings": [{"operation": "get_book"}]})
    direct.publish("shop", "desk")
    revoked, kept = direct.create_api_key("shop"), direct.create_api_key("shop")
    base = serve(server(engines, tmp_path, proxied(url, proxy), role="mcp", key_list_max_age=2))
    tools = base + "/mcp/v1/shop/desk/tools"
    assert status(tools, {"Authorization": f"Bearer {revoked}"}) == 200

    proxy.black_hole()
    direct.revoke_api_key(revoked)  # behind the proxy: the replica cannot hear of it
    caplog.set_level(logging.WARNING, logger="crank.gateway")
    until(lambda: status(tools, {"Authorization": f"Bearer {revoked}"}) == 503)
    refused = httpx.get(tools, headers={"Authorization": f"Bearer {kept}"}, timeout=WAIT)
    assert refused.status_code == 503  # no key can be confirmed: every key waits for the registry
    assert refused.headers["retry-after"].isdigit()
    assert refused.json()["error"]["code"] == -32603
    assert "cannot confirm API keys" in refused.json()["error"]["message"]
    mcp = httpx.post(base + "/mcp/v1/shop/desk", headers={"Authorization": f"Bearer {kept}"}, timeout=WAIT,
                     json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})  # fmt: skip
    assert mcp.status_code == 503
    assert mcp.json()["error"]["code"] == -32603
    assert status(tools) == 401  # no key at all is still no key
    stale = [r for r in caplog.records if "has not confirmed the API keys" in r.getMessage()]
    assert len(stale) == 1  # once per episode, not once per request

    proxy.forward()
    until(lambda: status(tools, {"Authorization": f"Bearer {kept}"}) == 200)
    assert status(tools, {"Authorization": f"Bearer {revoked}"}) == 401
    direct.engine.dispose()


def test_readyz_names_redis_while_it_is_black_holed(
    engines: list[Engine], database: tuple[str, TCPProxy], redis_url: str, tmp_path: Path, serve: Callable[..., str]
) -> None:
    url, _ = database
    with TCPProxy(urlsplit(redis_url).port or 6379) as redis_proxy:
        redis = f"redis://{services.HOST}:{redis_proxy.port}/0"
        base = serve(server(engines, tmp_path, url, role="mcp", redis_url=redis))
        until(lambda: status(base + "/readyz") == 200)
        redis_proxy.black_hole()
        until(lambda: status(base + "/readyz") == 503)
        assert httpx.get(base + "/readyz", timeout=WAIT).json() == {"status": "not_ready", "unavailable": ["redis"]}
        redis_proxy.forward()
        until(lambda: status(base + "/readyz") == 200)


@pytest.mark.parametrize("allowed", [False, True])
def test_allowed_hosts_and_origins_open_a_loopback_replica_to_the_names_of_its_load_balancer(
    serve: Callable[..., str], tmp_path: Path, allowed: bool
) -> None:
    # A replica on 127.0.0.1 has DNS-rebinding protection on: behind nginx, clients reach it by nginx's name.
    values = {"allowed_hosts": "mcp.example.com, ", "allowed_origins": "https://app.example.com"} if allowed else {}
    settings = given_settings(data_dir=tmp_path, admin_token=TOKEN, require_api_keys=False, **values)
    url = serve(CrankServer(settings)) + "/mcp/v1/ws/agent"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    by_name = httpx.post(url, json=body, headers={**accept, "Host": "mcp.example.com:443"}, timeout=WAIT)
    from_app = httpx.post(url, json=body, headers={**accept, "Origin": "https://app.example.com"}, timeout=WAIT)
    other = httpx.post(url, json=body, headers={**accept, "Host": "evil.example.net"}, timeout=WAIT)
    # Past the checks, the request meets an agent that does not exist: 404.
    assert (by_name.status_code, from_app.status_code) == ((404, 404) if allowed else (421, 403))
    assert other.status_code == 421


def test_the_body_limit_of_the_mcp_endpoints_is_a_setting(serve: Callable[..., str], tmp_path: Path) -> None:
    # Parsing is the one cost of a request that grows with its body (docs/security.md): an operator lowers it.
    settings = given_settings(data_dir=tmp_path, admin_token=TOKEN, require_api_keys=False, max_body_bytes=2048)
    url = serve(CrankServer(settings)) + "/mcp/v1/ws/agent"
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    def post(size: int) -> httpx.Response:
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"pad":"'
        body += b"x" * (size - len(body) - 4) + b'"}}}'
        assert len(body) == size
        return httpx.post(url, content=body, headers=accept, timeout=WAIT)

    # Within the limit, the request meets an agent that does not exist: 404.
    assert post(2048).status_code == 404
    refused = post(2049)
    assert refused.status_code == 413
    assert refused.json()["error"]["message"] == "Request body exceeds 2048 bytes"
    assert given_settings(data_dir=tmp_path).max_body_bytes == 4 * 1024 * 1024


def test_crank_serve_answers_a_tenant_over_its_plan_from_the_request_head(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    # `crank serve` hands the server's early answers to its HTTP protocol: past the first refusal (the state
    # store's), a tenant over its plan is answered without reaching the app; other paths always reach it.
    server = CrankServer(given_settings(data_dir=tmp_path, admin_token=TOKEN))
    publish_demo(server.registry, serve(upstream.app))
    server.registry.put_workspace("acme", "Acme", limits=Limits(rate=RateLimit(calls=1, window=60)))
    key = server.registry.create_api_key("acme")
    counted = Counted(server)
    root = serve(counted, http=protocol_for(ConnectionLimits(), server.answer_early, server.answers_early_now))
    headers = {"Accept": "application/json", "Authorization": f"Bearer {key}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    statuses = [httpx.post(root + "/mcp/v1/acme/support", json=body, headers=headers, timeout=WAIT).status_code
                for _ in range(4)]  # fmt: skip
    assert statuses == [200, 429, 429, 429] and counted.requests == 2
    assert httpx.get(root + "/healthz", headers=headers, timeout=WAIT).status_code == 200
    admin = httpx.get(root + "/admin/v1/workspaces", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT)
    assert admin.status_code == 200 and counted.requests == 4


def test_an_in_process_endpoint_is_an_oauth_resource_server(serve: Callable[..., str]) -> None:
    """`MCPConfig(oauth=...)`: the endpoint's metadata (at its path and the root), challenges, tool scopes, and
    a token's scopes as the roles rpc methods ask for."""
    from crank.registry.runtime import OAuthPolicy
    from crank.rpc import MCP, RPCApp
    from crank.server import MCPConfig, RPCService
    from tests.gateway.issuer import Issuer
    from tests.gateway.test_oauth import _free_port

    issuer = Issuer()
    issuer.url = serve(issuer.app)
    rpc = RPCApp(title="Notes", version="1.0.0")
    deleted: list[int] = []

    @rpc.method("note.get", groups=["mcp"], mcp=MCP(read_only_hint=True))
    def get_note(id: int) -> str:
        return f"note {id}"

    @rpc.method("note.delete", groups=["mcp"], roles=["admin"], mcp=MCP(destructive_hint=True))
    def delete_note(id: int) -> bool:
        deleted.append(id)
        return True

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    policy = OAuthPolicy(issuers=(issuer.url,), audience=base, agent_scopes={"*": ("notes",)},
                         tool_scopes={"destructive": ("notes:delete",)})  # fmt: skip
    serve(RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True, oauth=policy)}), port=port)
    resource = base + "/mcp"

    def post(token: str | None, method: str, params: dict[str, Any]) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(resource, json=body, headers=headers, timeout=15)

    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        document = httpx.get(base + path).json()
        assert document["resource"] == resource and document["authorization_servers"] == [issuer.url]
    refused = post(None, "tools/list", {})
    assert refused.status_code == 401
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in refused.headers["www-authenticate"]
    reader = issuer.token(resource, scope="notes")
    assert {tool["name"] for tool in post(reader, "tools/list", {}).json()["result"]["tools"]} == {"note.get"}
    called = post(reader, "tools/call", {"name": "note.get", "arguments": {"id": 7}})
    assert called.json()["result"]["structuredContent"] == {"result": "note 7"}
    denied = post(reader, "tools/call", {"name": "note.delete", "arguments": {"id": 7}})
    assert denied.status_code == 403 and 'scope="notes notes:delete"' in denied.headers["www-authenticate"]
    # The tool's scopes, and the method's role `admin` as a scope: both, or the method refuses (-32001).
    deleter = issuer.token(resource, scope="notes notes:delete")
    no_role = post(deleter, "tools/call", {"name": "note.delete", "arguments": {"id": 7}}).json()["result"]
    assert no_role["isError"] and deleted == []
    admin = issuer.token(resource, scope="notes notes:delete admin")
    assert (
        post(admin, "tools/call", {"name": "note.delete", "arguments": {"id": 7}}).json()["result"]["isError"] is False
    )
    assert deleted == [7]
    assert post(issuer.token(base + "/other"), "tools/list", {}).status_code == 401  # another resource's token


def test_readyz_and_the_log_name_targets_this_servers_egress_policy_refuses(
    sqlite_registry: Any, serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    """A publish checked by a CLI with another `CRANK_EGRESS_ALLOW` (here: loopback allowed) served by a process
    without it: said once in the log when the agent is built, and in /readyz, instead of every call failing
    silently."""
    from crank.gateway.client import UpstreamClient
    from crank.gateway.egress import EgressPolicy
    from crank.server import GatewayService
    from tests.gateway import upstream
    from tests.gateway.test_gateway import publish_demo

    publish_demo(sqlite_registry, serve(upstream.app))
    key = sqlite_registry.create_api_key("acme")
    gateway = GatewayService(sqlite_registry, client=UpstreamClient(egress=EgressPolicy()))
    base = serve(gateway)
    assert httpx.get(base + "/readyz", timeout=10).status_code == 200  # nothing is built before it is asked for
    with caplog.at_level("WARNING", logger="crank.gateway"):  # said when the agent is built, on its first request
        tools = httpx.get(base + "/mcp/v1/acme/support/tools", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert tools.status_code == 200
    warnings = [record.getMessage() for record in caplog.records if "egress policy refuses" in record.getMessage()]
    assert len(warnings) == 1 and "acme/support" in warnings[0] and "get_user" in warnings[0]
    ready = httpx.get(base + "/readyz", timeout=10)
    assert ready.status_code == 503
    refused = ready.json()["refused_targets"]
    assert {entry["tool"] for entry in refused} >= {"get_user", "list_users"}
    assert all(entry["origin"].startswith("http://127.0.0.1:") for entry in refused)


def test_the_admin_api_refuses_a_repeated_header_in_its_own_error_shape_and_smuggling_with_a_closed_connection(
    serve: Callable[..., str], tmp_path: Path
) -> None:
    url = urlsplit(serve(CrankServer(given_settings(data_dir=tmp_path, admin_token=TOKEN))))
    auth = f"Bearer {TOKEN}".encode()
    status, headers, body = _raw_get(url, "/admin/v1/workspaces", [(b"authorization", auth)] * 2)
    assert status == 400 and "more than once" in orjson.loads(body)["error"]["message"]  # the admin API's shape
    status, headers, body = _raw_get(url, "/admin/v1/workspaces", [(b"authorization", auth), (b"content-length", b"0"),
                                                                   (b"transfer-encoding", b"chunked")])  # fmt: skip
    assert status == 400 and headers.get("connection") == "close"


def _raw_get(url: Any, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, str], bytes]:
    """GET with exactly these headers, repeats included (httpx joins or refuses them)."""
    with socket.create_connection((url.hostname, url.port), timeout=WAIT) as sock:
        head = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        chunked = any(name == b"transfer-encoding" for name, _ in headers)
        ending = b"0\r\n\r\n" if chunked else b""
        sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nhost: 127.0.0.1\r\n" + head + b"\r\n" + ending)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    top, _, body = answer.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), fields, body


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0
