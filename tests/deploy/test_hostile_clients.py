"""Issue 36, hostile clients (fourth round): each hole, tried against a real `crank serve` process on loopback with
issuers and an upstream of its own, judged by what the victim sees (its success, an admitted connection, nothing
sent upstream), never by a time measured here (bench/hostile.py measures the other tenant's latency).

The tenants: `victim` (OAuth tokens of `issuer`, and keys), `beta` (another workspace trusting the same issuer),
`mallory` (a hostile tenant that trusts its own issuer `own`, with lazy sign-in, scoped tools, a monthly quota and
prompts), `disc` (a discovery agent of `victim`'s), and `s0`..`s9` (tenants with keys, for the stream slots).
Attackers send from loopback addresses of their own (127.0.0.2 and up), the victim from 127.0.0.1: budgets and
limits per address tell them apart as they would two hosts.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from crank.admin.actions import check_runtime
from crank.registry import Registry, migrate, open_engine
from crank.registry.runtime import IntrospectionClient, Limits, OAuthPolicy, Quota
from tests.conftest import serving
from tests.gateway import upstream
from tests.gateway.issuer import Issuer, rsa_jwk
from tests.gateway.test_gateway import operations
from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "hostile-clients-admin-token-0123"
READ, WRITE = "tools:read", "tools:write"
MAX_CONNECTIONS = 40  # so that the stream-slot test fills them: 4 list-change streams per workspace
STREAM_TENANTS = [f"s{n}" for n in range(10)]
SETTINGS = {
    # Small budgets, so that a flood from Python exceeds what one process-wide budget would have been.
    "CRANK_TOKEN_CHECKS_PER_SECOND": "40",
    "CRANK_TOKEN_CHECKS_PER_ADDRESS": "10",
    "CRANK_INTROSPECTIONS_PER_SECOND": "8",
    "CRANK_INTROSPECTIONS_PER_ADDRESS": "2",
    "CRANK_TOKEN_CACHE_BYTES": str(128 * 1024),
    "CRANK_TOKEN_CACHE_TOTAL_BYTES": str(160 * 1024),
    "CRANK_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
    "CRANK_TRUSTED_PROXIES": "127.0.0.9",  # a reverse proxy's address: its X-Forwarded-For names the client
}
LAZY_PROMPT_ARGUMENT = "text"


@dataclass
class Hostile:
    base: str
    log: Path
    issuer: Issuer
    own: Issuer
    registry: Registry
    keys: dict[str, str]

    def url(self, workspace: str, agent: str = "support") -> str:
        return f"{self.base}/mcp/v1/{workspace}/{agent}"

    def logged(self) -> list[str]:
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [entry["message"] for entry in lines]


def client(address: str = "127.0.0.1", **options: Any) -> httpx.Client:
    """An HTTP client whose connections come from `address` (a loopback address of its own: another host)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30, **options)


def rpc(http: httpx.Client, url: str, token: str | None, method: str, params: dict[str, Any] | None = None,
        **headers: str) -> httpx.Response:  # fmt: skip
    sent = {"accept": "application/json, text/event-stream", "content-type": "application/json", **headers}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return http.post(url, json=body, headers=sent)


def _policy(issuer: Issuer, **more: Any) -> OAuthPolicy:
    return OAuthPolicy(issuers=(issuer.url,), agent_scopes={"*": (READ,)}, tool_scopes={"write": (WRITE,)}, **more)


def _agent(registry: Registry, workspace: str, base: str, agent: str = "support", **spec: Any) -> None:
    """`get_user` (read-only, readable as a resource), `create_user` and `peek_user` (a GET that is not marked
    read-only: a write-class tool, also a resource template)."""
    ops = operations(base)
    registry.put_operation(workspace, "get_user", ops["get_user"])
    registry.put_operation(workspace, "create_user", ops["create_user"])
    registry.put_operation(workspace, "peek_user", ops["get_user"])
    bindings = [
        {"operation": "get_user", "annotations": {"readOnlyHint": True}, "resource": True},
        {"operation": "create_user"},
        {"operation": "peek_user", "resource": True},
    ]
    registry.put_agent(workspace, agent, {"description": "Users", "bindings": bindings, **spec})
    registry.publish(workspace, agent, check=check_runtime)


