"""Streamable HTTP behaviour on the wire: statuses, headers, eras, batches, errors."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import crank
from tests.mcp.apps import calls, make_endpoint
from tests.mcp.wire import (
    JSON_HEADERS,
    MODERN,
    legacy_headers,
    legacy_request,
    modern_headers,
    modern_request,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def url(serve: Callable[..., str]) -> str:
    return serve(make_endpoint())


async def post(url: str, body: Any, headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await client.post(url, content=content, headers=headers or JSON_HEADERS, **kwargs)


async def call_modern(url: str, name: str, arguments: dict[str, Any], **headers: str) -> httpx.Response:
    body = modern_request("tools/call", {"name": name, "arguments": arguments})
    return await post(url, body, {**modern_headers("tools/call", name), **headers})


# -- legacy era -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
async def test_initialize_echoes_a_supported_version(url: str, version: str) -> None:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    response = await post(url, legacy_request("initialize", params))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "crank"
    assert "mcp-session-id" not in response.headers


async def test_server_info_reports_cranks_own_version(url: str) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    result = (await post(url, legacy_request("initialize", params))).json()["result"]
    assert result["serverInfo"] == {"name": "crank", "version": crank.__version__}


async def test_initialize_offers_the_newest_version_for_an_unknown_one(url: str) -> None:
    params = {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    response = await post(url, legacy_request("initialize", params))
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"


async def test_initialized_notification_is_accepted_without_a_body(url: str) -> None:
    response = await post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, legacy_headers())
    assert response.status_code == 202
    assert response.content == b""


async def test_ping_answers_an_empty_object(url: str) -> None:
    response = await post(url, legacy_request("ping", request_id="abc"), legacy_headers())
    assert response.json() == {"jsonrpc": "2.0", "id": "abc", "result": {}}


async def test_legacy_results_carry_no_result_type(url: str) -> None:
    response = await post(url, legacy_request("tools/list"), legacy_headers())
    result = response.json()["result"]
    assert "resultType" not in result and "ttlMs" not in result


async def test_legacy_unknown_method_is_method_not_found(url: str) -> None:
    response = await post(url, legacy_request("resources/list"), legacy_headers())
    assert response.json()["error"]["code"] == -32601


async def test_legacy_header_with_unsupported_version_is_400(url: str) -> None:
    response = await post(url, legacy_request("tools/list"), legacy_headers("1999-01-01"))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert "2025-11-25" in error["data"]["supported"]


# -- batches --------------------------------------------------------------------------------------


def _batch_of_calls() -> list[dict[str, Any]]:
    return [
        legacy_request("tools/call", {"name": "echo", "arguments": {"text": "a"}}, 1),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        legacy_request("tools/call", {"name": "echo", "arguments": {"text": "b"}}, 2),
        legacy_request("tools/call", {"name": "rows", "arguments": {"count": 1}}, 3),
    ]


@pytest.mark.parametrize("headers", [legacy_headers("2025-03-26"), JSON_HEADERS], ids=["2025-03-26", "no-header"])
async def test_batch_of_tool_calls_is_answered_in_one_array(url: str, headers: dict[str, str]) -> None:
    response = await post(url, _batch_of_calls(), headers)
    assert response.status_code == 200
    answers = response.json()
    assert [answer["id"] for answer in answers] == [1, 2, 3]
    assert answers[0]["result"]["structuredContent"] == {"text": "a"}
    assert answers[1]["result"]["structuredContent"] == {"text": "b"}
    assert answers[2]["result"]["structuredContent"] == {"result": [{"id": 0, "name": "n0"}]}


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", MODERN])
async def test_batch_is_refused_where_the_version_has_no_batches(url: str, version: str) -> None:
    response = await post(url, _batch_of_calls(), legacy_headers(version))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


async def test_batch_may_not_carry_initialize(url: str) -> None:
    params = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    response = await post(url, [legacy_request("initialize", params, 9)], legacy_headers("2025-03-26"))
    assert response.json()[0]["error"]["code"] == -32600


async def test_a_batch_over_the_item_limit_is_refused_whole(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(max_batch_items=3))
    assert len((await post(url, _batch_of_calls()[:3], legacy_headers("2025-03-26"))).json()) == 2  # one notification
    response = await post(url, _batch_of_calls(), legacy_headers("2025-03-26"))
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": -32600,
        "message": "Invalid request: a batch may carry at most 3 messages",
    }


async def test_a_batch_stops_running_items_once_its_answers_pass_the_byte_limit(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(max_batch_answer_bytes=1))  # the first answer passes it
    calls = [legacy_request("tools/call", {"name": "echo", "arguments": {"text": str(n)}}, n) for n in range(40)]
    answers = (await post(url, calls, legacy_headers("2025-03-26"))).json()
    assert [answer["id"] for answer in answers] == list(range(40))  # every item is answered, in order
    ran = [answer for answer in answers if "result" in answer]
    refused = [answer for answer in answers if "error" in answer]
    assert 1 <= len(ran) <= 8  # those already started when the limit was passed (at most a few at once)
    assert refused and all(answer["error"]["code"] == -32600 and "not run" in answer["error"]["message"]
                           for answer in refused)  # fmt: skip


@pytest.mark.parametrize("route", ["", "/call"])
async def test_json_nested_deeper_than_the_limit_is_refused_at_parse_time(url: str, route: str) -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = {"a": deep}
    body = legacy_request("tools/call", {"name": "echo", "arguments": {"text": "t", "extra": deep}})
    response = await post(url + route, body if not route else {"name": "echo", "arguments": {"extra": deep}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600 and "nested more than 64 levels" in error["message"]


async def test_batch_of_notifications_only_is_202(url: str) -> None:
    body = [{"jsonrpc": "2.0", "method": "notifications/initialized"}]
    response = await post(url, body, legacy_headers("2025-03-26"))
    assert response.status_code == 202


# -- modern era -----------------------------------------------------------------------------------


async def test_discover_describes_the_server(url: str) -> None:
    response = await post(url, modern_request("server/discover"), modern_headers("server/discover"))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["supportedVersions"] == [MODERN]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["resultType"] == "complete"
    assert result["cacheScope"] == "public" and result["ttlMs"] == 0
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "crank"


async def test_modern_tools_list_carries_cache_hints_and_result_type(url: str) -> None:
    response = await post(url, modern_request("tools/list"), modern_headers("tools/list"))
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == 0 and result["cacheScope"] == "public"
    assert [tool["name"] for tool in result["tools"]] == ["echo", "rows", "fail", "crash", "image"]


async def test_modern_tools_call_carries_result_type(url: str) -> None:
    response = await call_modern(url, "echo", {"text": "hi"})
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["structuredContent"] == {"text": "hi"}


@pytest.mark.parametrize(
    ("headers", "what"),
    [
        ({"MCP-Protocol-Version": "2025-11-25"}, "MCP-Protocol-Version"),
        ({"Mcp-Method": "tools/list"}, "Mcp-Method"),
        ({"Mcp-Name": "rows"}, "Mcp-Name"),
    ],
)
async def test_routing_header_that_disagrees_with_the_body_is_32020(
    url: str, headers: dict[str, str], what: str
) -> None:
    response = await call_modern(url, "echo", {"text": "x"}, **headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32020 and what in error["message"]


async def test_missing_method_header_is_a_mismatch(url: str) -> None:
    headers = modern_headers("tools/list")
    del headers["Mcp-Method"]
    response = await post(url, modern_request("tools/list"), headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020


async def test_non_ascii_tool_name_header_is_base64_decoded(url: str) -> None:
    # "echo" sent in the sentinel form must still match the body.
    response = await call_modern(url, "echo", {"text": "x"}, **{"Mcp-Name": "=?base64?ZWNobw==?="})
    assert response.status_code == 200


async def test_unknown_modern_version_lists_the_supported_ones(url: str) -> None:
    body = modern_request("tools/list")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2030-01-01"
    response = await post(url, body, modern_headers("tools/list", version="2030-01-01"))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": [MODERN], "requested": "2030-01-01"}


async def test_modern_unknown_method_is_404(url: str) -> None:
    response = await post(url, modern_request("ping"), modern_headers("ping"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == -32601


async def test_modern_request_without_meta_is_invalid_params(url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = await post(url, body, modern_headers("tools/list"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602


async def test_duplicated_routing_header_is_refused(url: str) -> None:
    headers = [(k, v) for k, v in modern_headers("tools/list").items()] + [("Mcp-Method", "tools/list")]
    async with httpx.AsyncClient() as client:
        response = await client.post(url, content=json.dumps(modern_request("tools/list")), headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020


async def test_tool_order_is_deterministic(url: str) -> None:
    orders = set()
    for _ in range(3):
        response = await post(url, modern_request("tools/list"), modern_headers("tools/list"))
        orders.add(tuple(tool["name"] for tool in response.json()["result"]["tools"]))
    assert len(orders) == 1


# -- transport ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_are_405(url: str, method: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.request(method, url, headers={"Accept": "text/event-stream"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


async def test_accept_without_json_is_406(url: str) -> None:
    response = await post(url, legacy_request("ping"), {"Accept": "text/html", "Content-Type": "application/json"})
    assert response.status_code == 406


async def test_content_type_must_be_json(url: str) -> None:
    response = await post(url, legacy_request("ping"), {"Accept": "application/json", "Content-Type": "text/plain"})
    assert response.status_code == 415


async def test_malformed_json_is_parse_error(url: str) -> None:
    response = await post(url, b'{"jsonrpc": "2.0", "id": 1,', legacy_headers())
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]},
        "just a string",
    ],
)
async def test_invalid_envelope_is_invalid_request(url: str, body: Any) -> None:
    response = await post(url, body, legacy_headers())
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


async def test_body_over_the_limit_is_413(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(max_body_size=1000))
    body = legacy_request("tools/call", {"name": "echo", "arguments": {"text": "x" * 2000}})
    response = await post(url, body, legacy_headers())
    assert response.status_code == 413


async def test_chunked_body_over_the_limit_is_413(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(max_body_size=1000))

    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(10):
            yield b" " * 200

    async with httpx.AsyncClient() as client:
        response = await client.post(url, content=chunks(), headers=legacy_headers())
    assert response.status_code == 413


async def test_foreign_origin_is_403(url: str) -> None:
    response = await post(url, legacy_request("ping"), {**legacy_headers(), "Origin": "http://evil.example.com"})
    assert response.status_code == 403


async def test_loopback_origin_is_accepted(url: str) -> None:
    response = await post(url, legacy_request("ping"), {**legacy_headers(), "Origin": "http://localhost:3000"})
    assert response.status_code == 200


async def test_foreign_host_is_refused_on_loopback(url: str) -> None:
    response = await post(url, legacy_request("ping"), {**legacy_headers(), "Host": "evil.example.com"})
    assert response.status_code == 421


async def test_allowed_host_and_origin_are_accepted(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(allowed_hosts=["mcp.example.com"], allowed_origins=["https://app.example.com"]))
    headers = {**legacy_headers(), "Host": "mcp.example.com:443", "Origin": "https://app.example.com"}
    response = await post(url, legacy_request("ping"), headers)
    assert response.status_code == 200


async def test_protection_can_be_turned_off_for_hosts(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(dns_rebinding_protection=False))
    response = await post(url, legacy_request("ping"), {**legacy_headers(), "Host": "mcp.example.com"})
    assert response.status_code == 200
    same_origin = {**legacy_headers(), "Host": "mcp.example.com", "Origin": "https://mcp.example.com"}
    assert (await post(url, legacy_request("ping"), same_origin)).status_code == 200
    foreign = {**legacy_headers(), "Host": "mcp.example.com", "Origin": "https://evil.example.com"}
    assert (await post(url, legacy_request("ping"), foreign)).status_code == 403


async def test_unknown_path_is_404(url: str) -> None:
    response = await post(url + "/elsewhere", legacy_request("ping"))
    assert response.status_code == 404


async def test_client_response_is_accepted_in_legacy_era(url: str) -> None:
    response = await post(url, {"jsonrpc": "2.0", "id": 5, "result": {}}, legacy_headers())
    assert response.status_code == 202


# -- tools/list -----------------------------------------------------------------------------------


async def test_invalid_cursor_is_invalid_params(url: str) -> None:
    response = await post(url, legacy_request("tools/list", {"cursor": "not-a-cursor"}), legacy_headers())
    assert response.json()["error"]["code"] == -32602


async def test_language_is_negotiated(url: str) -> None:
    headers = {**legacy_headers(), "Accept-Language": "uk-UA, en;q=0.5"}
    response = await post(url, legacy_request("tools/list"), headers)
    assert response.headers["content-language"] == "uk"
    assert response.headers["vary"] == "Accept-Language"
    echo = response.json()["result"]["tools"][0]
    assert echo["title"] == "Луна" and echo["description"] == "Повторити текст."


async def test_unknown_language_falls_back_to_default(url: str) -> None:
    response = await post(url, legacy_request("tools/list"), {**legacy_headers(), "Accept-Language": "fr"})
    assert response.headers["content-language"] == "en"
    assert response.json()["result"]["tools"][0]["title"] == "Echo"


# -- tools/call -----------------------------------------------------------------------------------


async def test_invalid_arguments_never_reach_the_invoker(url: str) -> None:
    before = len(calls)
    response = await call_modern(url, "echo", {"text": 5})
    assert response.json()["result"]["isError"] is True
    assert len(calls) == before


async def test_invalid_arguments_can_be_a_protocol_error(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(invalid_arguments="error"))
    body = legacy_request("tools/call", {"name": "echo", "arguments": {"extra": 1}})
    error = (await post(url, body, legacy_headers())).json()["error"]
    assert error["code"] == -32602
    assert {v["path"] for v in error["data"]["violations"]} == {"$.text", "$.extra"}


async def test_tool_error_is_a_structured_error_without_structured_content(url: str) -> None:
    result = (await call_modern(url, "fail", {})).json()["result"]
    assert result["isError"] is True and "structuredContent" not in result
    error = json.loads(result["content"][0]["text"])
    assert error["error_code"] == "out_of_stock"
    assert error["recoverable"] is True
    assert error["suggested_action"] == "Try tomorrow."
    assert len(error["request_id"]) == 32


async def test_unexpected_exception_hides_details_and_logs_the_request_id(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="crank.mcp"):
        result = (await call_modern(url, "crash", {})).json()["result"]
    text = result["content"][0]["text"]
    assert "hunter2" not in text and "Traceback" not in text
    error = json.loads(text)
    assert error["error_code"] == "internal_error"
    assert error["request_id"] in caplog.text
    assert "hunter2" in caplog.text  # the operator sees it, the client does not


async def test_debug_mode_shows_exception_details(serve: Callable[..., str]) -> None:
    url = serve(make_endpoint(debug=True))
    result = (await call_modern(url, "crash", {})).json()["result"]
    assert "RuntimeError" in result["content"][0]["text"]


async def test_failure_outside_the_tool_is_32603_with_a_request_id(
    serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    from crank.mcp import MCPEndpoint

    async def broken_provider(scope: Any) -> Any:
        raise RuntimeError("registry password leaked")

    url = serve(MCPEndpoint(broken_provider))
    with caplog.at_level(logging.ERROR, logger="crank.mcp"):
        response = await post(url, legacy_request("tools/list"), legacy_headers())
    assert response.status_code == 200
    assert response.json()["id"] == 1
    error = response.json()["error"]
    assert error["code"] == -32603
    assert "leaked" not in response.text
    assert error["data"]["request_id"] in caplog.text
    async with httpx.AsyncClient() as client:
        plain = await client.get(url + "/tools")
    assert plain.status_code == 200 and plain.json()["isError"] is True
    assert plain.json()["error"]["code"] == -32603 and "leaked" not in plain.text


@pytest.mark.parametrize(
    ("options", "headers", "query", "expected"),
    [
        ({}, {}, "", '{"text":"hi"}'),
        ({"default_format": "pretty_json"}, {}, "", '{\n  "text": "hi"\n}'),
        ({"default_format": "pretty_json"}, {}, "?format=plain", '{"text":"hi"}'),
        ({}, {"X-Mcp-Format": "toon"}, "?format=pretty_json", "text: hi"),
    ],
)
async def test_result_format_precedence(
    serve: Callable[..., str], options: dict[str, Any], headers: dict[str, str], query: str, expected: str
) -> None:
    url = serve(make_endpoint(**options))
    response = await call_modern(url + query, "echo", {"text": "hi"}, **headers)
    assert response.json()["result"]["content"][0]["text"] == expected


async def test_tool_format_beats_endpoint_default(serve: Callable[..., str]) -> None:
    from crank.mcp import Catalog, EndpointOptions, MCPEndpoint, Tool
    from tests.mcp.apps import rows

    tool = Tool(
        name="rows",
        description="Rows.",
        invoker=rows,
        format="markdown",
        input_schema={"type": "object", "properties": {"count": {"type": "integer"}}},
    )
    url = serve(MCPEndpoint(Catalog([tool]), EndpointOptions(default_format="pretty_json")))
    text = (await call_modern(url, "rows", {"count": 1})).json()["result"]["content"][0]["text"]
    assert text == "| id | name |\n| --- | --- |\n| 0 | n0 |"


async def test_unknown_format_lists_the_allowed_ones(url: str) -> None:
    response = await call_modern(url, "echo", {"text": "hi"}, **{"X-Mcp-Format": "xml"})
    error = response.json()["error"]
    assert error["code"] == -32602
    assert "'xml'" in error["message"] and "json, pretty_json, markdown, plain, toon" in error["message"]


@pytest.mark.parametrize(
    ("params", "message"),
    [({"arguments": {}}, "params.name"), ({"name": "echo", "arguments": [1]}, "params.arguments")],
)
async def test_malformed_call_params_are_invalid_params(url: str, params: dict[str, Any], message: str) -> None:
    response = await post(url, legacy_request("tools/call", params), legacy_headers())
    error = response.json()["error"]
    assert error["code"] == -32602 and message in error["message"]


async def test_provider_can_answer_404_for_an_unknown_endpoint(serve: Callable[..., str]) -> None:
    from crank.exceptions import CatalogNotFoundError
    from crank.mcp import MCPEndpoint

    async def provider(scope: Any) -> Any:
        raise CatalogNotFoundError(scope["path"])

    url = serve(MCPEndpoint(provider))
    response = await post(url, legacy_request("tools/list"), legacy_headers())
    assert response.status_code == 404


async def test_provider_that_cannot_answer_now_is_503_with_its_retry_after(serve: Callable[..., str]) -> None:
    from crank.exceptions import DependencyUnavailableError
    from crank.mcp import MCPEndpoint

    async def provider(scope: Any) -> Any:
        raise DependencyUnavailableError("agents", "Building many agents at once; retry in a moment.", retry_after=3)

    url = serve(MCPEndpoint(provider))
    response = await post(url, legacy_request("tools/list"), legacy_headers())
    assert response.status_code == 503 and response.headers["retry-after"] == "3"
    assert "retry in a moment" in response.json()["error"]["message"]


async def test_list_answers_are_built_once_per_page_language_and_era(
    serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import crank.mcp.catalog

    url = serve(make_endpoint())
    shapes = [
        (legacy_request("tools/list", request_id=1), legacy_headers(), legacy_request("tools/list", request_id="b")),
        (
            modern_request("tools/list", request_id=1),
            modern_headers("tools/list"),
            modern_request("tools/list", request_id=2),
        ),
    ]
    first = [(await post(url, body, headers)).json() for body, headers, _ in shapes]

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the answer was built again")

    monkeypatch.setattr(crank.mcp.catalog.Catalog, "page_at", forbidden)
    for (_, headers, again), before in zip(shapes, first, strict=True):
        answer = (await post(url, again, headers)).json()
        assert answer["id"] == again["id"] and answer["result"] == before["result"]
    assert "resultType" not in first[0]["result"] and first[1]["result"]["resultType"] == "complete"


async def test_requests_never_compile_schemas_or_serialize_pages(
    serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import crank.mcp.catalog
    import crank.mcp.validation

    url = serve(make_endpoint())

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("per-request schema or page work")

    monkeypatch.setattr(crank.mcp.validation.jsonschema_rs, "validator_for", forbidden)
    monkeypatch.setattr(crank.mcp.catalog.Catalog, "_wire_entry", forbidden)
    for accept_language in ("en", "uk"):
        headers = {**legacy_headers(), "Accept-Language": accept_language}
        assert (await post(url, legacy_request("tools/list"), headers)).json()["result"]["tools"]
    body = legacy_request("tools/call", {"name": "echo", "arguments": {"text": 1}})
    assert (await post(url, body, legacy_headers())).json()["result"]["isError"] is True


async def test_a_calls_context_carries_what_its_request_said(serve: Callable[..., str]) -> None:
    """Each field of the `CallContext` a tool gets (the endpoint builds it positionally, on the hot path)."""
    from crank.mcp import CallContext, Catalog, EndpointOptions, MCPEndpoint, Tool

    async def seen(arguments: dict[str, Any], context: CallContext) -> dict[str, Any]:
        return {
            "tool": context.tool_name, "version": context.protocol_version, "header": context.headers.get("x-probe"),
            "labels": dict(context.labels), "requested": context.requested_format, "default": context.default_format,
            "format": context.result_format(None), "caller": context.caller, "client_info": context.client_info,
            "capabilities": context.client_capabilities, "responses": context.input_responses,
            "progress_token": context.progress_token,
        }  # fmt: skip

    tool = Tool(name="seen", description="What the call's context holds.", invoker=seen,
                input_schema={"type": "object"})  # fmt: skip
    url = serve(MCPEndpoint(Catalog([tool], labels={"agent": "a"}), EndpointOptions(default_format="pretty_json")))
    body = legacy_request("tools/call", {"name": "seen", "arguments": {}, "_meta": {"progressToken": 7}})
    legacy = await post(url, body, {**legacy_headers(), "X-Mcp-Format": "toon", "X-Probe": "p"})
    assert legacy.json()["result"]["structuredContent"] == {
        "tool": "seen", "version": "2025-11-25", "header": "p", "labels": {"agent": "a"}, "requested": "toon",
        "default": "pretty_json", "format": "toon", "caller": None, "client_info": None, "capabilities": None,
        "responses": None, "progress_token": 7,
    }  # fmt: skip
    modern = (await call_modern(url, "seen", {})).json()["result"]["structuredContent"]
    assert modern["version"] == "2026-07-28" and modern["requested"] is None and modern["format"] == "pretty_json"
    assert modern["capabilities"] == {} and modern["client_info"] is not None and modern["progress_token"] is None
