"""JSON-RPC 2.0 at /rpc: single calls, batches, notifications, errors, versions, OpenRPC."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from crank.rpc import RPCApp
from tests.rpc.apps import make_app

pytestmark = pytest.mark.anyio


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    app, _ = make_app()
    return serve(app)


async def rpc(url: str, body: Any, path: str = "/rpc", **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient() as client:
        return await client.post(url + path, content=content, headers={"Content-Type": "application/json", **headers})


def call(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        message["params"] = params
    return message


async def test_call_by_name_and_by_position_keeps_the_client_id(url: str) -> None:
    assert (await rpc(url, call("echo", {"text": "ab", "times": 2}, "x-7"))).json() == {
        "jsonrpc": "2.0", "id": "x-7", "result": "abab"}  # fmt: skip
    assert (await rpc(url, call("echo", ["c", 3]))).json()["result"] == "ccc"


async def test_batch_with_a_notification(url: str) -> None:
    body = [call("echo", {"text": "a"}, 1), {"jsonrpc": "2.0", "method": "echo", "params": {"text": "n"}},
            call("nope", {}, 2)]  # fmt: skip
    answers = (await rpc(url, body)).json()
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[0]["result"] == "a" and answers[1]["error"]["code"] == -32601


async def test_notifications_only_get_204(url: str) -> None:
    response = await rpc(url, {"jsonrpc": "2.0", "method": "echo", "params": {"text": "n"}})
    assert response.status_code == 204 and response.content == b""


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        ({"jsonrpc": "1.0", "method": "echo", "id": 1}, -32600),
        ([], -32600),
        (call("missing"), -32601),
        (call("echo", {"times": "x"}), -32602),
        (call("echo", {"text": "a", "extra": 1}), -32602),
        (call("echo", "not params"), -32602),
    ],
)
async def test_standard_errors(url: str, body: Any, code: int) -> None:
    assert (await rpc(url, body)).json()["error"]["code"] == code


async def test_invalid_params_list_every_violation(url: str) -> None:
    error = (await rpc(url, call("echo", {"times": "x", "extra": 1}))).json()["error"]
    assert error["data"]["exception"] == "InvalidParamsError"
    assert {v["path"] for v in error["data"]["violations"]} == {"$.text", "$.times", "$.extra"}


async def test_method_error_carries_its_class_and_no_trace(url: str) -> None:
    error = (await rpc(url, call("product.get", {"id": 0}))).json()["error"]
    assert error == {"code": -32002, "message": "No product 0", "data": {"exception": "NotFoundError"}}


async def test_unexpected_exception_is_internal_error_without_details(url: str) -> None:
    response = await rpc(url, call("boom"))
    assert response.json()["error"] == {
        "code": -32603,
        "message": "Internal error",
        "data": {"exception": "RuntimeError"},
    }
    assert "hunter2" not in response.text


async def test_debug_mode_adds_file_line_and_trace(serve: Callable[..., str]) -> None:
    app, _ = make_app()
    app.rpc.debug = app.rpc.executor.debug = True
    url = serve(app)
    data = (await rpc(url, call("boom"))).json()["error"]["data"]
    assert data["exception"] == "RuntimeError" and data["line"] > 0 and "Traceback" in data["trace"]


async def test_rate_limit_is_32003_with_retry_after(url: str) -> None:
    for _ in range(2):
        assert (await rpc(url, call("limited"))).json()["result"] == "ok"
    response = await rpc(url, call("limited"))
    assert response.json()["error"]["code"] == -32003
    assert 1 <= int(response.headers["retry-after"]) <= 60


async def test_versions_come_from_the_route(url: str) -> None:
    assert (await rpc(url, call("new.thing"))).json()["error"]["code"] == -32601
    assert (await rpc(url, call("new.thing"), path="/rpc/v2")).json()["result"] == "v2 only"


async def test_openrpc_on_get_and_rpc_discover(url: str) -> None:
    async with httpx.AsyncClient() as client:
        document = (await client.get(url + "/rpc/v2")).json()
    assert document["openrpc"].startswith("1.") and "new.thing" in [m["name"] for m in document["methods"]]
    assert (await rpc(url, call("rpc.discover"), path="/rpc/v2")).json()["result"] == document
    echo = next(m for m in document["methods"] if m["name"] == "echo")
    assert echo["params"][0] == {"name": "text", "required": True, "schema": {"description": "What to repeat.",
                                 "type": "string"}, "description": "What to repeat."}  # fmt: skip
    assert echo["result"]["schema"] == {"type": "string"}


async def test_other_http_methods_get_the_endpoints_own_405(url: str) -> None:
    """Found by tests/test_fuzz.py: the router answered them first, in plain text and allowing HEAD."""
    async with httpx.AsyncClient() as client:
        for method in ("PUT", "DELETE", "PATCH", "HEAD"):
            response = await client.request(method, url + "/rpc", content=b"{}")
            assert response.status_code == 405, method
            assert response.headers["allow"] == "GET, POST" and response.content == b""


def test_crank_openrpc_prints_the_document() -> None:
    from click.testing import CliRunner

    from crank.cli import main

    result = CliRunner().invoke(main, ["openrpc", "tests.rpc.apps_cli:app", "--api-version", "v2"])
    assert result.exit_code == 0, result.output
    assert "new.thing" in [m["name"] for m in json.loads(result.output)["methods"]]
    assert CliRunner().invoke(main, ["openrpc", "tests.rpc.apps_cli:app", "--api-version", "v9"]).exit_code != 0


def test_methods_cannot_be_added_after_serving() -> None:
    from crank.exceptions import ConfigurationError

    app = RPCApp()
    app.build()
    with pytest.raises(ConfigurationError, match="before the app serves"):
        app.method("late")(lambda: None)


def test_a_body_over_the_limit_is_413(serve: Callable[..., str]) -> None:
    from crank.rpc.endpoint import JSONRPCEndpoint

    app = RPCApp()

    @app.method("echo")
    def echo(text: str) -> str:
        return text

    url = serve(JSONRPCEndpoint(app, app.versions[0], max_body_size=200))
    small = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"text": "hi"}})
    assert small.json()["result"] == "hi"
    big = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"text": "x" * 300}})
    assert big.status_code == 413 and big.json()["error"]["code"] == -32600


def test_batches_and_nesting_have_limits(serve: Callable[..., str]) -> None:
    from crank.wire.jsonrpc import DEFAULT_MAX_BATCH_ITEMS

    app = RPCApp()

    @app.method("echo")
    def echo(text: str) -> str:
        return text

    from crank.server import RPCService

    url = serve(RPCService(app)) + "/rpc"
    calls = [{"jsonrpc": "2.0", "id": n, "method": "echo", "params": {"text": str(n)}} for n in range(3)]
    assert [answer["result"] for answer in httpx.post(url, json=calls).json()] == ["0", "1", "2"]
    too_many = httpx.post(url, json=calls * DEFAULT_MAX_BATCH_ITEMS).json()
    assert too_many["error"]["code"] == -32600 and "at most 100" in too_many["error"]["message"]
    deep: Any = "x"
    for _ in range(100):
        deep = [deep]
    nested = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"text": deep}}).json()
    assert nested["error"]["code"] == -32600 and "nested more than 64 levels" in nested["error"]["message"]
