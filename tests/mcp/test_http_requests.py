"""Every request takes the endpoint's one path (`MCPEndpoint._serve`: the request checks, then the route), and 400
generated requests, the common one with up to two of its parts changed, each get the answer expected of them.

The head's rules are written here in their order (`crank.wire.checks`, then the route and the media types). The
answers of the bodies that pass them are in tests/mcp/one_path_answers.json: status, headers and body byte for
byte, for every body, protocol version, `format` query and `Accept` below. They were recorded when the endpoint had two
paths (a fast one for the common request and the general one) and a differential test held the two to the same
answers; the conformance suite and the MCP tests checked those answers."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from examples import conformance_app
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crank.mcp.http import _is_plain_request
from crank.types import ASGIApp, Message
from crank.wire.jsonrpc import request_envelope_error

ENDPOINT = conformance_app.endpoint


def call(name: str, arguments: Any, **params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments, **params}})  # fmt: skip


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
BODIES = [
    call("echo", {"text": "hi"}),
    call("echo", {"text": 5}),
    call("echo", []),
    call("no_such_tool", {}),
    call("test_error_handling", {}),
    call("test_image_content", {}),
    call("test_tool_with_progress", {}, _meta={"progressToken": "p1"}),
    call("echo", {"text": "hi"}, _meta=MODERN_META),
    call("test_tool_with_progress", {}, _meta={**MODERN_META, "progressToken": "p2"}),
    call("echo", {"text": "x" * 70_000}),  # over 64 KiB: the general path reads it
    b'{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}',
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
    b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},'
    b'"clientInfo":{"name":"t","version":"1"}}}',
    b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"test://static-text"}}',
    b'{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"test_simple_prompt"}}',
    b'{"jsonrpc":"2.0","id":4,"method":"no/such/method"}',
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
    b'{"jsonrpc":"2.0","id":5,"result":{}}',
    b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
    b"42",
    b"{not json",
    b"[" * 100 + b"]" * 100,
    b"",
]
HOSTS = ["127.0.0.1:8000", "localhost:8000", "evil.example", None]
ORIGINS = [None, "http://127.0.0.1:8000", "http://evil.example"]
ACCEPTS = ["application/json, text/event-stream", "application/json", "text/event-stream", "text/html", None]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain", None]
VERSIONS = ["2025-11-25", "2026-07-28", "2025-06-18", "1999-01-01", None]
LENGTHS = ["declared", "missing", "not a number", "too large"]
PLACES = [("/", ""), ("/mcp", "/mcp"), ("/mcp/", "/mcp"), ("/mcp/tools", "/mcp"), ("/other", "")]
RANDOM_IDS = re.compile(rb'request_id\\?":\\?"[0-9a-f]+|id: [0-9a-f]+-')  # also in a tool error's JSON text


async def answer(app: ASGIApp, scope: dict[str, Any], body: bytes, split: bool) -> list[Any]:
    """What `app` sends for one request, its body in one piece or two."""
    parts = [body[: len(body) // 2], body[len(body) // 2 :]] if split else [body]
    incoming: list[Message] = [
        {"type": "http.request", "body": part, "more_body": n < len(parts) - 1} for n, part in enumerate(parts)
    ]
    sent: list[Any] = []

    async def receive() -> Message:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":  # a signed session id is random too
            headers = [(n, b"<random>" if n == b"mcp-session-id" else v) for n, v in message.get("headers", [])]
            sent.append((message["status"], headers))
        else:
            sent.append(RANDOM_IDS.sub(b"<random>", message.get("body", b"")))

    await app({**scope, "headers": list(scope["headers"])}, receive, send)
    return sent


def request_scope(body: bytes, *, method: str, place: tuple[str, str], query: bytes, host: str | None,
                  origin: str | None, accept: str | None, content_type: str | None, version: str | None,
                  length: str, repeated: bool) -> dict[str, Any]:  # fmt: skip
    named = {"host": host, "origin": origin, "accept": accept, "content-type": content_type,
             "mcp-protocol-version": version}  # fmt: skip
    headers = [(name.encode(), value.encode()) for name, value in named.items() if value is not None]
    declared = {"declared": str(len(body)), "not a number": "12a", "too large": "999999999", "missing": None}[length]
    if declared is not None:
        headers.append((b"content-length", declared.encode()))
    if repeated:
        headers.append((b"accept", b"application/json"))
    path, root = place
    return {"type": "http", "method": method, "path": path, "root_path": root, "query_string": query,
            "headers": headers, "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000)}  # fmt: skip


COMMON: dict[str, Any] = {
    "method": "POST", "place": ("/mcp", "/mcp"), "query": b"", "host": "127.0.0.1:8000", "origin": None,
    "accept": "application/json, text/event-stream", "content_type": "application/json", "version": "2025-11-25",
    "length": "declared", "repeated": False,
}  # fmt: skip
VARIANTS: dict[str, list[Any]] = {
    "method": ["GET", "DELETE"], "place": PLACES, "query": [b"format=json", b"format=markdown", b"format=bogus"],
    "host": HOSTS, "origin": ORIGINS,
    "accept": ACCEPTS, "content_type": CONTENT_TYPES, "version": VERSIONS, "length": LENGTHS, "repeated": [True],
}  # fmt: skip
# The common request with up to two of its parts changed.
REQUESTS = st.lists(st.sampled_from(sorted(VARIANTS)), max_size=2, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: st.sampled_from(VARIANTS[name]) for name in names})
)


RECORDED = json.loads((Path(__file__).parent / "one_path_answers.json").read_text())
ANSWERS = {
    (body, version, query, accept): RECORDED["answers"][n] for body, version, query, accept, n in RECORDED["requests"]
}
JSONRPC_REFUSALS = {
    421: "Misdirected request", 403: "Forbidden: this Origin", 413: "Request body exceeds",
    406: "Accept must allow application/json", 415: "Content-Type must be application/json",
}  # fmt: skip


def accept_sent(request: dict[str, Any]) -> str | None:
    """The `Accept` the endpoint reads: a repeated one (`application/json` sent again) is joined with the first,
    which then allows JSON, and an SSE stream when the first did."""
    accept = request["accept"]
    if not request["repeated"]:
        return accept
    return "application/json, text/event-stream" if accept and "text/event-stream" in accept else "application/json"


def refused_by_head(request: dict[str, Any]) -> int | None:
    """The status the request's head is refused with, in the order of the checks and the route; None for a POST
    to the endpoint that reads its body."""
    if request["host"] in ("evil.example", None):  # loopback server: protection on
        return 421
    if request["origin"] == "http://evil.example":
        return 403
    if request["length"] == "too large":
        return 413
    route = request["place"][0][len(request["place"][1]) :]
    if route not in ("", "/"):
        return 404 if route == "/other" else (200 if request["method"] == "GET" else 405)  # /tools: GET only
    if request["method"] != "POST":
        return 405
    if accept_sent(request) in ("text/event-stream", "text/html"):
        return 406
    if request["content_type"] in ("text/plain", None):
        return 415
    return None


def expected_body_answer(body: bytes, request: dict[str, Any]) -> tuple[int, list[Any], list[bytes] | str]:
    item = ANSWERS[(BODIES.index(body), request["version"], request["query"].decode(), accept_sent(request))]
    headers = [(name.encode(), value.encode()) for name, value in item["headers"]]
    answer = item["answer_sha256"] if "answer_sha256" in item else [part.encode() for part in item["answer"]]
    return item["status"], headers, answer


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.sampled_from(BODIES), changed=REQUESTS, split=st.booleans())
@pytest.mark.anyio
async def test_every_request_gets_its_expected_answer(body: bytes, changed: dict[str, Any], split: bool) -> None:
    request = {**COMMON, **changed}
    (status, headers), *sent = await answer(ENDPOINT.http_app, request_scope(body, **request), body, split)
    refused = refused_by_head(request)
    if refused is None:
        expected_status, expected_headers, expected = expected_body_answer(body, request)
        assert (status, headers) == (expected_status, expected_headers)
        got = hashlib.sha256(b"".join(sent)).hexdigest() if isinstance(expected, str) else sent
        assert got == expected
    elif refused in JSONRPC_REFUSALS:
        error = orjson.loads(b"".join(sent))["error"]
        assert (status, error["code"]) == (refused, -32600)
        assert error["message"].startswith(JSONRPC_REFUSALS[refused])
    elif refused == 405:
        allow = dict(headers)[b"allow"]
        assert (status, allow) == (405, b"GET" if request["place"][0].endswith("/tools") else b"POST")
    elif refused == 404:
        assert (status, orjson.loads(b"".join(sent))) == (404, {"error": "Not found"})
    else:  # GET /tools: the plain pair's listing, whatever the body
        assert status == 200 and "echo" in {tool["name"] for tool in orjson.loads(b"".join(sent))["tools"]}


@given(message=st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params"]),
                               st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3),
                                         st.just("2.0"), st.just({}), st.just([])), max_size=4))  # fmt: skip
def test_a_message_taken_as_a_plain_request_is_one_the_envelope_rule_accepts(message: dict[str, Any]) -> None:
    """`_is_plain_request` picks the common message out for `MCPServer.handle` at once: it never picks one that
    `request_envelope_error`, the owner of the envelope's rule, would refuse."""
    if _is_plain_request(message):
        assert request_envelope_error(message) is None


@pytest.mark.anyio
async def test_a_receive_that_fails_is_answered_as_an_internal_error_and_nothing_more() -> None:
    body = call("echo", {"text": "hi"})
    sent: list[Any] = []

    async def receive() -> Message:
        raise RuntimeError("the connection broke at /secret/path")

    async def send(message: Message) -> None:
        sent.append(message.get("status") or message.get("body", b""))

    await ENDPOINT.http_app(request_scope(body, **COMMON), receive, send)
    assert sent[0] == 200
    error = orjson.loads(sent[1])["error"]
    assert error["code"] == -32603 and "/secret/path" not in sent[1].decode()