def _prompts() -> list[dict[str, Any]]:
    """`heavy`: 16 messages of 16 costly filters each (at most what a template may have), the whole prompt's render
    bounded by one budget; `echo`: one message, one cheap filter."""
    heavy = " ".join(f"{{{{ {LAZY_PROMPT_ARGUMENT}|title }}}}" for _ in range(16))
    argument = [{"name": LAZY_PROMPT_ARGUMENT, "required": True}]
    return [
        {"name": "heavy", "arguments": argument, "messages": [{"text": heavy} for _ in range(16)]},
        {"name": "echo", "arguments": argument, "messages": [{"text": f"{{{{ {LAZY_PROMPT_ARGUMENT}|upper }}}}"}]},
    ]


def _setup_registry(registry: Registry, issuer: Issuer, own: Issuer, base: str) -> dict[str, str]:
    keys = {}
    registry.create_workspace("victim", "Victim")
    _agent(registry, "victim", base)
    _agent(registry, "victim", base, "disc", mode="discovery")
    introspection = IntrospectionClient(client_id="crank", client_secret="env:VICTIM_INTROSPECTION")
    registry.set_workspace_oauth("victim", _policy(issuer, introspection=introspection))
    keys["victim"] = registry.create_api_key("victim")
    registry.create_workspace("beta", "Beta")
    _agent(registry, "beta", base)
    registry.set_workspace_oauth("beta", _policy(issuer))
    registry.put_workspace("mallory", "Mallory", limits=Limits(quota=Quota(calls=300, period="month")))
    _agent(registry, "mallory", base, prompts=_prompts())
    registry.set_workspace_oauth("mallory", _policy(own, sign_in="calls"))
    for tenant in STREAM_TENANTS:
        registry.create_workspace(tenant, tenant.upper())
        _agent(registry, tenant, base)
        keys[tenant] = registry.create_api_key(tenant)
    return keys


def _wait_ready(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "crank serve did not get ready"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    tmp = tmp_path_factory.mktemp("hostile")
    with serving() as start:
        issuer, own = Issuer(), Issuer()
        issuer.url, own.url = start(issuer.app), start(own.app)
        # The hostile tenant's own issuer publishes keys whose checks would cost without bound, beside its own.
        own.extra_keys = [rsa_jwk(3072, secrets.randbits(3000) | (1 << 2999) | 1, "big"), rsa_jwk(8192, 65537, "huge")]
        base = start(upstream.app)
        database = f"sqlite:///{tmp / 'registry.sqlite3'}"
        engine = open_engine(database, pooled=False)
        migrate(engine)
        registry = Registry(engine)
        keys = _setup_registry(registry, issuer, own, base)
        port = free_port()
        root = f"http://127.0.0.1:{port}"
        env = {
            **os.environ, "CRANK_LISTEN": f"127.0.0.1:{port}", "CRANK_DATABASE_URL": database,
            "CRANK_ADMIN_TOKEN": ADMIN_TOKEN, "CRANK_PUBLIC_URL": root, "CRANK_LOG_FORMAT": "json",
            "CRANK_POLL_INTERVAL": "0.1", "CRANK_EGRESS_ALLOW": "127.0.0.0/8,::1",
            "CRANK_SECRET_ENV_ALLOW": "victim:VICTIM_INTROSPECTION", "VICTIM_INTROSPECTION": "introspection-secret",
            **SETTINGS,
        }  # fmt: skip
        log = tmp / "serve.log"
        with log.open("wb") as output:
            process = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve"], cwd=ROOT, env=env,
                                       stdout=subprocess.DEVNULL, stderr=output)  # fmt: skip
        try:
            _wait_ready(root, process, log)
            yield Hostile(root, log, issuer, own, registry, keys)
        finally:
            process.terminate()
            process.wait(timeout=15)
            engine.dispose()


def _names(answer: httpx.Response, kind: str = "tools", field: str = "name") -> set[str]:
    assert answer.status_code == 200, answer.text
    return {item[field] for item in answer.json()["result"][kind]}


# -- 1. signature checks: budgeted per address and per workspace, never per process ----------------------


