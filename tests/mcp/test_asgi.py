"""The endpoint as a plain ASGI app, driven message by message (what a server does with chunked bodies)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.mcp.apps import make_endpoint
from tests.mcp.wire import legacy_request

pytestmark = pytest.mark.anyio


async def drive(app: Any, chunks: list[bytes], path: str = "/") -> tuple[int, bytes]:
    messages = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1} for i, chunk in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "server": ("127.0.0.1", 8000)}
    await app(scope, receive, send)
    return sent[0]["status"], sent[1]["body"]


async def test_body_in_several_chunks_is_joined() -> None:
    body = json.dumps(legacy_request("tools/call", {"name": "echo", "arguments": {"text": "joined"}})).encode()
    status, answer = await drive(make_endpoint(), [body[:10], body[10:30], body[30:]])
    assert status == 200
    assert json.loads(answer)["result"]["structuredContent"] == {"text": "joined"}


async def test_chunks_over_the_limit_stop_reading_at_413() -> None:
    status, answer = await drive(make_endpoint(max_body_size=100), [b" " * 60, b" " * 60, b"never read"])
    assert status == 413
    assert json.loads(answer)["error"]["code"] == -32600


async def test_lifespan_is_answered() -> None:
    events = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await make_endpoint()({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


async def test_websocket_scope_is_ignored() -> None:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        raise AssertionError("not read")

    async def send(message: Any) -> None:
        sent.append(message)

    await make_endpoint()({"type": "websocket", "path": "/", "headers": []}, receive, send)
    assert sent == []
