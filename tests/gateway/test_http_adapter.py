"""The http adapter against a real upstream on loopback: credentials from secret references, cookies never
shared, path segments that cannot climb, redirects and oversized answers as errors, config checked."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from crank.exceptions import ConfigurationError, ExternalServiceError, IdempotencyError, MappingError, ToolError
from crank.gateway.client import MAX_REQUEST_HEAD_BYTES, UpstreamClient
from crank.gateway.operation import Placement, RemoteOperation
from crank.gateway.secrets import check_secret_reference
from crank.registry import tool_from_spec
from crank.telemetry import JSONLogFormatter, Metrics
from tests.services import free_port

pytestmark = pytest.mark.anyio
seen: list[dict[str, Any]] = []
UNUSED = UpstreamClient()  # builds operations; never sends


async def echo(request: Request) -> Response:
    seen.append({"path": request.scope["raw_path"], "headers": dict(request.headers)})
    return JSONResponse({"ok": True})


async def set_cookie(request: Request) -> Response:
    response = JSONResponse({"ok": True})
    response.set_cookie("session", "tenant-a-secret")
    return response


upstream = Starlette(routes=[
    Route("/echo/{rest:path}", echo), Route("/set-cookie", set_cookie),
    Route("/moved", lambda request: RedirectResponse("/echo/x", status_code=302)),
    Route("/big", lambda request: JSONResponse({"blob": "x" * 5000})),
    Route("/unavailable", lambda request: JSONResponse({"error": "maintenance"}, status_code=503)),
    Route("/unauthorized", lambda request: JSONResponse({"error": "invalid_token"}, status_code=401)),
    Route("/forbidden", lambda request: JSONResponse({"error": "insufficient_scope"}, status_code=403)),
])  # fmt: skip


@pytest.fixture
def base(serve: Callable[..., str]) -> str:
    seen.clear()
    # `localhost`, not an IP: a cookie jar would keep cookies for a host name.
    return serve(upstream).replace("127.0.0.1", "localhost")


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream_client = UpstreamClient(max_response_bytes=1000)
    yield upstream_client
    await upstream_client.aclose()


def operation(client: UpstreamClient, url: str, **config: Any) -> RemoteOperation:
    spec = {"tool_name": "t", "protocol": "http", "target": {"method": "GET", "url": url}, "execution_config": config}
    return RemoteOperation(tool_from_spec(spec), client, placement=Placement("shop", "desk", 1))


async def test_credentials_come_from_references_when_called(
    base: str, client: UpstreamClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "shop-key").write_text("file-secret\n")
    monkeypatch.setenv("CRANK_SECRET_DIRS", str(tmp_path))
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "shop:SHOP_TOKEN")
    bearer = operation(client, base + "/echo/a", auth={"type": "bearer", "secret": "env:SHOP_TOKEN"})
    header = operation(client, base + "/echo/b", auth={"type": "header", "name": "X-Key",
                                                       "secret": f"file:{tmp_path / 'shop' / 'shop-key'}"})  # fmt: skip
    monkeypatch.setenv("SHOP_TOKEN", "env-secret")  # read on the first call, not when the version was built
    await bearer.call({})
    await header.call({})
    assert seen[0]["headers"]["authorization"] == "Bearer env-secret" and seen[1]["headers"]["x-key"] == "file-secret"


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("env:CRANK_DATABASE_URL", "Crank's own settings"),
        ("file:/etc/passwd", "secret files of workspace 'shop' must be in one of"),
        ("file:relative/key", "secret files of workspace 'shop' must be in one of"),
        ("env:HOME", "environment variable 'HOME' is not given to workspace 'shop'"),
        ("vault:x", "a secret is 'env:NAME' or 'file:/path'"),
    ],
)
def test_references_that_could_leak_the_server_are_refused(secret: str, message: str) -> None:
    # The rule publish applies (crank.admin.actions checks every reference of a version before it is kept);
    # a serving replica applies it again on each call (tests/gateway/test_secrets.py).
    with pytest.raises(ConfigurationError, match=message):
        check_secret_reference(secret, workspace="shop", where="tool 'x'")


async def test_cookies_an_upstream_sets_never_go_out_again(base: str, client: UpstreamClient) -> None:
    await operation(client, base + "/set-cookie").call({})
    await operation(client, base + "/echo/other").call({})
    assert "cookie" not in seen[-1]["headers"]


@pytest.mark.parametrize("value", ["..", ".", ""])
async def test_a_path_segment_cannot_climb(base: str, client: UpstreamClient, value: str) -> None:
    with pytest.raises(MappingError, match="may not be"):
        await operation(client, base + "/echo/{id}/posts").call({"id": value})
    await operation(client, base + "/echo/{id}").call({"id": "a/../b c"})
    assert seen[-1]["path"] == b"/echo/a%2F..%2Fb%20c"


async def test_redirects_and_oversized_answers_are_errors(base: str, client: UpstreamClient) -> None:
    with pytest.raises(ExternalServiceError) as redirect:
        await operation(client, base + "/moved").call({})
    assert redirect.value.error_code == "upstream_rejected" and redirect.value.details == {"status": 302}
    assert seen == []  # not followed
    with pytest.raises(ToolError) as big:
        await operation(client, base + "/big").call({})
    assert big.value.error_code == "upstream_bad_response"


@pytest.mark.parametrize(
    ("arguments", "target"),
    [
        ({"q": "x" * (MAX_REQUEST_HEAD_BYTES + 1)}, "/echo/search"),  # too long before it is even encoded
        ({"q": "é" * (MAX_REQUEST_HEAD_BYTES // 5)}, "/echo/search"),  # too long once percent-encoded (6 bytes each)
        ({"id": "x" * MAX_REQUEST_HEAD_BYTES}, "/echo/{id}"),  # a path segment
    ],
)
async def test_arguments_that_make_an_oversized_request_head_are_refused_unsent(
    base: str, client: UpstreamClient, arguments: dict[str, Any], target: str
) -> None:
    with pytest.raises(MappingError) as refused:
        await operation(client, base + target, retries=2).call(arguments)
    assert refused.value.error_code == "arguments_too_large" and refused.value.recoverable
    assert not refused.value.may_have_taken_effect
    assert seen == []  # nothing reached the upstream, on any attempt
    await operation(client, base + target).call({key: "x" * 1000 for key in arguments})  # a long but fitting one goes
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"timeout": 0}, "timeout: Input should be greater than or equal to 0.001"),
        ({"timeout": "10"}, "timeout: Input should be a valid number"),
        ({"retries": -1}, "retries: Input should be greater than or equal to 0"),
        ({"retries": True}, "retries: Input should be a valid integer"),
    ],
)
def test_timeouts_and_retries_are_checked(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^tool 't': execution_config.{message}"):
        operation(UNUSED, "http://u/x", **config)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://u/x", "http:// or https://"),
        ("/relative/path", "http:// or https://"),
        ("http://user:secret@u/x", "credentials"),
        ("http://u/a b", "spaces"),
        ("http://u:99999/x", "not a valid URL"),
        ("http://u:0/x", "port 0"),
    ],
)
def test_target_urls_are_checked_when_the_version_is_built(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        operation(UNUSED, url)


def test_the_method_is_checked_when_the_version_is_built() -> None:
    spec = {"tool_name": "t", "protocol": "http", "target": {"method": "GET /admin HTTP/1.1\r\nX:", "url": "http://u"}}
    with pytest.raises(ConfigurationError, match="is not an HTTP method"):
        RemoteOperation(tool_from_spec(spec), UNUSED)


@pytest.mark.parametrize("cause", ["refused", "dns", "tls", "timeout", "http_503"])
async def test_an_upstream_failure_is_logged_with_its_cause_and_origin(
    base: str, client: UpstreamClient, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    silent = socket.socket()  # listens, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = base.rpartition(":")[2]
    origin = {
        "refused": f"http://127.0.0.1:{free_port()}",
        "dns": "http://nothing.invalid",
        "tls": f"https://localhost:{port}",  # a plain HTTP server
        "timeout": f"http://127.0.0.1:{silent.getsockname()[1]}",
        "http_503": base,
    }[cause]
    caplog.set_level(logging.INFO, logger="crank.calls")
    with silent, pytest.raises(ExternalServiceError) as failed:
        await operation(client, origin + "/unavailable", timeout=0.5 if cause == "timeout" else 10, retries=0).call({})
    Metrics().observer("acme", "support")("t", failed.value, 0.01, "req-1", None, {})
    (record,) = [record for record in caplog.records if record.name == "crank.calls"]
    line = json.loads(JSONLogFormatter().format(record))
    assert line["cause"] == cause and line["origin"] == origin
    assert line["message"].startswith(f"tool t failed: {failed.value.error_code} ({cause}, {origin}")
    assert origin not in json.dumps(failed.value.to_payload("req-1"))  # the operator's, not the client's


async def test_a_retry_that_was_never_sent_keeps_the_key_of_an_attempt_that_was() -> None:
    # The upstream answers the first attempt 502 (it may have acted), then stops listening: the retries are
    # refused before anything is sent. The call may still have acted, so its key stays claimed.
    requests: list[bytes] = []

    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        server.close()  # nothing listens any more: the retries are refused
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_once, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    schema = {"type": "object", "properties": {"request_id": {"type": "string"}}}
    spec = {"tool_name": "t", "protocol": "http", "target": {"method": "POST", "url": f"http://127.0.0.1:{port}/x"},
            "input_schema": schema, "execution_config": {"idempotent": True, "retries": 2,
                                                         "idempotency": {"argument": "request_id"}}}  # fmt: skip
    client = UpstreamClient()
    remote = RemoteOperation(tool_from_spec(spec), client, placement=Placement("shop", "desk", 1))
    with pytest.raises(ExternalServiceError) as failed:
        await remote.call({"request_id": "k-1"})
    assert failed.value.error_code == "upstream_unavailable" and failed.value.may_have_taken_effect
    with pytest.raises(IdempotencyError) as repeat:  # never sent again: the first attempt may have acted
        await remote.call({"request_id": "k-1"})
    assert repeat.value.error_code == "idempotency_outcome_unknown"
    assert len(requests) == 1
    await client.aclose()


@pytest.mark.parametrize(
    ("path", "code"), [("/unauthorized", "upstream_unauthorized"), ("/forbidden", "upstream_forbidden")]
)
async def test_an_upstream_401_or_403_says_the_credentials_need_attention_not_the_arguments(
    base: str, client: UpstreamClient, path: str, code: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "shop:SHOP_TOKEN")
    monkeypatch.setenv("SHOP_TOKEN", "expired-secret")
    caplog.set_level(logging.INFO, logger="crank.calls")
    called = operation(client, base + path, auth={"type": "bearer", "secret": "env:SHOP_TOKEN"}, retries=2)
    with pytest.raises(ExternalServiceError) as failed:
        await called.call({})
    payload = failed.value.to_payload("req-1")
    assert payload["error_code"] == code and payload["recoverable"] is False
    assert "Do not retry with other arguments" in payload["suggested_action"]
    assert "credentials need attention" in payload["suggested_action"]
    metrics = Metrics()
    metrics.observer("shop", "desk")("t", failed.value, 0.01, "req-1", None, {})
    assert f'error_code="{code}"' in metrics.exposition().decode()
    (record,) = [record for record in caplog.records if record.name == "crank.calls"]
    line = json.loads(JSONLogFormatter().format(record))
    assert line["scheme"] == "bearer" and line["origin"] == base and "expired-secret" not in json.dumps(line)