def test_forged_tokens_from_many_addresses_leave_every_other_callers_new_tokens_working(hostile: Hostile) -> None:
    target = hostile.url("victim")
    with client() as http:  # the victim's users have signed in from here before
        assert rpc(http, target, hostile.issuer.token(target, subject="returning"), "tools/list").status_code == 200
    stop = threading.Event()
    flood: list[int] = []

    def forge(address: str) -> None:  # made-up tokens naming the trusted issuer and its real key id (both public)
        with client(address) as http:
            while not stop.is_set():
                flood.append(rpc(http, target, hostile.issuer.forged(target), "tools/list").status_code)

    # Five addresses of 10 new tokens a second each: more than the attacked workspace's 40 a second.
    threads = [threading.Thread(target=forge, args=(f"127.0.0.{n}",)) for n in range(2, 7)]
    for thread in threads:
        thread.start()
    signed_in = []
    try:
        with client() as http:  # new sign-ins, in the attacked workspace and in another one
            for n in range(10):
                for workspace in ("victim", "beta"):
                    url = hostile.url(workspace)
                    token = hostile.issuer.token(url, scope=READ, subject=f"user-{workspace}-{n}")
                    signed_in.append(rpc(http, url, token, "tools/list").status_code)
                time.sleep(0.25)  # 8 new tokens a second: within this address's own budget (10)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert signed_in == [200] * 20
    # The flood spent its addresses' budgets and the half of the workspace's not kept for known addresses (503,
    # retry), and was refused; no forged token got through.
    assert set(flood) <= {401, 503} and flood.count(503) > 0 and flood.count(401) > 0


# -- 2. introspection: a made-up token is asked about once; budgets per address ------------------------------


def test_a_made_up_opaque_token_is_introspected_once_and_others_new_tokens_still_work(hostile: Hostile) -> None:
    url = hostile.url("victim")
    made_up = secrets.token_hex(16)
    before = hostile.issuer.requests.count("/introspect")
    with client("127.0.0.3") as http:
        repeated = [rpc(http, url, made_up, "tools/list").status_code for _ in range(40)]
        assert hostile.issuer.requests.count("/introspect") == before + 1  # inactive: remembered, never asked again
        distinct = [rpc(http, url, secrets.token_hex(16), "tools/list").status_code for _ in range(40)]
    assert set(repeated) == {401}
    assert set(distinct) <= {401, 503} and distinct.count(503) > 0  # its own address's budget, spent
    with client() as http:
        for _ in range(4):  # the victim's new opaque tokens, from its own address
            assert rpc(http, url, hostile.issuer.opaque_token(url), "tools/list").status_code == 200
            time.sleep(0.5)


# -- 3. validated tokens: cached per workspace, bounded in bytes ---------------------------------------------


def test_one_tenants_valid_tokens_never_push_out_another_tenants(hostile: Hostile) -> None:
    beta = hostile.url("beta")
    with serving() as start:
        keeper = Issuer()  # beta's second issuer, whose key goes away: its tokens then live only in the cache
        keeper.url = start(keeper.app)
        hostile.registry.set_workspace_oauth("beta", OAuthPolicy(issuers=(hostile.issuer.url, keeper.url),
                                                                 agent_scopes={"*": (READ,)}))  # fmt: skip
        time.sleep(0.5)  # the replica reloads (poll 0.1 s)
        kept = [keeper.token(beta, subject=f"kept-{n}") for n in range(5)]
        with client() as http:
            assert all(rpc(http, beta, token, "tools/list").status_code == 200 for token in kept)
        keeper.rotate()  # a kept token cannot be checked again now: its key is gone
        mallory = hostile.url("mallory")
        for n in range(6):  # the hostile tenant's own valid tokens, 4 KB each, past every cache's bound
            with client(f"127.0.0.{10 + n}") as http:
                for m in range(10):
                    token = hostile.own.token(mallory, scope=READ, subject=f"bulk-{n}-{m}", pad="x" * 4000)
                    assert rpc(http, mallory, token, "tools/list").status_code == 200
            time.sleep(0.3)  # within the workspace's budget of new tokens (40 a second)
        with client() as http:
            assert [rpc(http, beta, token, "tools/list").status_code for token in kept] == [200] * 5
    hostile.registry.set_workspace_oauth("beta", _policy(hostile.issuer))


# -- 4. signing keys of unbounded cost are skipped ------------------------------------------------------------


def test_a_signing_key_of_unbounded_cost_is_skipped_and_said_once(hostile: Hostile) -> None:
    url = hostile.url("mallory")
    with client("127.0.0.4") as http:
        for kid in ("big", "huge", "big"):
            refused = rpc(http, url, hostile.own.forged(url, kid=kid), "tools/list")
            assert refused.status_code == 401
            assert "signed with a key its issuer does not publish" in refused.headers["www-authenticate"]
        assert rpc(http, url, hostile.own.token(url, scope=READ), "tools/list").status_code == 200
    lines = [line for line in hostile.logged() if "unbounded cost" in line]
    assert lines and all("'big' (an RSA public exponent of 3000 bits" in line for line in lines)
    assert all("'huge' (an RSA modulus of 8192 bits" in line for line in lines)


