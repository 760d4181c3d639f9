"""`bench/apps/gateway_crank_jwt.py` works: the `gateway-crank-jwt` target's gateway answers a `tools/call` made
with the token its app minted, as `bench/run.py` sends it (no timing asserted: the numbers are in
docs/benchmarks.md, "OAuth access tokens")."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.apps import gateway_catalog, gateway_crank, gateway_crank_jwt

from crank.types import Receive, Scope, Send

ITEM = re.compile(r"^(?:/t/\d{3})?/items/(\d+)$")


async def upstream(scope: Scope, receive: Receive, send: Send) -> None:
    """What bench/upstream/nginx.conf answers: the fixed item with the id of the path."""
    if scope["type"] != "http":
        return
    match = ITEM.match(scope["path"])
    status, body = (200, gateway_catalog.item(int(match[1]))) if match else (404, {"error": "not found"})
    raw = httpx.Response(status, json=body).content
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": raw})


def test_the_jwt_target_answers_a_call_made_with_its_token(
    tmp_path: Path, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "registry.sqlite3"
    gateway_crank.setup(str(db), serve(upstream))
    monkeypatch.setenv("BENCH_GATEWAY_DB", str(db))
    token_file = tmp_path / "token"
    gateway, issuer, token = gateway_crank_jwt.make_app(str(token_file))
    assert token_file.read_text().strip() == token
    url = serve(gateway) + gateway_crank.PATH

    def post(method: str, params: dict[str, Any], auth: str | None) -> httpx.Response:
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
        if auth is not None:
            headers["authorization"] = f"Bearer {auth}"
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(url, json=body, headers=headers, timeout=30)

    call = {"name": gateway_catalog.CALL_TOOL, "arguments": {"id": 7}}
    for _ in range(2):  # the first validates the token, the second finds it cached
        answer = post("tools/call", call, token)
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        assert result.get("isError", False) is False
        assert result["structuredContent"] in (gateway_catalog.item(7), {"result": gateway_catalog.item(7)})
    listed = post("tools/list", {}, token)
    assert listed.status_code == 200 and len(listed.json()["result"]["tools"]) == gateway_catalog.PAGE_SIZE
    # The issuer was asked for its metadata and keys once, on the first request.
    assert issuer.requests == ["/.well-known/oauth-authorization-server/bench-issuer", "/bench-issuer/jwks"]
    # Without the token (or with one for another resource) there is no call.
    assert post("tools/call", call, None).status_code == 401
    assert post("tools/call", call, issuer.token("http://elsewhere.test/mcp/v1/bench/agent")).status_code == 401


def test_run_py_registers_the_jwt_target() -> None:
    from bench import run

    target = next(t for t in run.TARGETS if t.key == run.JWT_GATEWAY)
    assert target.app == "bench.apps.gateway_crank_jwt:app" and target.group == "gateway"


def _three_users_call(credential: str, tmp_path: Path, serve: Callable[..., str],
                      monkeypatch: pytest.MonkeyPatch, calls: int) -> tuple[Any, Any]:  # fmt: skip
    """The JWT gateway target with `credential`'s upstream credentials, three users each calling `calls` times
    (every answer a success); the gateway and its issuer."""
    db = tmp_path / "registry.sqlite3"
    gateway_crank.setup(str(db), serve(upstream))
    monkeypatch.setenv("BENCH_GATEWAY_DB", str(db))
    monkeypatch.setenv("BENCH_GATEWAY_CREDENTIAL", credential)
    monkeypatch.setenv("BENCH_GATEWAY_TOKENS", "3")
    secrets = (gateway_crank_jwt.STATIC_SECRET, gateway_crank_jwt.EXCHANGE_SECRET)
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", ",".join(f"bench:{name}" for name in secrets))
    for name in secrets:  # what the app would set for itself: set here, so that it is taken away after the test
        monkeypatch.setenv(name, "bench-secret")
    token_file = tmp_path / "tokens"
    gateway, issuer, _ = gateway_crank_jwt.make_app(str(token_file))
    url = serve(gateway) + gateway_crank.PATH
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": gateway_catalog.CALL_TOOL, "arguments": {"id": 7}}}  # fmt: skip
    for token in token_file.read_text().split():
        for _ in range(calls):
            headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {token}"}
            answer = httpx.post(url, json=call, headers=headers, timeout=30).json()["result"]
            assert answer.get("isError", False) is False, answer
    return gateway, issuer


def test_the_exchange_target_exchanges_once_per_user_and_keeps_it(
    tmp_path: Path, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, issuer = _three_users_call("exchange", tmp_path, serve, monkeypatch, calls=2)
    assert issuer.exchanges == 3  # one exchange per user, kept for the user's second call


def test_the_connection_target_calls_with_each_users_own_connection_from_the_vault(
    tmp_path: Path, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a connection, a call would be upstream_connection_required: each succeeds.
    gateway, issuer = _three_users_call("connection", tmp_path, serve, monkeypatch, calls=1)
    from crank.wire.auth import Principal

    held = gateway.source.tokens.connections
    for subject in ("bench", "user-1", "user-2"):  # each user's own, read from the vault and kept
        who = Principal("bench", method="oauth", subject=subject, issuer=issuer.url)
        assert held.cached("bench", "people", who) == f"connected.{subject}"
    assert issuer.exchanges == 0  # nothing asked of the authorization server: the connections were there


@pytest.mark.skipif(not Path("/usr/sbin/nginx").exists(), reason="needs nginx (scripts/bench installs it)")
def test_the_first_exchange_bench_runs(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, str(root / "bench" / "token_exchange.py"), "--users", "3", "--out", str(tmp_path)]
    proc = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    assert report["users"] == 3 and report["exchange_ms"]["first"] > 0 and report["static_ms"]["second"] > 0
    assert report["connection_ms"]["first"] > 0 and "first_decryption_ms" in report
