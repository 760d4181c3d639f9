"""Upstream credentials (issue 21): each kind reaches a real upstream on loopback as it should (bearer, header,
query, cookie, basic), and OAuth 2 client credentials (oauth2): the token request, the token kept and shared, one
token request for many concurrent calls, one renewal and one retry of an idempotent call after a 401, none for a
POST, a token endpoint that fails; against a token endpoint of our own (which counts and can hold its answers) and
against a real authorization server (oidc-provider, src/crank/demo/oauth_server.mjs). Secrets never appear in logs or
errors, and the caller's own credentials never reach the upstream."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote_plus, unquote_plus

import httpx
import pytest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.exceptions import (
    ConfigurationError,
    ExternalServiceError,
    ToolConfigurationError,
    ToolError,
    UserCredentialsError,
)
from crank.gateway import token_endpoint
from crank.gateway.client import UpstreamClient
from crank.gateway.credentials import FAILURE_MEMORY, TOKEN_EXPIRY_MARGIN, TokenCache, TokenKey
from crank.gateway.operation import Placement, RemoteOperation
from crank.registry import Registry, migrate, open_engine, tool_from_spec
from crank.server import GatewayService
from crank.telemetry import JSONLogFormatter, Metrics
from crank.wire.auth import Principal
from tests.oauth import authorization_server
from tests.services import free_port

pytestmark = pytest.mark.anyio

SECRET = "s3cr%t+/ü:x y"  # the value of env:SHOP_SECRET; characters that need encoding in a form or a query
CLIENT_ID = "crank:upstream é"
MISSING_SECRET = "The tool cannot call its upstream: a credential it needs is not configured on this server."
UNUSED = UpstreamClient()  # builds operations; never sends
EXCHANGED = "urn:ietf:params:oauth:token-type:access_token"


# -- a token endpoint and an upstream of our own ------------------------------------------------------------------


class TokenEndpoint:
    """An authorization server's token endpoint: records each request, answers `token-1`, `token-2`, ... (or
    what `answer` says), after `gate` opens when there is one."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.expires_in: Any = 3600
        self.answer: Callable[[], Response] | None = None
        self.answer_form: Callable[[dict[str, str]], Response] | None = None  # an answer that reads the request
        self.gate: threading.Event | None = None

    async def handle(self, request: Request) -> Response:
        body = (await request.body()).decode()
        self.requests.append({"authorization": request.headers.get("authorization", ""), "form": dict(parse_qsl(body)),
                              "content_type": request.headers.get("content-type", "")})  # fmt: skip
        if self.gate is not None:
            await run_in_threadpool(self.gate.wait, 10)
        if self.answer is not None:
            return self.answer()
        if self.answer_form is not None:
            return self.answer_form(self.requests[-1]["form"])
        answer = {"access_token": f"token-{len(self.requests)}", "token_type": "Bearer"}
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return JSONResponse(answer)


class Upstream:
    """An API that records every request and answers 401 for a bearer token in `refused`."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.refused: set[str] = set()

    async def handle(self, request: Request) -> Response:
        raw_query = request.scope["query_string"].decode()
        self.seen.append({"method": request.method, "query": request.query_params.multi_items(),
                          "raw_query": raw_query, "headers": dict(request.headers)})  # fmt: skip
        if request.headers.get("authorization", "").removeprefix("Bearer ") in self.refused:
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        if request.url.path.endswith("/rpc"):
            message = await request.json()
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": {"ok": True}})
        return JSONResponse({"ok": True})

    def tokens(self) -> list[str]:
        return [seen["headers"].get("authorization", "").removeprefix("Bearer ") for seen in self.seen]


class Site:
    def __init__(self, base: str, token: TokenEndpoint, api: Upstream) -> None:
        self.base, self.token, self.api = base, token, api
        self.token_url = base + "/token"


@pytest.fixture(autouse=True)
def fresh_warnings() -> None:
    """Each case sees its own warning line: one per token URL and interval, and a new server may get the port
    (so the origin) of an earlier case's."""
    token_endpoint._notices.forget()


@pytest.fixture
def site(serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> Site:
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "shop:SHOP_SECRET")
    monkeypatch.setenv("SHOP_SECRET", SECRET)
    token, api = TokenEndpoint(), Upstream()
    app = Starlette(routes=[Route("/token", token.handle, methods=["POST"]),
                            Route("/api/{rest:path}", api.handle, methods=["GET", "POST"])])  # fmt: skip
    return Site(serve(app), token, api)


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream_client = UpstreamClient()
    yield upstream_client
    await upstream_client.aclose()


def operation(
    client: UpstreamClient, url: str, auth: dict[str, Any] | None, *, method: str = "GET",
    tokens: TokenCache | None = None, protocol: str = "http", workspace: str = "shop", **more: Any,
) -> RemoteOperation:  # fmt: skip
    config = {"auth": auth, **more.pop("execution_config", {})}
    target = {"method": method, "url": url} if protocol == "http" else {"method": "Things.get", "url": url}
    spec = {"tool_name": "t", "protocol": protocol, "target": target, "execution_config": config, **more}
    return RemoteOperation(tool_from_spec(spec), client, placement=Placement(workspace, "desk", 1), tokens=tokens)


