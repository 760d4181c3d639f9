"""ASGI primitives shared by every endpoint: headers, the request body, JSON responses, lifespan.

The endpoints speak raw ASGI on their hot paths (no framework request objects): these are the few
operations they all need, written once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from crank.types import Receive, Scope, Send

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "EarlyAnswer",
    "EarlyAnswers",
    "EarlyAnswersNow",
    "JSON_CONTENT_TYPE",
    "JSON_CONTENT_TYPE_HEADER",
    "LONG_STREAM_EXTENSION",
    "header",
    "hold_long_stream",
    "read_body",
    "send_response",
    "serve_lifespan",
]

DEFAULT_MAX_BODY_SIZE: Final = 4 * 1024 * 1024
"""The largest request body an endpoint reads unless configured otherwise (4 MiB)."""
JSON_CONTENT_TYPE: Final = b"application/json"
JSON_CONTENT_TYPE_HEADER: Final = (b"content-type", JSON_CONTENT_TYPE)
"""The response header of a JSON answer, made once."""

Headers = list[tuple[bytes, bytes]]

EarlyAnswer = tuple[int, Headers, bytes]
"""A whole answer to a request, status, headers and body (`Content-Length` is added), that
an app knows from the request's head alone: `crank.wire.protocol.CrankHTTPProtocol` writes it itself."""

EarlyAnswers = Callable[[Scope], EarlyAnswer | None]
"""An app's early answers (`GatewayService.answer_early`): given the scope of a request whose head has come,
its answer when the app knows it at once without any state to change, else None and the request goes to the
app as usual. A request answered early never reaches the app, so the answer must be the one the app would
give, and giving it must cost less than the app would."""

EarlyAnswersNow = Callable[[], bool]
"""Whether an app's `EarlyAnswers` may answer any request at all now (`GatewayService.answers_early_now`: some
workspace's limit is known to be used up): while it says no, the protocol does not build a scope to ask, and
an ordinary request pays one call for the hook."""

LONG_STREAM_EXTENSION: Final = "crank.long_stream"
"""An ASGI scope extension of `crank serve`'s protocol (`crank.wire.protocol`): its `hold` marks the request's
connection as holding a long stream of a group (a workspace), until its answer ends. At the connection cap such a
connection may be closed to make room, the most numerous group's oldest first (`hold_long_stream`)."""


def hold_long_stream(scope: Scope, group: str) -> None:
    """Say that this request's answer is a stream that may never end (a list-change listener) on behalf of `group`:
    under `crank serve` its connection may then be closed to let another tenant's connection in. Nothing under a
    server without the extension."""
    mark = scope.get("extensions", {}).get(LONG_STREAM_EXTENSION, {}).get("hold")
    if mark is not None:
        mark(group)


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of one header (`name` in lower case, as ASGI gives names), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def unique_headers(scope: Scope) -> dict[str, str] | None:
    """The headers as a dict (ASGI names are lowercase), or None when a name appears more than once (the
    common request, decoded in one pass; `crank.wire.checks` says what to do with repeated ones)."""
    raw = scope["headers"]
    headers: dict[str, str] = {}
    try:
        # UTF-8 first: it is the faster codec here and agrees with latin-1 on the ASCII that headers carry. A
        # loop, not a comprehension: Python 3.11 runs a comprehension in a frame of its own (-14% here).
        for name, value in raw:
            headers[name.decode()] = value.decode()
    except UnicodeDecodeError:
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in raw}
    return headers if len(headers) == len(raw) else None


async def read_body(receive: Receive) -> bytes:
    """The whole request body. Its size limit is the request checks' (`crank.wire.checks`).

    A client that disconnects mid-body ends it: the endpoint then answers what it got, which is never
    sent anywhere."""
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body", False):  # the whole body at once
        body: bytes = message.get("body", b"")
        return body
    chunks: list[bytes] = []
    while message["type"] != "http.disconnect":
        chunk = message.get("body", b"")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
        message = await receive()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_response(
    send: Send,
    status: int,
    body: bytes = b"",
    headers: Iterable[tuple[bytes, bytes]] | None = None,
    *,
    content_type: bytes | None = JSON_CONTENT_TYPE,
) -> None:
    """One whole response: status, `Content-Length`, `Content-Type` (unless None) and `headers`."""
    length = (b"content-length", b"%d" % len(body))
    head = [length] if content_type is None else [length, (b"content-type", content_type)]
    if headers:
        head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def serve_lifespan(
    receive: Receive,
    send: Send,
    *,
    startup: Callable[[], None] | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Answer an ASGI lifespan scope, running `startup` and `shutdown` (if any) at their messages."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if startup is not None:
                startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if shutdown is not None:
                await shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