# -- 5. lazy sign-in lists an anonymous caller what a caller without scopes sees -------------------------------


def test_lazy_sign_in_lists_an_anonymous_caller_what_a_caller_without_scopes_sees(hostile: Hostile) -> None:
    url = hostile.url("mallory")
    with client("127.0.0.5") as http:
        anonymous = _names(rpc(http, url, None, "tools/list"))
        reader = _names(rpc(http, url, hostile.own.token(url, scope=READ), "tools/list"))
        writer = _names(rpc(http, url, hostile.own.token(url, scope=f"{READ} {WRITE}"), "tools/list"))
        assert anonymous == reader == {"get_user"} and writer == {"get_user", "create_user", "peek_user"}
        templates = _names(rpc(http, url, None, "resources/templates/list"), "resourceTemplates", "uriTemplate")
        assert templates == {"crank://mallory/support/get_user/{id}"}  # not peek_user's: its tool needs a scope
        assert rpc(http, url, None, "tools/call", {"name": "get_user", "arguments": {"id": 2}}).status_code == 401


# -- 6. a batch is authorized whole before any item runs ----------------------------------------------------


def _batch(url: str, token: str, items: list[tuple[str, dict[str, Any]]]) -> httpx.Response:
    body = [{"jsonrpc": "2.0", "id": n, "method": method, "params": params} for n, (method, params) in enumerate(items)]
    headers = {"authorization": f"Bearer {token}", "mcp-protocol-version": "2025-03-26",
               "accept": "application/json, text/event-stream"}  # fmt: skip
    with client() as http:
        return http.post(url, json=body, headers=headers)


def test_a_batch_is_authorized_whole_before_any_of_its_items_runs(hostile: Hostile) -> None:
    discovery, direct = hostile.url("victim", "disc"), hostile.url("victim")
    upstream.seen.clear()
    through_discovery = [
        ("tools/call", {"name": "call_operation", "arguments": {"name": "get_user", "arguments": {"id": 2}}}),
        ("tools/call", {"name": "call_operation", "arguments": {"name": "create_user", "arguments": {"name": "e"}}}),
    ]
    refused = _batch(discovery, hostile.issuer.token(discovery, scope=READ), through_discovery)
    assert refused.status_code == 403 and WRITE in refused.headers["www-authenticate"]
    reading = [("tools/call", {"name": "get_user", "arguments": {"id": 2}}),
               ("resources/read", {"uri": "crank://victim/support/peek_user/3"})]  # fmt: skip
    refused = _batch(direct, hostile.issuer.token(direct, scope=READ), reading)
    assert refused.status_code == 403
    assert upstream.seen == []  # not even the items it may make: nothing ran
    allowed = _batch(direct, hostile.issuer.token(direct, scope=f"{READ} {WRITE}"), reading)
    assert allowed.status_code == 200 and len(allowed.json()) == 2 and len(upstream.seen) == 2


# -- 7. no host from arguments -----------------------------------------------------------------------------------