def oauth2(site: Site, **auth: Any) -> dict[str, Any]:
    return {"type": "oauth2", "client_id": CLIENT_ID, "secret": "env:SHOP_SECRET", "token_url": site.token_url,
            **auth}  # fmt: skip


def assert_never_logged(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    """No log record, with its extras, carries any of `secrets`."""
    formatter = JSONLogFormatter()
    for record in caplog.records:
        line = formatter.format(record)
        for secret in secrets:
            assert secret not in line and json.dumps(secret)[1:-1] not in line, line


def call_line(caplog: pytest.LogCaptureFixture, error: ToolError) -> dict[str, Any]:
    """The operator's log line of a failed call (crank.calls), as JSON."""
    caplog.clear()
    Metrics().observer("shop", "desk")("t", error, 0.01, "req-1", None, {})
    (record,) = [record for record in caplog.records if record.name == "crank.calls"]
    line: dict[str, Any] = json.loads(JSONLogFormatter().format(record))
    return line


# -- the static kinds -------------------------------------------------------------------------------------------


def _basic(value: str) -> str:
    return "Basic " + base64.b64encode(value.encode()).decode()


@pytest.mark.parametrize(
    ("auth", "secret", "expected"),
    [
        ({"type": "bearer"}, "b-secret", {"authorization": "Bearer b-secret"}),
        ({"type": "header", "name": "X-Key"}, "h-secret", {"x-key": "h-secret"}),
        ({"type": "cookie", "name": "session"}, "c-secret.=", {"cookie": "session=c-secret.="}),
        ({"type": "basic"}, "alice:pa ss:wörd", {"authorization": _basic("alice:pa ss:wörd")}),
        ({"type": "query", "name": "api_key"}, "q s&=é/+#%", {}),
    ],
    ids=["bearer", "header", "cookie", "basic", "query"],
)
async def test_each_kind_reaches_the_upstream_as_it_should(
    site: Site, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    auth: dict[str, Any], secret: str, expected: dict[str, str],
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("SHOP_SECRET", secret)
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    called = operation(client, site.base + "/api/items", {**auth, "secret": "env:SHOP_SECRET"},
                       input_schema=schema, execution_config={"forward_headers": ["X-Trace"]})  # fmt: skip
    # The caller's own credentials for Crank come with the MCP request; only X-Trace may go on.
    caller = {"authorization": "Bearer callers-crank-key", "cookie": "crank=callers-cookie", "x-trace": "t-1"}
    assert (await called.call({"q": "shoes"}, caller)).value == {"ok": True}
    (seen,) = site.api.seen
    for name, value in expected.items():
        assert seen["headers"][name] == value
    if auth["type"] == "query":  # percent-encoded by the client, decoded by the upstream as it was
        assert seen["query"] == [("q", "shoes"), ("api_key", secret)]
        assert " " not in seen["raw_query"] and "#" not in seen["raw_query"]
    else:
        assert seen["query"] == [("q", "shoes")]
    assert seen["headers"]["x-trace"] == "t-1"
    assert "callers-crank-key" not in json.dumps(seen) and "callers-cookie" not in json.dumps(seen)
    assert_never_logged(caplog, secret)


@pytest.mark.parametrize(
    ("auth", "rule", "where"),
    [
        ({"type": "bearer"}, {"from": "forged", "to": "header.authorization"}, "headers"),
        ({"type": "cookie", "name": "session"}, {"from": "forged", "to": "header.COOKIE"}, "headers"),
        ({"type": "query", "name": "api_key"}, {"from": "forged", "to": "query.api_key"}, "query"),
    ],
    ids=["bearer", "cookie", "query"],
)
async def test_an_argument_cannot_stand_in_for_the_credential(
    site: Site, client: UpstreamClient, auth: dict[str, Any], rule: dict[str, str], where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A mapping that puts an argument where the credential goes: the credential's value replaces it.
    if auth["type"] == "cookie":
        monkeypatch.setenv("SHOP_SECRET", "cookie-secret")  # a cookie value has no spaces
    schema = {"type": "object", "properties": {"forged": {"type": "string"}}}
    called = operation(client, site.base + "/api/items", {**auth, "secret": "env:SHOP_SECRET"},
                       input_schema=schema, input_mapping=[rule])  # fmt: skip
    await called.call({"forged": "model-chosen"})
    (seen,) = site.api.seen
    assert "model-chosen" not in json.dumps(seen, ensure_ascii=False)
    if where == "query":
        assert seen["query"] == [("api_key", SECRET)]


@pytest.mark.parametrize(
    ("auth", "value", "problem"),
    [
        ({"type": "basic"}, "no-colon", "is not 'user:password'"),
        ({"type": "cookie", "name": "session"}, "a;admin=1", "cannot be a cookie value"),
        ({"type": "header", "name": "X-Key"}, "line\r\nX-Admin: 1", "contains a line break"),
        ({"type": "bearer"}, None, "is not set"),
        ({"type": "oauth2", "client_id": "c", "token_url": "http://127.0.0.1:9/token"}, None, "is not set"),
    ],
    ids=["basic", "cookie", "header", "unset", "oauth2-unset"],
)
async def test_a_secret_that_cannot_be_sent_is_a_configuration_error_said_once_in_the_log(
    site: Site, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    auth: dict[str, Any], value: str | None, problem: str,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    if value is None:
        monkeypatch.delenv("SHOP_SECRET")
    else:
        monkeypatch.setenv("SHOP_SECRET", value)
    called = operation(client, site.base + "/api/items", {**auth, "secret": "env:SHOP_SECRET"})
    with pytest.raises(ToolConfigurationError) as failed:
        await called.call({})
    assert failed.value.message == MISSING_SECRET and failed.value.error_code == "configuration_error"
    assert site.api.seen == [] and site.token.requests == []  # nothing was sent
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert problem in warning.getMessage() and "SHOP_SECRET" in warning.getMessage()
    assert warning.exc_info is None  # the operator's to fix: no traceback
    if value is not None:
        assert_never_logged(caplog, value)
        assert value not in json.dumps(failed.value.to_payload("req-1"))


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"type": "header", "name": "X Key"}, "cannot name a header"),
        ({"type": "header", "name": "Content-Length"}, "cannot name a header"),
        ({"type": "cookie", "name": "a;b"}, "cannot name a cookie"),
    ],
)
def test_a_name_that_cannot_carry_a_credential_fails_the_build(auth: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        operation(UNUSED, "http://127.0.0.1:9/api", {**auth, "secret": "env:SHOP_SECRET"})


async def test_the_log_of_a_401_names_the_scheme_of_the_api_description_else_the_type(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="crank.calls")
    monkeypatch.setenv("SHOP_SECRET", "expired-key")
    site.api.refused.add("expired-key")
    for auth, scheme in (({"type": "bearer", "scheme": "ApiKeyAuth"}, "ApiKeyAuth"), ({"type": "bearer"}, "bearer")):
        with pytest.raises(ExternalServiceError) as failed:
            await operation(client, site.base + "/api/x", {**auth, "secret": "env:SHOP_SECRET"}).call({})
        assert failed.value.error_code == "upstream_unauthorized"
        assert call_line(caplog, failed.value)["scheme"] == scheme


# -- oauth2 against a token endpoint of our own ---------------------------------------------------------------------


async def test_the_token_request_is_the_client_credentials_grant_and_its_token_is_shared(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = TokenCache()
    auth = oauth2(site, scopes=["write", "read", "read"])
    listing = operation(client, site.base + "/api/items", auth, tokens=tokens)
    creating = operation(client, site.base + "/api/items", {**auth, "scopes": ["read", "write"]}, method="POST",
                         tokens=tokens)  # fmt: skip
    for called in (listing, creating, listing):
        await called.call({}, {"authorization": "Bearer callers-crank-key"})
    assert len(site.token.requests) == 1  # one token for both operations (same client, secret, scopes, workspace)
    (request,) = site.token.requests
    assert request["form"] == {"grant_type": "client_credentials", "scope": "read write"}
    assert request["content_type"] == "application/x-www-form-urlencoded"
    scheme, _, credentials = request["authorization"].partition(" ")
    user, _, password = base64.b64decode(credentials).decode().partition(":")  # form-urlencoded first (2.3.1)
    assert scheme == "Basic" and user == quote_plus(CLIENT_ID) and password == quote_plus(SECRET)
    assert (unquote_plus(user), unquote_plus(password)) == (CLIENT_ID, SECRET)
    assert site.api.tokens() == ["token-1"] * 3  # the caller's key never goes upstream
    # Other scopes, or none: another token; no `scope` without scopes.
    await operation(client, site.base + "/api/items", oauth2(site), tokens=tokens).call({})
    assert site.token.requests[-1]["form"] == {"grant_type": "client_credentials"}
    assert site.api.tokens()[-1] == "token-2"
    assert_never_logged(caplog, SECRET, quote_plus(SECRET), credentials)


@pytest.mark.parametrize(("expires_in", "kept"), [(100, 100 - TOKEN_EXPIRY_MARGIN), ("100", 70.0), (None, 300.0)])
async def test_a_token_is_kept_until_shortly_before_it_expires(
    site: Site, client: UpstreamClient, expires_in: Any, kept: float
) -> None:
    now = [1000.0]
    tokens = TokenCache(clock=lambda: now[0])
    site.token.expires_in = expires_in
    called = operation(client, site.base + "/api/items", oauth2(site), tokens=tokens)
    await called.call({})
    now[0] += kept - 0.5
    await called.call({})
    assert len(site.token.requests) == 1
    now[0] += 0.5  # `kept` seconds after the token request: fetched again
    await called.call({})
    assert len(site.token.requests) == 2 and site.api.tokens() == ["token-1", "token-1", "token-2"]


async def test_a_short_lived_token_is_kept_half_its_life_and_a_long_one_at_most_an_hour(
    site: Site, client: UpstreamClient
) -> None:
    now = [0.0]
    tokens = TokenCache(clock=lambda: now[0])
    site.token.expires_in = 20  # less than the margin: kept half its life, not fetched again for every call
    called = operation(client, site.base + "/api/items", oauth2(site), tokens=tokens)
    await called.call({})
    now[0] += 9
    await called.call({})
    now[0] += 2
    await called.call({})
    assert site.api.tokens() == ["token-1", "token-1", "token-2"]
    site.token.expires_in = 10**12  # a huge lifetime: used an hour at most (less the margin)
    now[0] += 3600
    await called.call({})
    now[0] += 3560
    await called.call({})
    now[0] += 20
    await called.call({})
    assert site.api.tokens()[-3:] == ["token-3", "token-3", "token-4"]
    site.token.expires_in = "9" * 400  # a number too long to be one (it once overflowed): the default, 300 s
    now[0] += 3600
    await called.call({})
    now[0] += 290
    await called.call({})
    now[0] += 20
    await called.call({})
    assert site.api.tokens()[-3:] == ["token-5", "token-5", "token-6"]


async def test_concurrent_calls_without_a_token_make_one_token_request(site: Site, client: UpstreamClient) -> None:
    now = [0.0]
    tokens = TokenCache(clock=lambda: now[0])
    called = [operation(client, site.base + f"/api/items/{n}", oauth2(site), tokens=tokens) for n in range(4)]
    site.token.gate = threading.Event()  # the token endpoint answers once every call waits for the token

    async def twenty() -> list[Any]:
        before = len(site.token.requests)
        calls = [asyncio.create_task(called[n % 4].call({})) for n in range(20)]
        for _ in range(50):  # bounded: every call runs up to its wait for the token
            await asyncio.sleep(0)
        assert len(site.token.requests) <= before + 1 and not any(call.done() for call in calls)
        site.token.gate.set()  # type: ignore[union-attr]
        return [outcome.value for outcome in await asyncio.gather(*calls)]

    assert await twenty() == [{"ok": True}] * 20
    assert len(site.token.requests) == 1 and site.api.tokens() == ["token-1"] * 20
    # The token expired: twenty calls at once renew it with one request again.
    now[0] += 3600
    site.token.gate = threading.Event()
    assert await twenty() == [{"ok": True}] * 20
    assert len(site.token.requests) == 2 and site.api.tokens()[20:] == ["token-2"] * 20


async def test_a_401_renews_the_token_once_and_sends_an_idempotent_call_again_once(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = TokenCache()
    reading = operation(client, site.base + "/api/items", oauth2(site), tokens=tokens)
    await reading.call({})
    site.api.refused.add("token-1")  # revoked, or the keys rotated: the upstream no longer takes it
    assert (await reading.call({})).value == {"ok": True}
    assert site.api.tokens() == ["token-1", "token-1", "token-2"] and len(site.token.requests) == 2
    # Twenty calls at once meet the 401: one renewal for them all, each sent again once.
    site.api.refused.add("token-2")
    site.token.gate = threading.Event()
    calls = [asyncio.create_task(reading.call({})) for _ in range(20)]
    for _ in range(500):  # bounded: until every call met its 401 and the renewal is asked for (else sooner)
        if len(site.api.seen) == 3 + 20 and len(site.token.requests) == 3:
            break
        await asyncio.sleep(0.01)
    site.token.gate.set()
    assert [outcome.value for outcome in await asyncio.gather(*calls)] == [{"ok": True}] * 20
    assert len(site.token.requests) == 3
    assert sorted(site.api.tokens()[3:]) == ["token-2"] * 20 + ["token-3"] * 20
    # A POST the operation says is idempotent is sent again too; the renewal is not one of its `retries`.
    site.api.refused.add("token-3")
    posting = operation(client, site.base + "/api/items", oauth2(site), method="POST", tokens=tokens,
                        execution_config={"idempotent": True})  # fmt: skip
    assert (await posting.call({})).value == {"ok": True}
    assert site.api.tokens()[-2:] == ["token-3", "token-4"]
    # A token that is refused again after its renewal: the call fails, sent twice in all.
    site.api.refused.update({"token-4", "token-5"})
    with pytest.raises(ExternalServiceError) as failed:
        await reading.call({})
    assert failed.value.error_code == "upstream_unauthorized" and site.api.tokens()[-2:] == ["token-4", "token-5"]
    assert_never_logged(caplog, SECRET)


async def test_a_post_is_not_sent_again_after_a_401_and_its_token_is_dropped(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = TokenCache()
    creating = operation(client, site.base + "/api/items", oauth2(site, scheme="upstream_oauth"), method="POST",
                         tokens=tokens, execution_config={"retries": 3})  # fmt: skip
    await creating.call({})
    site.api.refused.add("token-1")
    with pytest.raises(ExternalServiceError) as failed:
        await creating.call({})
    payload = failed.value.to_payload("req-1")
    assert payload["error_code"] == "upstream_unauthorized" and payload["recoverable"] is False
    assert "Do not retry with other arguments" in payload["suggested_action"]
    assert failed.value.may_have_taken_effect is False
    assert site.api.tokens() == ["token-1", "token-1"] and len(site.token.requests) == 1  # not sent again
    line = call_line(caplog, failed.value)
    assert line["scheme"] == "upstream_oauth" and line["origin"] == site.base
    # The next call fetches a fresh token rather than meet the same 401.
    assert (await creating.call({})).value == {"ok": True}
    assert site.api.tokens()[-1] == "token-2" and len(site.token.requests) == 2
    assert_never_logged(caplog, SECRET)
    assert SECRET not in json.dumps(payload)


async def test_a_jsonrpc_operation_sends_the_token_and_is_not_sent_again_after_a_401(
    site: Site, client: UpstreamClient
) -> None:
    called = operation(client, site.base + "/api/rpc", oauth2(site), protocol="jsonrpc")
    assert (await called.call({})).value == {"ok": True}
    site.api.refused.add("token-1")
    with pytest.raises(ExternalServiceError, match="HTTP 401"):
        await called.call({})
    assert site.api.tokens() == ["token-1", "token-1"]


URL = "http://127.0.0.1:9/token"


async def test_a_late_401_uses_the_token_another_call_renewed_and_a_caller_that_gives_up_ends_no_fetch() -> None:
    fetched: list[str] = []
    gate = asyncio.Event()

    async def fetch() -> tuple[str, float]:
        await gate.wait()
        fetched.append(f"t{len(fetched) + 1}")
        return fetched[-1], 60.0

    cache = TokenCache()
    key = TokenKey(URL, "c", "env:SHOP_SECRET", (), "shop")
    gate.set()
    assert await cache.get("shop", key, URL, fetch) == "t1"
    assert await cache.renew("shop", key, URL, "t1", fetch) == "t2"
    assert await cache.renew("shop", key, URL, "t1", fetch) == "t2"  # a 401 of t1 that came back after the renewal
    cache.drop("shop", key, "t1")  # a POST's 401 of t1: t2 stays
    assert await cache.get("shop", key, URL, fetch) == "t2" and fetched == ["t1", "t2"]
    cache.drop("shop", key, "t2")
    gate.clear()
    first, second = (
        asyncio.create_task(cache.get("shop", key, URL, fetch)),
        asyncio.create_task(cache.get("shop", key, URL, fetch)),
    )
    await asyncio.sleep(0)
    first.cancel()  # its caller gave up: the other still gets the token of the one request
    gate.set()
    assert await second == "t3" and fetched == ["t1", "t2", "t3"]
    with pytest.raises(asyncio.CancelledError):
        await first


def _answer(status: int, body: Any, content_type: str = "application/json") -> Callable[[], Response]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return lambda: Response(content, status_code=status, media_type=content_type)


@pytest.mark.parametrize(
    ("answer", "cause", "detail"),
    [
        (_answer(401, {"error": "invalid_client", "error_description": "client authentication failed"}), "http_401",
         "invalid_client"),
        (_answer(500, b"<html>oops</html>", "text/html"), "http_500", None),
        (_answer(200, {"token_type": "Bearer", "expires_in": 60}), "no_access_token", None),
        (_answer(200, b"access_token=abc", "application/x-www-form-urlencoded"), "not_json", None),
        (_answer(200, {"access_token": "abc", "token_type": "DPoP"}), "token_type", "DPoP"),
        (_answer(200, {"access_token": "a b\r\nX-Admin: 1", "token_type": "Bearer"}), "bad_access_token", None),
        (_answer(200, {"access_token": "abc", "padding": "x" * 70_000}), "too_large", None),
        (None, "refused", None),
    ],
    ids=["invalid_client", "http_500", "no_access_token", "not_json", "dpop", "bad_token", "too_large", "refused"],
)  # fmt: skip
async def test_a_token_endpoint_that_gives_no_usable_token_fails_the_call_as_token_unavailable(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture,
    answer: Callable[[], Response] | None, cause: str, detail: str | None,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    site.token.answer = answer
    token_url = site.token_url if answer is not None else f"http://127.0.0.1:{free_port()}/token"
    now = [0.0]
    tokens = TokenCache(clock=lambda: now[0])
    called = operation(client, site.base + "/api/items", {**oauth2(site), "token_url": token_url}, tokens=tokens)
    with pytest.raises(ExternalServiceError) as failed:
        await called.call({})
    payload = failed.value.to_payload("req-1")
    assert payload["error_code"] == "upstream_token_unavailable" and payload["error_class"] == "external_service"
    assert payload["recoverable"] is False and failed.value.may_have_taken_effect is False
    assert "Do not retry with other arguments" in payload["suggested_action"]
    assert "credentials need attention" in payload["suggested_action"]
    assert site.api.seen == []  # the API was never called
    origin = token_url.rsplit("/", 1)[0]
    assert origin not in json.dumps(payload)  # the operator's, not the client's
    (warning,) = [record for record in caplog.records if "no OAuth access token" in record.getMessage()]
    assert warning.levelno == logging.WARNING and f"from {origin} ({cause}" in warning.getMessage()
    line = call_line(caplog, failed.value)
    assert line["cause"] == cause and line["origin"] == origin and line.get("detail") == detail
    assert_never_logged(caplog, SECRET, quote_plus(SECRET))
    assert SECRET not in json.dumps(payload)
    # A failure is remembered for FAILURE_MEMORY seconds: the calls meanwhile fail at once, without a request.
    site.token.answer = None
    asked = len(site.token.requests)
    with pytest.raises(ExternalServiceError) as again:
        await called.call({})
    assert again.value.to_payload("req-2")["error_code"] == "upstream_token_unavailable"
    assert len(site.token.requests) == asked and site.api.seen == []
    now[0] += FAILURE_MEMORY  # then the next call asks again
    if answer is not None:
        assert (await called.call({})).value == {"ok": True}
        assert len(site.token.requests) == asked + 1


async def test_a_token_url_the_egress_policy_refuses_is_a_configuration_error(
    serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CRANK_EGRESS_ALLOW", "127.0.0.0/8")  # not ::1
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "shop:SHOP_SECRET")
    monkeypatch.setenv("SHOP_SECRET", SECRET)
    token, api = TokenEndpoint(), Upstream()
    base = serve(Starlette(routes=[Route("/api/{rest:path}", api.handle)]))
    client = UpstreamClient()
    auth = {
        "type": "oauth2",
        "client_id": "c",
        "secret": "env:SHOP_SECRET",
        "token_url": f"http://[::1]:{free_port()}/t",
    }
    with pytest.raises(ToolConfigurationError, match="egress policy") as failed:
        await operation(client, base + "/api/items", auth).call({})
    assert failed.value.error_code == "configuration_error" and api.seen == [] and token.requests == []
    assert_never_logged(caplog, SECRET)
    await client.aclose()


# -- oauth2 against a real authorization server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider() -> Iterator[dict[str, Any]]:
    """src/crank/demo/oauth_server.mjs, whose pre-registered client `crank-upstream` may use the client credentials
    grant."""
    with authorization_server() as issuer:
        yield httpx.get(issuer + "/.well-known/openid-configuration", timeout=10).raise_for_status().json()


class CountingProxy:
    """In front of the provider's token endpoint: counts the token requests that reach it."""

    def __init__(self, token_endpoint: str) -> None:
        self.token_endpoint = token_endpoint
        self.requests = 0

    async def handle(self, request: Request) -> Response:
        self.requests += 1
        headers = {name: request.headers[name] for name in ("authorization", "content-type") if name in request.headers}
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(self.token_endpoint, content=await request.body(), headers=headers)
        return Response(answer.content, status_code=answer.status_code, media_type="application/json")


class IntrospectingAPI:
    """An API that takes a bearer token only if the provider's introspection says it is active and for our client."""

    def __init__(self, provider: dict[str, Any]) -> None:
        self.introspection = provider["introspection_endpoint"]
        self.seen: list[tuple[str, str, dict[str, Any]]] = []  # (method, token, introspection)

    async def handle(self, request: Request) -> Response:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(self.introspection, data={"token": token},
                                     auth=("crank-upstream", "upstream-secret"))  # fmt: skip
        introspected = answer.json() if answer.status_code == 200 else {}
        self.seen.append((request.method, token, introspected))
        if not introspected.get("active") or introspected.get("client_id") != "crank-upstream":
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        return JSONResponse({"scope": introspected.get("scope")})


async def test_client_credentials_from_a_real_authorization_server(
    provider: dict[str, Any], serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, client: UpstreamClient,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "shop:SHOP_OAUTH_SECRET")
    monkeypatch.setenv("SHOP_OAUTH_SECRET", "upstream-secret")
    proxy, api = CountingProxy(provider["token_endpoint"]), IntrospectingAPI(provider)
    base = serve(Starlette(routes=[Route("/token", proxy.handle, methods=["POST"]),
                                   Route("/api/{rest:path}", api.handle, methods=["GET", "POST"])]))  # fmt: skip
    auth = {"type": "oauth2", "client_id": "crank-upstream", "secret": "env:SHOP_OAUTH_SECRET",
            "token_url": base + "/token", "scopes": ["tools:read"], "scheme": "provider_oauth"}  # fmt: skip
    tokens = TokenCache()
    reading = operation(client, base + "/api/items", auth, tokens=tokens)
    creating = operation(client, base + "/api/items", auth, method="POST", tokens=tokens)
    for called in (reading, creating, reading):
        assert (await called.call({}, {"authorization": "Bearer callers-crank-key"})).value == {"scope": "tools:read"}
    assert proxy.requests == 1 and len({token for _, token, _ in api.seen}) == 1  # fetched once, then kept
    first = api.seen[0][1]
    assert first != "callers-crank-key"

    async def revoke(token: str) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            revoked = await http.post(provider["revocation_endpoint"], data={"token": token},
                                      auth=("crank-upstream", "upstream-secret"))  # fmt: skip
        assert revoked.status_code == 200

    # Revoked at the provider: the GET meets a 401, renews the token once and is sent again once.
    await revoke(first)
    assert (await reading.call({})).value == {"scope": "tools:read"}
    assert proxy.requests == 2 and api.seen[-2][1] == first and api.seen[-1][1] != first
    # Revoked again: the POST is not sent again; the next call fetches a fresh token.
    second = api.seen[-1][1]
    await revoke(second)
    with pytest.raises(ExternalServiceError) as failed:
        await creating.call({})
    assert failed.value.error_code == "upstream_unauthorized" and proxy.requests == 2
    assert [method for method, _, _ in api.seen[-1:]] == ["POST"] and api.seen[-1][1] == second
    assert call_line(caplog, failed.value)["scheme"] == "provider_oauth"
    assert (await creating.call({})).value == {"scope": "tools:read"} and proxy.requests == 3
    # Twenty calls at once, no token kept (another process's cache): one token request.
    fresh = TokenCache()
    concurrent = [operation(client, base + "/api/items", auth, tokens=fresh) for _ in range(20)]
    outcomes = await asyncio.gather(*(called.call({}) for called in concurrent))
    assert [outcome.value for outcome in outcomes] == [{"scope": "tools:read"}] * 20
    assert proxy.requests == 4 and len({token for _, token, _ in api.seen[-20:]}) == 1
    assert_never_logged(caplog, "upstream-secret")


# -- token exchange (acting as the user), against a token endpoint of our own --------------------------------------

ISSUER = "https://id.shop.example"


def user(name: str, *, issuer: str = ISSUER, expires_in: float = 3600.0, workspace: str = "shop") -> Principal:
    """A signed-in user as the gateway's authenticator proves one: their access token is `access-<name>`."""
    return Principal(workspace, id=f"{workspace}|{issuer}|sub:{name}", method="oauth", subject=name, client_id="mcp",
                     issuer=issuer, scopes=frozenset({"tools:read"}), expires_at=time.time() + expires_in,
                     token=f"access-{name}")  # fmt: skip


def exchange(site: Site, **auth: Any) -> dict[str, Any]:
    return {"type": "token_exchange", "client_id": CLIENT_ID, "secret": "env:SHOP_SECRET", "token_url": site.token_url,
            "audience": "https://api.shop.example", "subject_issuer": ISSUER, "scopes": ["people:read"],
            **auth}  # fmt: skip


def exchanged(token_type: str = "Bearer", issued: str | None = EXCHANGED) -> Callable[[Request], Response]:
    """A token endpoint's answer to an exchange: a token naming the user whose token came (`for-<subject token>`)."""

    def answer(form: dict[str, str]) -> Response:
        body = {"access_token": f"for-{form.get('subject_token')}", "token_type": token_type, "expires_in": 600}
        return JSONResponse(body | ({"issued_token_type": issued} if issued else {}))

    return answer  # type: ignore[return-value]


async def test_an_exchange_sends_each_users_token_to_its_issuer_only_and_keeps_one_token_per_user(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    site.token.answer_form = exchanged()
    called = operation(client, site.base + "/api/me", exchange(site), tokens=TokenCache())
    for caller in (user("alice"), user("alice"), user("bob")):
        assert (await called.call({}, None, caller)).value == {"ok": True}
    assert site.api.tokens() == ["for-access-alice", "for-access-alice", "for-access-bob"]
    forms = [request["form"] for request in site.token.requests]
    assert [form["subject_token"] for form in forms] == ["access-alice", "access-bob"]  # one exchange per user
    assert forms[0] == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "subject_token": "access-alice",
        "subject_token_type": EXCHANGED, "requested_token_type": EXCHANGED, "audience": "https://api.shop.example",
        "scope": "people:read",
    }  # fmt: skip
    assert site.token.requests[0]["authorization"] == _basic(f"{quote_plus(CLIENT_ID)}:{quote_plus(SECRET)}")
    # No user, a user of another issuer, a sign-in about to end: refused before anything is sent.
    refusals = {"api key": Principal("shop", id="key-1"), "none": None,
                "other issuer": user("carol", issuer="https://other-id.example"),
                "expiring": user("dave", expires_in=TOKEN_EXPIRY_MARGIN / 2)}  # fmt: skip
    codes = {}
    for name, caller in refusals.items():
        with pytest.raises(UserCredentialsError) as refused:
            await called.call({}, None, caller)
        codes[name] = refused.value.error_code
    assert codes == {"api key": "user_credentials_required", "none": "user_credentials_required",
                     "other issuer": "user_credentials_required", "expiring": "user_sign_in_expired"}  # fmt: skip
    assert len(site.token.requests) == 2 and len(site.api.seen) == 3
    assert_never_logged(caplog, SECRET, "access-alice", "access-bob", "for-access-alice", "access-carol")


@pytest.mark.parametrize(
    ("answer", "cause"),
    [(exchanged(token_type="N_A"), "token_type"), (exchanged(issued="urn:ietf:params:oauth:token-type:id_token"),
      "issued_token_type"), (exchanged(issued=None), "issued_token_type")],
    ids=["N_A", "id_token", "no_issued_token_type"],
)  # fmt: skip
async def test_an_exchange_answer_that_is_no_bearer_access_token_is_never_sent(
    site: Site, client: UpstreamClient, caplog: pytest.LogCaptureFixture, answer: Callable[..., Response], cause: str
) -> None:
    caplog.set_level(logging.DEBUG)
    site.token.answer_form = answer
    called = operation(client, site.base + "/api/me", exchange(site), tokens=TokenCache())
    with pytest.raises(ExternalServiceError) as failed:
        await called.call({}, None, user("alice"))
    assert failed.value.error_code == "upstream_token_unavailable" and site.api.seen == []
    assert call_line(caplog, failed.value)["cause"] == cause


async def test_a_refusal_is_remembered_for_its_user_and_a_failing_endpoint_for_its_workspace(
    site: Site, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "shop:SHOP_SECRET,other:OTHER_SECRET")
    monkeypatch.setenv("OTHER_SECRET", SECRET)
    now = [0.0]
    tokens = TokenCache(clock=lambda: now[0])
    called = operation(client, site.base + "/api/me", exchange(site), tokens=tokens)
    refusing = {"alice": "access_denied", "erin": "invalid_grant"}

    def answer(form: dict[str, str]) -> Response:
        error = refusing.get(form["subject_token"].removeprefix("access-"))
        return JSONResponse({"error": error}, 400) if error else exchanged()(form)  # type: ignore[arg-type]

    site.token.answer_form = answer
    codes = []
    for name in ("alice", "alice", "erin"):
        with pytest.raises(UserCredentialsError) as refused:
            await called.call({}, None, user(name))
        codes.append(refused.value.error_code)
    assert codes == ["upstream_token_refused", "upstream_token_refused", "user_sign_in_expired"]
    assert len(site.token.requests) == 2  # alice's refusal remembered: asked once
    assert (await called.call({}, None, user("bob"))).value == {"ok": True}  # another user is not refused with her
    now[0] += FAILURE_MEMORY
    with pytest.raises(UserCredentialsError):
        await called.call({}, None, user("alice"))
    assert len(site.token.requests) == 4  # asked again once the memory ended
    # The endpoint fails (500): remembered for every user of the workspace, not for another workspace's calls.
    site.token.answer_form = lambda form: Response(b"down", status_code=500)
    for name in ("carol", "dave"):
        with pytest.raises(ExternalServiceError) as failed:
            await called.call({}, None, user(name))
        assert failed.value.error_code == "upstream_token_unavailable"
    assert len(site.token.requests) == 5
    elsewhere = operation(client, site.base + "/api/me", exchange(site, secret="env:OTHER_SECRET"), tokens=tokens,
                          workspace="other")  # fmt: skip
    with pytest.raises(ExternalServiceError):
        await elsewhere.call({}, None, user("carol", workspace="other"))
    assert len(site.token.requests) == 6


async def test_a_401_of_an_exchanged_token_exchanges_again_once_for_a_get_and_drops_it_for_a_post(
    site: Site, client: UpstreamClient
) -> None:
    tokens = TokenCache()
    count = [0]

    def answer(form: dict[str, str]) -> Response:
        count[0] += 1
        return JSONResponse({"access_token": f"for-{form['subject_token']}-{count[0]}", "token_type": "Bearer",
                             "issued_token_type": EXCHANGED})  # fmt: skip

    site.token.answer_form = answer
    reading = operation(client, site.base + "/api/me", exchange(site), tokens=tokens)
    posting = operation(client, site.base + "/api/me", exchange(site), method="POST", tokens=tokens)
    alice = user("alice")
    await reading.call({}, None, alice)
    site.api.refused.add("for-access-alice-1")
    assert (await reading.call({}, None, alice)).value == {"ok": True}
    assert site.api.tokens() == ["for-access-alice-1", "for-access-alice-1", "for-access-alice-2"]
    site.api.refused.add("for-access-alice-2")
    with pytest.raises(ExternalServiceError) as failed:
        await posting.call({}, None, alice)
    assert failed.value.error_code == "upstream_unauthorized" and site.api.tokens()[-1] == "for-access-alice-2"
    assert (await posting.call({}, None, alice)).value == {"ok": True}  # dropped: the next call exchanges again
    assert site.api.tokens()[-1] == "for-access-alice-3" and count[0] == 3


# -- through the gateway ------------------------------------------------------------------------------------------


async def test_the_gateway_shares_one_token_between_agents_and_never_sends_the_callers_key(
    site: Site, serve: Callable[..., str], tmp_path: Path
) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'registry.sqlite3'}", pooled=False)
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace("shop", "Shop")
    config = {"auth": oauth2(site, scopes=["read"])}
    spec = {"protocol": "http", "target": {"method": "GET", "url": site.base + "/api/items"},
            "input_schema": {"type": "object"}, "execution_config": config}  # fmt: skip
    registry.put_operation("shop", "list_items", spec)
    for agent in ("desk", "till"):
        registry.put_agent("shop", agent, {"bindings": [{"operation": "list_items"}]})
        registry.publish("shop", agent)
    key = registry.create_api_key("shop")
    root = serve(GatewayService(registry, poll_interval=0.05))
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:
        for agent in ("desk", "till", "desk"):
            answer = await http.post(f"{root}/mcp/v1/shop/{agent}/call", json={"name": "list_items", "arguments": {}})
            assert answer.status_code == 200 and "token_unavailable" not in answer.text, answer.text
    assert len(site.token.requests) == 1  # one token for every agent the gateway serves
    assert site.api.tokens() == ["token-1"] * 3 and key not in json.dumps(site.api.seen)
    engine.dispose()
