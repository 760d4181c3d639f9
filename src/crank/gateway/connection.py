"""`Connection`: one HTTP/1.1 connection to an upstream, an asyncio protocol fed to httptools' parser.

One exchange at a time (no pipelining): `send` writes a request and returns a future of its
`UpstreamResponse`, which the parser's callbacks complete. The connection only reads and writes
bytes; pooling, deadlines and retries are `UpstreamClient`'s (crank/gateway/client.py).

Answers are read whole, up to a size limit, and decoded from gzip or deflate (the client asks for
both); 1xx answers are skipped; a body that runs until the connection closes is supported; the answer
to HEAD ends with its headers (the parser, not knowing the request, would wait for a body, so the
connection is then closed rather than reused).
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass
from typing import Any

import httptools

from crank import _json
from crank.exceptions import UpstreamConnectionError, UpstreamTimeoutError, UpstreamTooLargeError

__all__ = [
    "MAX_HEAD_BYTES",
    "Connection",
    "UpstreamResponse",
]


@dataclass(frozen=True, slots=True)
class UpstreamResponse:
    status: int
    headers: dict[str, str]  # names in lower case; repeated headers joined with ", "
    body: bytes

    def json(self) -> Any:
        """The body as JSON; raises `ValueError` when it is not."""
        return _json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


MAX_HEAD_BYTES = 64 * 1024
"""The most header bytes an answer may carry (names and values); llhttp itself sets no limit."""


class _Overflow(Exception):
    """Raised inside a parser callback: bytes beyond the answer that was asked for."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection. `exchanges` counts the requests sent on it (more than one: reused);
    `reusable` says whether it may carry another request now."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_response_bytes: int) -> None:
        self._loop = loop
        self._limit = max_response_bytes
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[UpstreamResponse] | None = None
        self._keep_alive = False
        self._head_only = False
        self.closed = False
        self.exchanges = 0
        self.idle_since = 0.0
        self.answered = False  # any byte of the answer arrived
        self._clear()

    def _clear(self) -> None:
        """Ready for the next head: a new exchange's, or the final one after a 1xx."""
        self._status = 0
        self._headers: dict[str, str] = {}
        self._repeated: dict[str, list[str]] | None = None  # headers sent more than once
        self._head_size = 0
        self._chunks: list[bytes] = []
        self._size = 0
        self._until_close = False

    @property
    def reusable(self) -> bool:
        return self._keep_alive and self._waiter is None and not self.closed

    def send(self, request: bytes, *, head_only: bool = False) -> asyncio.Future[UpstreamResponse]:
        """Write one request (head and body in one buffer) and return the future of its answer."""
        assert self._transport is not None and self._waiter is None, "one exchange at a time"
        self._clear()
        self._keep_alive = False
        self._head_only = head_only
        self.answered = False
        waiter = self._waiter = self._loop.create_future()
        self.exchanges += 1
        self._transport.write(request)
        return waiter

    def time_out(self) -> None:
        """The deadline passed: fail the exchange and drop the connection (a late answer cannot be matched)."""
        self._fail(UpstreamTimeoutError())

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the stream can no longer be trusted
            self.close()
            return
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, UpstreamTooLargeError) else _bad_answer(exc))
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(_bad_answer(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None:
            return
        if exc is None and self._until_close and self._status:  # a body delimited by the end of the connection
            self._complete()
        else:
            self._fail(UpstreamConnectionError("the upstream closed the connection", sent=True))

    # httptools callbacks

    def on_message_begin(self) -> None:
        # A second answer in the same stream (what a desynchronized or hostile upstream sends): it must
        # never be read as the answer to the next request on this connection.
        if self._waiter is None:
            raise _Overflow

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._head_size > MAX_HEAD_BYTES:
            raise UpstreamTooLargeError
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        known = self._headers.get(key)
        if known is None:
            self._headers[key] = text
            return
        if self._repeated is None:
            self._repeated = {}
        self._repeated.setdefault(key, [known]).append(text)  # joined once, at the end of the head

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        if self._repeated:
            for key, values in self._repeated.items():
                self._headers[key] = ", ".join(values)
        if self._status < 200:
            return  # 1xx: the final head follows
        if self._head_only:
            self._complete()  # an answer to HEAD has no body, whatever its headers say
            return
        if self._status in (204, 304):
            return
        length = self._headers.get("content-length", "")
        if length.isdigit() and int(length) > self._limit:
            raise UpstreamTooLargeError
        chunked = "chunked" in self._headers.get("transfer-encoding", "").lower()
        self._until_close = not length and not chunked

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._limit:
            raise UpstreamTooLargeError
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._status < 200:
            self._clear()
            return
        if self._waiter is not None:
            self._keep_alive = self._parser.should_keep_alive()
            self._complete()

    # the end of an exchange

    def _complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if self._head_only:
            self._keep_alive = False
        try:
            body = _decoded(self._headers.get("content-encoding"), b"".join(self._chunks), self._limit)
        except (UpstreamTooLargeError, UpstreamConnectionError) as exc:
            self._waiter = waiter
            self._fail(exc)
            return
        if waiter is not None and not waiter.done():
            waiter.set_result(UpstreamResponse(self._status, self._headers, body))
        self._headers = {}  # the answer owns its headers now
        if not self._keep_alive:
            self.close()

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        self._keep_alive = False
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


def _bad_answer(exc: Exception) -> UpstreamConnectionError:
    return UpstreamConnectionError(f"the upstream's answer is not valid HTTP/1.1 ({exc})", sent=True,
                                   cause="invalid_answer")  # fmt: skip


def _decoded(encoding: str | None, body: bytes, limit: int) -> bytes:
    """The body without its content coding, at most `limit` bytes of it (a small gzip can inflate to
    gigabytes). Codings the client did not ask for are passed through as they are."""
    if not encoding or not body:
        return body
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send it
        inflater = zlib.decompressobj(zlib.MAX_WBITS if body[0] & 0x0F == 8 else -zlib.MAX_WBITS)
    else:
        return body
    try:
        inflated = inflater.decompress(body, limit + 1)
        while inflater.eof and inflater.unused_data and len(inflated) <= limit and encoding != "deflate":
            rest = inflater.unused_data  # gzip allows several members one after the other (RFC 1952, 2.2)
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            inflated += inflater.decompress(rest, limit + 1 - len(inflated))
    except zlib.error as exc:
        raise UpstreamConnectionError(f"the upstream's {encoding} body is corrupt ({exc})", sent=True) from None
    if len(inflated) > limit or inflater.unconsumed_tail:
        raise UpstreamTooLargeError
    if not inflater.eof or inflater.unused_data:
        raise UpstreamConnectionError(f"the upstream's {encoding} body is cut short or has trailing bytes", sent=True)
    return inflated