def test_a_placeholder_in_an_upstream_host_is_refused_at_import_publish_and_serving(hostile: Hostile) -> None:
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    document = {
        "openapi": "3.1.0", "info": {"title": "Items", "version": "1"},
        "servers": [{"url": "http://{item_id}:8080/api", "variables": {"item_id": {"default": "{item_id}"}}}],
        "paths": {"/items/{item_id}": {"get": {
            "operationId": "getItem", "responses": {"200": {"description": "ok"}},
            "parameters": [{"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        }}},
    }  # fmt: skip
    with client() as http:
        imported = http.post(f"{hostile.base}/admin/v1/workspaces/mallory/imports", headers=admin,
                             json={"format": "openapi", "document": document})  # fmt: skip
        assert imported.status_code == 422
        message = imported.json()["error"]["message"]
        assert "server variable 'item_id'" in message and "paths./items/{item_id}.get" in message
        operation = {"protocol": "http", "target": {"method": "GET", "url": "http://{host}:8080/items"}}
        assert http.put(f"{hostile.base}/admin/v1/workspaces/mallory/operations/steal", headers=admin,
                        json=operation).status_code in (200, 201)  # fmt: skip
        http.put(f"{hostile.base}/admin/v1/workspaces/mallory/agents/thief", headers=admin,
                 json={"bindings": [{"operation": "steal"}]})  # fmt: skip
        published = http.post(f"{hostile.base}/admin/v1/workspaces/mallory/agents/thief/publish", headers=admin)
        assert published.status_code == 422 and "placeholder" in published.json()["error"]["message"]
    # A version stored without the check (an older release's) is not served: its build refuses it too.
    hostile.registry.publish("mallory", "thief")
    time.sleep(0.5)
    with client() as http:
        token = hostile.own.token(hostile.url("mallory", "thief"), scope=READ)
        assert rpc(http, hostile.url("mallory", "thief"), token, "tools/list").status_code == 404
    assert any("mallory/thief" in line and "cannot be served" in line for line in hostile.logged())


# -- 8. list-change streams cannot take every slot ----------------------------------------------------------------


def _stream(port: int, path: str, key: str | None, address: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(address, 0))
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n{auth}\r\n".encode())
    return sock


def _status(sock: socket.socket) -> int:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            return 0  # closed without an answer
        head += chunk
    return int(head.split(b" ", 2)[1])


def test_one_workspaces_streams_never_keep_another_tenant_out(hostile: Hostile) -> None:
    port = int(hostile.base.rsplit(":", 1)[1])
    held: list[socket.socket] = []
    try:
        # Anonymous clients of a lazy workspace, from as many addresses as they like: its bound (4 here) holds.
        anonymous = [_stream(port, "/mcp/v1/mallory/support", None, f"127.0.0.{60 + n}") for n in range(5)]
        held += anonymous
        assert [_status(sock) for sock in anonymous] == [200, 200, 200, 200, 429]
        for sock in anonymous:
            sock.close()
        time.sleep(0.3)
        # Ten tenants, each at its own bound: every connection slot holds a stream.
        for tenant in STREAM_TENANTS:
            opened = [_stream(port, f"/mcp/v1/{tenant}/support", hostile.keys[tenant]) for _ in range(4)]
            assert [_status(sock) for sock in opened] == [200] * 4
            held += opened
        one_more = _stream(port, "/mcp/v1/s9/support", hostile.keys["s9"])
        held.append(one_more)
        assert _status(one_more) == 429  # its workspace's bound (the connection was admitted: an old stream gave way)
        # Another tenant's connection and stream are admitted: the oldest stream of the largest group gives way.
        victim = _stream(port, "/mcp/v1/victim/support", hostile.keys["victim"])
        held.append(victim)
        assert _status(victim) == 200
        with client() as http:
            listed = rpc(http, hostile.url("victim"), hostile.keys["victim"], "tools/list")
            assert listed.status_code == 200
        assert any("closed the oldest list-change stream" in line for line in hostile.logged())
    finally:
        for sock in held:
            sock.close()
        time.sleep(0.5)  # the streams end on the server before the next test


# -- 9. a prompt never holds the other requests -------------------------------------------------------------------


def test_a_costly_prompt_never_holds_another_tenants_requests(hostile: Hostile) -> None:
    url = hostile.url("mallory")
    text = " a" * (8 * 1024)  # at the costly filters' bound: 256 calls of `title` cost more than the whole budget
    done: dict[str, float] = {}
    answers: dict[str, httpx.Response] = {}

    def render() -> None:
        with client("127.0.0.30") as http:
            answers["prompt"] = rpc(http, url, None, "prompts/get", {"name": "heavy", "arguments": {"text": text}})
            done["prompt"] = time.monotonic()

    thread = threading.Thread(target=render)
    thread.start()
    time.sleep(0.05)  # the prompt is rendering now
    with client() as http:
        answers["victim"] = rpc(http, hostile.url("victim"), hostile.keys["victim"], "tools/list")
        done["victim"] = time.monotonic()
    thread.join()
    assert answers["victim"].status_code == 200
    assert done["victim"] < done["prompt"]  # answered while the prompt rendered, not after it
    message = answers["prompt"].json()["error"]["message"]  # one budget for the whole prompt: its time or length
    assert "rendering took longer than 0.25 s" in message or "longer than 1048576 characters" in message
    with client("127.0.0.31") as http:  # a costly filter over more than it takes: refused at once
        refused = rpc(http, url, None, "prompts/get", {"name": "heavy", "arguments": {"text": "ab " * 20_000}})
    assert "the filter 'title' takes at most 16384 characters" in refused.json()["error"]["message"]


# -- 10. wrong admin tokens are slowed and logged per address -------------------------------------------------------


def test_wrong_admin_tokens_are_slowed_and_logged_per_address(hostile: Hostile) -> None:
    workspaces = f"{hostile.base}/admin/v1/workspaces"
    with client("127.0.0.40") as http:
        page = http.get(f"{hostile.base}/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        answers, consoles = [], []
        started = time.monotonic()
        for n in range(20):  # guesses through the admin API and the console's sign-in, in turn
            answers.append(http.get(workspaces, headers={"authorization": f"Bearer wrong-guess-{n}"}))
            consoles.append(http.post(f"{hostile.base}/console/login", data={"csrf": csrf[1], "token": f"guess-{n}"}))
        elapsed = time.monotonic() - started
    statuses = [answer.status_code for answer in answers]
    signed = [answer.status_code for answer in consoles]
    # One guard for both, judged by outcome: 10 a second at most in all (two guards would let through twice as
    # many), and each way met its refusal.
    assert (statuses + signed).count(401) <= 10 + 10 * elapsed + 1
    assert 429 in statuses and 429 in signed and set(statuses) == {401, 429}
    assert all(answer.headers["retry-after"] == "1" for answer in answers if answer.status_code == 429)
    right = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    with client("127.0.0.41") as http:  # another address, meanwhile: the right token works
        assert http.get(workspaces, headers=right).status_code == 200
    with client("127.0.0.40") as http:  # the guessing address too, once its budget refills (a second at most)
        deadline = time.monotonic() + 10
        while (status := http.get(workspaces, headers=right).status_code) == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status == 200
    logged = [line for line in hostile.logged() if "a wrong admin token from 127.0.0.40" in line]
    assert logged and "through the admin API" in logged[0]
    assert all("wrong-guess" not in line for line in hostile.logged())  # never the token itself


# -- 12. requests without credentials never spend the workspace's limits -------------------------------------------


def test_requests_without_credentials_never_spend_the_workspaces_quota(hostile: Hostile) -> None:
    url = hostile.url("mallory")

    def anonymous(_: int) -> httpx.Response:
        with client("127.0.0.50") as http:
            return rpc(http, url, None, "tools/list")

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(anonymous, range(320)))  # more than the workspace's monthly quota of 300
    windows = math.ceil(time.monotonic() - started) + 1  # the 1 s windows the requests can have fallen in
    limited = [answer for answer in answers if answer.status_code == 429]
    admitted = len(answers) - len(limited)
    assert limited and {answer.status_code for answer in answers} == {200, 429} and admitted <= 10 * windows
    assert {answer.json()["error"]["data"]["details"]["limit"] for answer in limited} == {"anonymous_address_rate"}
    with client() as http:  # the workspace's users still have their quota
        token = hostile.own.token(url, scope=READ)
        assert rpc(http, url, token, "tools/list").status_code == 200
        called = rpc(http, url, token, "tools/call", {"name": "get_user", "arguments": {"id": 2}})
        assert called.status_code == 200 and called.json()["result"]["isError"] is False


# -- behind a reverse proxy: the client's address from the proxy's X-Forwarded-For, and only from there -----------


def test_a_trusted_proxy_names_the_client_and_nobody_else_can(hostile: Hostile) -> None:
    url = hostile.url("mallory")

    def anonymous(address: str, forwarded: list[str]) -> tuple[int, int]:
        """How many of these requests without credentials were admitted, and in how many 1 s windows at most."""
        started = time.monotonic()
        with client(address) as http:
            statuses = [rpc(http, url, None, "tools/list", **{"x-forwarded-for": name}).status_code
                        for name in forwarded]  # fmt: skip
        assert set(statuses) <= {200, 429}
        return statuses.count(200), math.ceil(time.monotonic() - started) + 1

    # Through the proxy (127.0.0.9): each client has its own 10 requests a second without credentials.
    admitted, _ = anonymous("127.0.0.9", [f"198.51.100.{n}" for n in range(1, 41)])
    assert admitted == 40  # forty clients, one request each
    admitted, windows = anonymous("127.0.0.9", ["198.51.100.99"] * 60)
    assert admitted <= 10 * windows and admitted < 60  # one client, limited
    # Anyone else's X-Forwarded-For is not read: a client cannot make itself many clients.
    admitted, windows = anonymous("127.0.0.8", [f"203.0.113.{n}" for n in range(1, 61)])
    assert admitted <= 10 * windows and admitted < 60
