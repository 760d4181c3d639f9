"""An in-process endpoint answers the common request in one coroutine (`MCPEndpoint._serve_common`), and every request,
common or not, gets exactly the answer of the general path (`RequestChecksMiddleware` around `_serve`): the same
status, headers and body, byte for byte (the random ids of internal errors, stream events and sessions aside)."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from examples import conformance_app
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crank.mcp import Catalog, MCPEndpoint
from crank.types import ASGIApp, Message
from crank.wire.middleware import TokenTable

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
# The common request with up to two of its parts changed: most examples are near what `_serve_common` answers itself.
REQUESTS = st.lists(st.sampled_from(sorted(VARIANTS)), max_size=2, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: st.sampled_from(VARIANTS[name]) for name in names})
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.sampled_from(BODIES), changed=REQUESTS, split=st.booleans())
@pytest.mark.anyio
async def test_every_request_gets_the_answer_of_the_general_path(
    body: bytes, changed: dict[str, Any], split: bool
) -> None:
    scope = request_scope(body, **{**COMMON, **changed})
    common = await answer(ENDPOINT.http_app, scope, body, split)
    general = await answer(ENDPOINT._checks, scope, body, split)
    assert common == general


@pytest.mark.anyio
async def test_the_common_request_is_answered_in_one_coroutine() -> None:
    """The in-process endpoint answers the common request itself: with its general path made to fail, the call
    still gets the tool's answer, and any other request reaches the general path."""
    endpoint = MCPEndpoint(conformance_app.catalog)
    assert endpoint.http_app.__func__ is MCPEndpoint._serve_common  # type: ignore[attr-defined]
    reached: list[str] = []

    async def general(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["method"])
        await send({"type": "http.response.start", "status": 599, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    endpoint._checks.app = general  # what the checks let through goes here, not to `_serve`
    body = call("echo", {"text": "hi"})
    sent = await answer(endpoint.http_app, request_scope(body, **COMMON), body, split=False)
    assert sent[0][0] == 200
    assert orjson.loads(sent[1])["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert reached == []
    sent = await answer(endpoint.http_app, request_scope(body, **{**COMMON, "method": "PUT"}), body, split=False)
    assert (sent[0][0], reached) == (599, ["PUT"])


@pytest.mark.anyio
async def test_a_receive_that_fails_is_answered_as_the_general_path_answers_it() -> None:
    body = call("echo", {"text": "hi"})
    answers = []
    for app in (ENDPOINT.http_app, ENDPOINT._checks):
        sent: list[Any] = []

        async def receive() -> Message:
            raise RuntimeError("the connection broke")

        async def send(message: Message, sent: list[Any] = sent) -> None:
            sent.append(message.get("status") or message.get("body", b""))

        await app(request_scope(body, **COMMON), receive, send)
        answers.append(sent)
    assert answers[0][0] == answers[1][0] == 200
    assert orjson.loads(answers[0][1])["error"]["code"] == orjson.loads(answers[1][1])["error"]["code"] == -32603
    assert RANDOM_IDS.sub(b"", answers[0][1]) == RANDOM_IDS.sub(b"", answers[1][1])


def test_an_endpoint_that_authenticates_or_looks_up_its_catalog_keeps_the_general_path() -> None:
    catalog = Catalog([])
    keyed = MCPEndpoint(catalog, authenticator=TokenTable({"key": "key"}.get))

    async def provide(scope: Any) -> Catalog:
        return catalog

    for endpoint in (keyed, MCPEndpoint(provide)):
        assert endpoint.http_app is endpoint._checks
