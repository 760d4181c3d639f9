"""`CrankHTTPProtocol`: uvicorn's httptools protocol with the limits of
`crank.wire.connection_limits.ConnectionLimits` (its module says which and why) and the app's early answers
(`crank.wire.asgi.EarlyAnswers`, docs/architecture.md). It subclasses uvicorn's
`HttpToolsProtocol` and keeps its behaviour; tests/wire/test_listen.py runs it in a real `crank serve`, so
that a uvicorn upgrade that moves its hooks fails there."""

from __future__ import annotations

import asyncio
import fcntl
import re
import struct
import sys
import termios
import urllib.parse
from collections import deque
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from crank import _json
from crank.wire.asgi import LONG_STREAM_EXTENSION, EarlyAnswer, EarlyAnswers, EarlyAnswersNow
from crank.wire.connection_limits import DRAIN_TIMEOUT, ConnectionLimits, logger
from crank.wire.notices import ThrottledLog

__all__ = ["CrankHTTPProtocol", "protocol_for"]


def protocol_for(
    limits: ConnectionLimits, answer_early: EarlyAnswers | None = None, answers_now: EarlyAnswersNow | None = None
) -> type[CrankHTTPProtocol]:
    """The protocol class of one server: its connections share the limits, the idle and stalled lists and the
    log, and the app's early answers (`crank.wire.asgi.EarlyAnswers`), if it has any, asked while `answers_now`
    says it may answer anything (None: always)."""

    class Protocol(CrankHTTPProtocol):
        pass

    Protocol.limits, Protocol.idle, Protocol.stalled, Protocol.notices = limits, {}, {}, ThrottledLog(logger)
    Protocol.streams = {}
    timeouts = (limits.head_timeout, limits.body_timeout, limits.send_timeout)
    interval = max(_SWEEP_MIN_INTERVAL, min(_SWEEP_INTERVAL, *(timeout / 4 for timeout in timeouts)))
    Protocol.sweeper = _Sweeper(interval)
    Protocol.answer_early = staticmethod(answer_early) if answer_early is not None else None
    Protocol.answers_now = staticmethod(answers_now if answers_now is not None else _always)
    return Protocol


_SWEEP_INTERVAL = 0.5  # seconds: a deadline is noticed this late at most (less for timeouts under 2 s)
_SWEEP_MIN_INTERVAL = 0.01  # however small a timeout: the sweep never runs more than 100 times a second
_PIECE = 64 * 1024
"""The most of an answer handed to the transport at once: a larger one is handed on as the transport drains,
so that what a connection holds unsent beyond the answer itself is at most about two pieces."""
_SEND_PROGRESS = 64 * 1024
"""What a connection with unsent bytes must send (or all of them) within `send_timeout`."""
_STALL_GRACE = 1.0
"""Seconds a connection must have been stalled before it is closed to make room for another."""


def _unacknowledged(transport: asyncio.Transport) -> int:
    """Bytes in the kernel's send queue of the transport's socket that its peer has not acknowledged yet
    (Linux's SIOCOUTQ); 0 where that cannot be told. What left the process is not yet what the client took:
    on loopback the kernel queues megabytes, which a slow reader takes for seconds without the queue having
    room for more."""
    sock = transport.get_extra_info("socket")
    if sock is None or sys.platform != "linux":
        return 0
    try:
        queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", queued)[0])


def _always() -> bool:
    return True


class _Sweeper:
    """One server's deadlines (head, body, keep-alive, drain) and the send progress of its connections, checked
    by one timer every `interval` seconds: a timer per request (`call_later` and its `cancel`, for each of the
    head, the body and the keep-alive wait) cost about 2 µs each of every request's CPU (docs/benchmarks.md, "The
    cost of one refusal"), a sweep costs two checks per open connection and interval. Runs while the server has
    connections."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.connections: set[Any] = set()  # the server's (uvicorn's `server_state.connections`)
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop, connections: set[Any]) -> None:
        if self._timer is None:
            self.connections = connections
            self._timer = loop.call_later(self.interval, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        # The next sweep first: a connection that fails to close must not stop the sweeping for the others.
        self._timer = loop.call_later(self.interval, self._sweep, loop) if self.connections else None
        now = loop.time()
        for connection in list(self.connections):
            try:
                deadline = getattr(connection, "deadline", 0.0)
                if deadline and deadline <= now:
                    connection.deadline = 0.0
                    connection.timed_out()
                if getattr(connection, "writer", None) is not None and not connection.transport.is_closing():
                    connection.check_sending(now)
            except Exception:  # pragma: no cover - closing a transport does not raise; logged if it does
                logger.exception("closing a connection past its deadline failed")


class _Writer:
    """What a connection's answers are written through (the cycles' `transport`): an answer larger than
    `_PIECE` is handed to the transport a piece at a time as the transport drains (`feed`, from the protocol's
    `resume_writing`), so the transport never copies a whole large answer for a client that reads slowly;
    `written` counts what was handed on, for the sweep's progress check (`CrankHTTPProtocol.check_sending`)."""

    __slots__ = ("closing", "pending", "protocol", "transport", "written")

    def __init__(self, transport: asyncio.Transport, protocol: CrankHTTPProtocol) -> None:
        self.transport = transport
        self.protocol = protocol
        self.pending: deque[memoryview] = deque()  # what is not handed on yet, in order
        self.written = 0
        self.closing = False  # close once the pending bytes are handed on

    def write(self, data: bytes) -> None:
        if not self.pending and len(data) <= _PIECE:
            self.written += len(data)
            self.transport.write(data)
            return
        self.pending.append(memoryview(data))
        self.feed()

    def write_answer(self, head: bytes, body: bytes) -> None:
        """An answer's head and whole body, in one system call (a `writev`, one TCP segment where they fit)
        when nothing is pending and both fit in one piece; else as two `write`s."""
        if self.pending or not body or len(head) + len(body) > _PIECE:
            self.write(head)
            self.write(body)
            return
        self.written += len(head) + len(body)
        self.transport.writelines((head, body))

    def feed(self) -> None:
        """Hand pending pieces to the transport until it asks for a pause, or all are handed on."""
        pending = self.pending
        while pending and not self.protocol.write_paused:
            view = pending[0]
            if len(view) > _PIECE:
                piece, pending[0] = view[:_PIECE], view[_PIECE:]
            else:
                piece = pending.popleft()
            self.written += len(piece)
            self.transport.write(piece)
        if not pending and self.closing:
            self.closing = False
            self.protocol.finish()

    def unsent(self) -> int:
        return self.transport.get_write_buffer_size() + sum(len(view) for view in self.pending)

    def is_closing(self) -> bool:
        return self.closing or self.transport.is_closing()

    def close(self) -> None:
        """uvicorn's close after an answer: once what is pending is handed on (`CrankHTTPProtocol.finish`)."""
        if self.pending:
            self.closing = True
        else:
            self.protocol.finish()


_HEAD_FIELDS = re.compile(b'(?:[^\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]+: [^\x00-\x08\x0a-\x1f\x7f]*\r\n)*')
"""What uvicorn's `send` allows in each header of an answer (its HEADER_RE and HEADER_VALUE_RE), as one match
over the head's header lines. A CR or LF inside a name or a value could make two valid lines of one: the
number of lines is checked too (`_Cycle._start`)."""


_COLON = ord(":")
"""A colon in a header's name, looked for as a byte: `b":" in name` first tries b":" as an integer, and the
TypeError it raises and drops costs eight times the search."""
_FRAMING = (b"content-length", b"transfer-encoding", b"connection")
"""Headers that change how uvicorn's `send` frames an answer or keeps its connection."""


def _valid_fields(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether uvicorn's `send` would write these headers of the configuration as they are (`_HEAD_FIELDS`, one
    line each, no colon in a name), none of them changing how it frames an answer."""
    if any(_COLON in name or name.lower() in _FRAMING for name, _ in headers):
        return False
    return _valid_lines(b"".join(name + b": " + value + b"\r\n" for name, value in headers), len(headers))


def _valid_lines(head: bytes, lines: int) -> bool:
    """Whether `head` is `lines` header lines that uvicorn's `send` would write: a CR LF inside a name or a
    value would make two valid lines of one, so they are counted as well as matched."""
    return head.count(b"\n") == lines and _HEAD_FIELDS.fullmatch(head) is not None


_LINES: dict[tuple[bytes, bytes], bytes] = {}
"""Header lines already checked, by the app's (name, value): an app gives the same few headers with nearly every
answer, and a look-up costs a tenth of the match. Bounded in entries and in each line's size
(`_LINES_MAX`, `_LINE_MAX_BYTES`): varying values (a length, a date) are checked each time once it is full."""
_LINES_MAX = 1024
_LINE_MAX_BYTES = 256


def _fields(
    headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...], keep_alive: bool
) -> tuple[bytes, int]:
    """An answer's header lines as uvicorn's `send` writes them, and its `content-length`; a length of -1 when
    uvicorn's `send` must write them: no length or two, `transfer-encoding` or `connection` (framing of its own),
    or a header it refuses (`_HEAD_FIELDS`, one line each, no colon in a name)."""
    fields: list[bytes] = []
    length = -1
    for pair in headers:
        line = _LINES.get(pair)
        if line is None:
            name, value = pair
            name = name.lower()
            if name == b"content-length":
                if length >= 0 or not value.isdigit():
                    return b"", -1
                length = int(value)
                line = b"content-length: " + value + b"\r\n"
            elif (line := _checked_line(pair, name, value)) is None:
                return b"", -1
        fields.append(line)
    if not keep_alive:
        fields.append(b"connection: close\r\n")
    return b"".join(fields), length


def _checked_line(pair: tuple[bytes, bytes], name: bytes, value: bytes) -> bytes | None:
    """The line of one header other than `content-length` (`name` in lower case), kept in `_LINES`; None when
    uvicorn's `send` must write it: it changes the framing, has a colon in its name, or is refused."""
    if name in _FRAMING or _COLON in name:
        return None
    line = name + b": " + value + b"\r\n"
    if not _valid_lines(line, 1):
        return None
    if len(line) <= _LINE_MAX_BYTES and len(_LINES) < _LINES_MAX and type(pair[0]) is bytes and type(value) is bytes:
        _LINES[pair] = line
    return line


class _Cycle(RequestResponseCycle):
    """uvicorn's request cycle with a shorter `send` for the answer an app gives nearly always: a head with a
    `content-length` (and no `connection` or `transfer-encoding`), then the whole body in one message, checked
    as uvicorn checks it, with one match for all its headers instead of two per header. Any other answer, and
    any answer while the transport is paused, goes through uvicorn's `send` as it is: tests/wire/test_protocol.py
    compares the bytes of both for each shape.

    The head of the common answer waits for its body, and both go out in one system call (`_Writer.write_answer`):
    written apart, each is a send and a TCP segment of its own, which the client's kernel and the client handle
    apart too (docs/benchmarks.md). Any message that does not end the answer that way first writes the head."""

    _head: bytes | None = None
    """The head `_start` made, until its body comes."""

    async def send(self, message: Any) -> None:
        if self.flow.write_paused or self.disconnected or self.access_log or self.scope["method"] == "HEAD":
            self._write_head()
            return await super().send(message)
        if not self.response_started:
            if message["type"] == "http.response.start" and self._start(message):
                return None
        elif (
            self.chunked_encoding is False  # a head with a content-length (a chunked answer ends with a marker)
            and not self.response_complete
            and message["type"] == "http.response.body"
            and not message.get("more_body", False)
            and len(body := message.get("body", b"")) == self.expected_content_length
        ):
            self.expected_content_length = 0
            head, self._head = self._head, None
            if head is None:
                self.transport.write(body)
            else:
                self.transport.write_answer(head, body)  # type: ignore[attr-defined]
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()
            return None
        self._write_head()
        return await super().send(message)

    def _write_head(self) -> None:
        """Write the head `_start` kept, before a message that does not end its answer at once (or drop it, when
        the client is gone: uvicorn's `send` then writes nothing more)."""
        head, self._head = self._head, None
        if head is not None and not self.disconnected:
            self.transport.write(head)

    def _start(self, message: Any) -> bool:
        """Write the head of a `content-length` answer; False (nothing written, nothing changed) for any other,
        and for anything uvicorn's `send` would refuse, which then refuses it as it does."""
        headers = message.get("headers", ())
        if not isinstance(headers, (list, tuple)):  # an iterator can be read only once: uvicorn's `send` reads it
            return False
        try:
            status_line = STATUS_LINE.get(message.get("status"))
            head, length = _fields(headers, self.keep_alive)
        except Exception:  # not pairs of bytes, a length too long for int: uvicorn's `send` says so
            return False
        if status_line is None or length < 0:
            return False
        self.response_started, self.waiting_for_100_continue = True, False
        self.chunked_encoding, self.expected_content_length = False, length
        # The server's own headers first, as uvicorn writes them: its date, and those of the configuration,
        # checked once per connection (`CrankHTTPProtocol.__init__`).
        content = [status_line]
        for name, value in self.default_headers:
            content += (name, b": ", value, b"\r\n")
        content += (head, b"\r\n")
        self._head = b"".join(content)  # written with the body (`send`), or before the next message
        return True


_TASK_NAME = "crank-request"
"""The name of every request's task (`CrankHTTPProtocol._start_asgi_task`)."""


async def _served(
    cycle: RequestResponseCycle, app: Any, tasks: set[asyncio.Task[None]], loop: asyncio.AbstractEventLoop
) -> None:
    """A request's task: the app's answer, then the task leaves the server's `tasks` (uvicorn's shutdown waits
    for those). A task cancelled before its first step stays there: only the shutdown's cancellation does that,
    after its wait. The task is looked up with its loop given: without one, Python 3.11 asks for the running
    loop, which makes a `getpid` system call each time (docs/benchmarks.md)."""
    try:
        await cycle.run_asgi(app)
    finally:
        tasks.discard(asyncio.current_task(loop))


class _HeadTooLarge(Exception):
    """Raised in a parser callback: the head passed `max_head_bytes`."""


class _Answered(Exception):
    """Raised in a parser callback that answered the request and closed: nothing more is parsed."""


def _refusal(status: int, reason: str, code: str, message: str, *extra: bytes) -> bytes:
    body = _json.dumps({"error": {"code": code, "message": message}})
    head = [f"HTTP/1.1 {status} {reason}".encode(), b"content-type: application/json",
            b"content-length: " + str(len(body)).encode(), b"connection: close", *extra]  # fmt: skip
    return b"\r\n".join(head) + b"\r\n\r\n" + body


_TOO_MANY = _refusal(503, "Service Unavailable", "too_many_connections",
                     "The server has too many connections open; retry in a moment.", b"retry-after: 1")  # fmt: skip
_HEAD_TIMEOUT = _refusal(408, "Request Timeout", "request_timeout", "The request head did not arrive in time.")
_BODY_TIMEOUT = _refusal(408, "Request Timeout", "request_timeout", "The request body did not arrive in time.")
_HEAD_TOO_LARGE = _refusal(431, "Request Header Fields Too Large", "request_head_too_large",
                           "The request line and headers are too large.")  # fmt: skip
_NO_WEBSOCKET = _refusal(400, "Bad Request", "upgrade_not_supported",
                         "WebSocket is not part of MCP: send MCP requests as HTTP POST (Streamable HTTP).")  # fmt: skip


class CrankHTTPProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and caps of `ConnectionLimits` (see the module's
    docstring). `protocol_for` makes the class a server uses, with its own limits and lists."""

    limits: ConnectionLimits = ConnectionLimits()
    idle: dict[CrankHTTPProtocol, None]  # connections waiting for a request's first byte, the longest first
    stalled: dict[CrankHTTPProtocol, float]  # connections that cannot write now or are closing: since when
    streams: dict[CrankHTTPProtocol, str]  # connections holding a long stream (`hold_long_stream`): its group
    notices: ThrottledLog
    sweeper: _Sweeper
    answer_early: EarlyAnswers | None = None
    answers_now: EarlyAnswersNow = staticmethod(_always)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn logs each answer when its access logger has a handler, whatever the configuration says; off
        # here when the configuration turns it off (`crank serve` does), whoever added a handler.
        self.access_log = self.access_log and self.config.access_log
        # Headers of the configuration that uvicorn's `send` would refuse: every answer goes through it.
        self._cycle = _Cycle if _valid_fields(self.config.encoded_headers) else RequestResponseCycle
        self.deadline = 0.0  # loop time by which the head (or the body) must be complete; 0: none running
        self.writer: _Writer | None = None
        self.write_paused = False  # the transport asked for a pause (`pause_writing`)
        self._in_body = False  # the deadline is the body's
        self._head_bytes = 0
        self._in_head = False  # part of a request head has come
        self._keep_alive = True  # the cycle's own keep-alive, given back once its body is whole
        self._early: EarlyAnswer | None = None  # an early answer waiting for its body's end (`_answered_early`)
        self._drained = -1  # bytes of a refused body dropped since the answer; -1: not closing after a refusal
        self._send_since = 0.0  # when the sweep last saw the unsent bytes move (`check_sending`); 0: none unsent
        self._send_mark = 0  # bytes sent then
        self._upgrade = False  # the request asks for an upgrade the protocol does not make: close after it
        self._between = False  # answered, waiting for the next request: the deadline is the keep-alive one
        # Given to each request's scope: ASGI extensions are dicts (`crank.wire.asgi.hold_long_stream` reads it).
        self._extensions: dict[str, dict[object, object]] = {LONG_STREAM_EXTENSION: {"hold": self._hold_stream}}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.writer = _Writer(transport, self)
        if len(self.connections) > self.limits.max_connections and not self._make_room():
            self.notices.warning("max_connections", "refused a connection: %d connections are open, none idle "
                                 "or stalled (CRANK_MAX_CONNECTIONS)", self.limits.max_connections)  # fmt: skip
            transport.write(_TOO_MANY)
            transport.close()
            return
        self.deadline = self.loop.time() + self.limits.head_timeout
        self.sweeper.start(self.loop, self.connections)
        self.idle[self] = None

    def _hold_stream(self, group: str) -> None:
        """`crank.wire.asgi.LONG_STREAM_EXTENSION`: this connection's answer is a long stream of `group` (not for a
        connection already gone: `connection_lost` took it out of every list, and nothing would again)."""
        cycle = self.cycle
        if cycle is None or cycle.disconnected or cycle.response_complete or self.transport.is_closing():
            return
        self.streams[self] = group

    def _make_room(self) -> bool:
        """Close the connection idle the longest, else the one stalled the longest (for `_STALL_GRACE` at
        least), else the oldest long stream of the group that holds the most, if any: it costs an idle client a
        reconnect, a stalled one the answer it does not take, a listener its stream (which it may open again,
        within its group's bounds). So one tenant's streams never keep another tenant's connection out."""
        oldest = next(iter(self.idle), None)
        if oldest is not None:
            del self.idle[oldest]
            oldest.transport.close()
            self.notices.warning("max_connections_idle", "closed the connection idle the longest: %d connections "
                                 "are open (CRANK_MAX_CONNECTIONS)", self.limits.max_connections)  # fmt: skip
            return True
        stalled, since = next(iter(self.stalled.items()), (None, 0.0))
        if stalled is None or self.loop.time() - since < _STALL_GRACE:
            return self._close_a_stream()
        stalled.abort()
        self.notices.warning("max_connections_stalled", "closed the connection stalled the longest (its answer "
                             "not taken, or closing after a refusal): %d connections are open "
                             "(CRANK_MAX_CONNECTIONS)", self.limits.max_connections)  # fmt: skip
        return True

    def _close_a_stream(self) -> bool:
        """Close the oldest long stream of the group with the most of them (`_make_room`'s last resort)."""
        if not self.streams:
            return False
        counts: dict[str, int] = {}
        for group in self.streams.values():
            counts[group] = counts.get(group, 0) + 1
        largest = max(counts, key=counts.__getitem__)
        oldest = next(connection for connection, group in self.streams.items() if group == largest)
        oldest.abort()
        self.notices.warning("max_connections_stream", "closed the oldest list-change stream of %s, which holds the "
                             "most (%d): %d connections are open (CRANK_MAX_CONNECTIONS)", largest, counts[largest],
                             self.limits.max_connections)  # fmt: skip
        return True

    def abort(self) -> None:
        """Close at once, dropping what is unsent (a client that does not take it)."""
        self.stalled.pop(self, None)
        self.idle.pop(self, None)
        self.streams.pop(self, None)
        if self.writer is not None:
            self.writer.pending.clear()
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.idle.pop(self, None)
        self.stalled.pop(self, None)
        self.streams.pop(self, None)
        self._cancel_deadline()
        if self.writer is not None:
            self.writer.pending.clear()  # the answer's bytes go with the connection
        self.write_paused = False
        super().connection_lost(exc)

    def _cancel_deadline(self) -> None:
        self.deadline = 0.0

    def timed_out(self) -> None:
        """The sweeper's call: the deadline passed (`deadline` is already 0)."""
        if self._between:
            self._keep_alive_timed_out()
        elif self._drained >= 0:
            self.abort()  # the client neither closed nor stopped sending: it has had its time to read the answer
        elif self._in_body:
            self._body_timed_out()
        else:
            self._head_timed_out()

    # writing: answers handed on as the transport drains, and a deadline on what is not taken

    def pause_writing(self) -> None:
        self.write_paused = True
        self.flow.pause_writing()
        self.stalled.setdefault(self, self.loop.time())

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._drained < 0:
            self.stalled.pop(self, None)
        assert self.writer is not None
        self.writer.feed()
        if not self.write_paused and not self.writer.pending:
            self.flow.resume_writing()
            if self._between:  # its answer is out: waiting for the next request
                self.idle[self] = None

    def check_sending(self, now: float) -> None:
        """The sweeper's call for a connection with no deadline running: one holding unsent bytes must send
        `_SEND_PROGRESS` of them (or all) within `send_timeout`, else it is closed and its answer dropped."""
        assert self.writer is not None
        buffered = self.transport.get_write_buffer_size()
        if not buffered and not self.writer.pending:
            self._send_since = 0.0
            return
        sent = self.writer.written - buffered - _unacknowledged(self.transport)
        if not self._send_since or sent - self._send_mark >= _SEND_PROGRESS:
            self._send_since, self._send_mark = now, sent
        elif now - self._send_since >= self.limits.send_timeout:
            self.notices.warning("send_timeout", "closed a connection that took less than 64 KiB of its answer "
                                 "within %g s (CRANK_SEND_TIMEOUT)", self.limits.send_timeout)  # fmt: skip
            self.abort()

    def finish(self) -> None:
        """Close after an answer (uvicorn's `transport.close()`, through `_Writer`): at once when the request
        came whole; else its body is drained first (`_drain`), so that the client can read its answer."""
        if self._in_body and not self.transport.is_closing():
            self._drain()
        else:
            self.transport.close()

    def _drain(self) -> None:
        """Close after an answer written before the body came whole: the write side now (after what is unsent),
        then the rest when the client closes, or has sent `drain_bytes` more, or after `DRAIN_TIMEOUT`. What it
        sends meanwhile is counted and dropped, never parsed: its cost grows with the reads, not with its chunks."""
        self._in_body = False
        self._drained = 0
        self.deadline = self.loop.time() + min(DRAIN_TIMEOUT, self.limits.body_timeout)
        self.stalled.setdefault(self, self.loop.time())
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()

    def data_received(self, data: bytes) -> None:
        if self._drained >= 0:  # closing after a refusal: the body's rest is dropped, unparsed
            self._drained += len(data)
            if self._drained > self.limits.drain_bytes:
                self.abort()
            return
        # uvicorn's, but a head over the limit is a 431 rather than its 400 for any parser error.
        self.idle.pop(self, None)
        if self._between:  # the next request begins: the head's deadline follows (`on_message_begin`)
            self._between, self.deadline = False, 0.0
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Answered):
                return
            if not isinstance(exc.__context__, _HeadTooLarge):
                self._bad_request()
                return
            self.notices.warning("max_head_bytes", "refused a request head over %d bytes (CRANK_MAX_HEAD_BYTES)",
                                 self.limits.max_head_bytes)  # fmt: skip
            self._close_with(_HEAD_TOO_LARGE)
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            # An upgrade the protocol does not make (not WebSocket: `on_headers_complete` refused that): its
            # request is answered as a plain one, and nothing after it can be parsed: dropped, as after a refusal.
            self._drained = 0
        if self._early is not None:  # answered from its head, and its body has not come whole
            answer, self._early = self._early, None
            self._write_early(answer, keep_alive=False)

    def _bad_request(self) -> None:
        # uvicorn logs each one as a warning: throttled here, an attacker's garbage must not flood the log.
        self.notices.warning("bad_request", "refused a request that is not valid HTTP/1.1 (400)")
        self._cancel_deadline()
        self.send_400_response("Invalid HTTP request received.")

    def _close_with(self, answer: bytes) -> None:
        self._cancel_deadline()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app's receive() says so, and what it sends is dropped
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    # the head: one deadline from the connection's start or the request's first byte

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = self._extensions
        self._head_bytes = 0
        self._in_head = True
        if not self.deadline:
            self.deadline = self.loop.time() + self.limits.head_timeout

    # uvicorn's own `on_url` and `on_header` (its code, held to it by tests/wire/test_uvicorn_hooks.py), each with
    # the head's bytes counted.

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self.limits.max_head_bytes:
            raise _HeadTooLarge
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > self.limits.max_head_bytes:
            raise _HeadTooLarge
        name = name.lower()
        value = value.rstrip(b" \t")  # trailing whitespace is not part of a value (RFC 9110 §5.5); llhttp keeps it
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def _head_timed_out(self) -> None:
        self.idle.pop(self, None)
        self.notices.warning("head_timeout", "closed a connection that sent no complete request head within %g s "
                             "(CRANK_HEAD_TIMEOUT)", self.limits.head_timeout)  # fmt: skip
        if self._in_head:
            self._close_with(_HEAD_TIMEOUT)
        else:  # nothing was asked: nothing to answer
            self.transport.close()

    # the body: one deadline from the end of the head

    def on_headers_complete(self) -> None:
        # uvicorn's, with the scope computed once for the early answers and the app both, and the cycle made
        # positionally (keywords cost a third more) as a `_Cycle`, written through `_Writer`.
        self._in_head = False
        parser = self.parser
        if parser.should_upgrade() and self._refused_upgrade():
            return
        scope = self.scope
        method = parser.get_method()
        scope["method"] = method.decode("ascii")
        http_version = parser.get_http_version()
        if http_version != "1.1":
            scope["http_version"] = http_version
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii")  # not ASCII: the parser's callback fails, a 400 (as uvicorn's)
        plain = "%" not in path
        scope["path"] = self.root_path + (path if plain else urllib.parse.unquote(path))
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = url.query or b""
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        if not (plain and self.answer_early is not None and self.answers_now() and self._answered_early(keep_alive)):
            self._start_cycle(keep_alive)
        self.deadline, self._in_body = self.loop.time() + self.limits.body_timeout, True

    def _start_cycle(self, keep_alive: bool) -> None:
        """The app's answer to the request whose head came: its task starts now, or, behind an unanswered
        request, once that one is answered (`on_response_complete`)."""
        app = self.app
        if self.limit_concurrency is not None and (
            len(self.connections) >= self.limit_concurrency or len(self.tasks) >= self.limit_concurrency
        ):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        existing, self.cycle = self.cycle, self._cycle(
            self.scope, self.writer, self.flow, self.logger, self.access_logger, self.access_log,  # type: ignore[arg-type]
            self.server_state.default_headers, asyncio.Event(), self.expect_100_continue,
            False,  # until its body is whole, an answer closes the connection (a refusal: `finish`); given back then
            self.on_response_complete,
        )  # fmt: skip
        self._keep_alive = keep_alive and not self._upgrade
        if existing is None or existing.response_complete:
            self._start_asgi_task(self.cycle, app)
        else:  # pipelined: queued behind the unanswered one
            self.flow.pause_reading()
            self.pipeline.appendleft((self.cycle, app))

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # uvicorn's, with a task that takes itself out of `tasks` as it ends (`_served`) and a name of its own:
        # asyncio's "Task-N", formatted for each task, and a done callback, a turn of the loop for each, cost a
        # quarter of what a task costs (docs/benchmarks.md). A task factory, or contexts reset, get uvicorn's.
        loop = self.loop
        if loop.get_task_factory() is not None or getattr(self.config, "reset_contextvars", False):
            super()._start_asgi_task(cycle, app)
            return
        self.tasks.add(asyncio.Task(_served(cycle, app, self.tasks, loop), loop=loop, name=_TASK_NAME))

    def _refused_upgrade(self) -> bool:
        """An upgrade to WebSocket is refused (400, closed: raises `_Answered`); any other upgrade is served as a
        plain request (RFC 9110 §7.8 lets a server ignore it), and the connection is closed after it."""
        self._upgrade = True
        upgrade = next((value for name, value in self.headers if name == b"upgrade"), b"")
        if upgrade.strip().lower() != b"websocket":
            return False
        self.notices.warning("websocket", "refused an upgrade to WebSocket (400): MCP is served over HTTP POST")
        self._close_with(_NO_WEBSOCKET)
        raise _Answered

    def _unsupported_upgrade_warning(self) -> None:
        pass  # uvicorn logs two lines per upgrade it does not make: `_refused_upgrade` says what happens instead

    # early answers: written from the head, without an ASGI call (the app's `answer_early`)

    def _answered_early(self, keep_alive: bool) -> bool:
        """Ask the app for an early answer to the request whose head just came: True when it has one, which is
        written when the body has come whole (`on_message_complete`), or at the end of this read with the
        connection closing after it (`data_received`). Only for a request with nothing before it on the
        connection (an answer never overtakes another), while the client reads what it was sent (else the app's
        path and its backpressure: a client that never reads cannot make answers pile up), not HEAD (its answer
        has no body), no upgrade and no `Expect: 100-continue` (its client waits for a go-ahead before the body);
        the caller asks only for a path without percent-escapes (the app decodes those its own way). An app
        whose `answer_early` fails answers the request itself."""
        if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline or self.expect_100_continue:
            return False
        if self.flow.write_paused or self.scope["method"] == "HEAD" or self._upgrade:
            return False
        assert self.answer_early is not None
        try:
            answer = self.answer_early(self.scope)  # type: ignore[arg-type]
        except Exception:  # inside the parser's callback it would be a 400: the app answers, and the log says why
            logger.exception("an early answer failed; the app answers the request")
            return False
        if answer is None:
            return False
        cycle = RequestResponseCycle(
            scope=self.scope, transport=self.writer, flow=self.flow, logger=self.logger,  # type: ignore[arg-type]
            access_logger=self.access_logger, access_log=False, default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(), expect_100_continue=False, keep_alive=keep_alive,
            on_response=self.on_response_complete,
        )  # fmt: skip
        cycle.response_started = cycle.response_complete = True  # on_body and on_message_complete drop the body
        self.cycle, self._early = cycle, answer
        return True

    def _write_early(self, answer: EarlyAnswer, *, keep_alive: bool) -> None:
        """Write a whole answer as uvicorn writes an app's, and leave the connection as an answered request
        does: kept for the next request, or closing (`finish`: the body drained first when it has not come)."""
        status, headers, body = answer
        keep_alive = keep_alive and self.cycle.keep_alive
        content = [STATUS_LINE[status]]
        for name, value in (*self.server_state.default_headers, (b"content-length", b"%d" % len(body)), *headers):
            content += (name, b": ", value, b"\r\n")
        if not keep_alive:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", body)
        assert self.writer is not None
        self.writer.write(b"".join(content))
        if not keep_alive:
            self.writer.close()
        self.on_response_complete()

    def on_message_complete(self) -> None:
        self.deadline, self._in_body = 0.0, False
        cycle = self.cycle
        if self._early is not None:  # its body came whole: answered, and the connection goes on
            answer, self._early = self._early, None
            self._write_early(answer, keep_alive=True)
            return
        if cycle is not None and not cycle.response_started:
            cycle.keep_alive = self._keep_alive
        super().on_message_complete()

    def _body_timed_out(self) -> None:
        self._in_body = False
        self.notices.warning("body_timeout", "closed a connection whose request body was not complete within %g s "
                             "(CRANK_BODY_TIMEOUT)", self.limits.body_timeout)  # fmt: skip
        answered = self.cycle is not None and self.cycle.response_started
        self._close_with(b"" if answered else _BODY_TIMEOUT)

    # between requests

    def on_response_complete(self) -> None:
        # uvicorn's, with the keep-alive wait a deadline of the sweep instead of a timer of its own per answer.
        self.server_state.total_requests += 1
        if self.streams:
            self.streams.pop(self, None)
        if self._drained >= 0 or self.transport.is_closing():  # closing: no next request on this connection
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._between, self.deadline = True, self.loop.time() + self.timeout_keep_alive
        if not self.write_paused:  # (a connection whose answer is still going out is stalled, not idle)
            self.idle[self] = None

    def _keep_alive_timed_out(self) -> None:
        assert self.writer is not None
        if self.writer.pending:  # the last answer is still going out: idle only from its end (else it is cut)
            self.deadline = self.loop.time() + self.timeout_keep_alive
            return
        self._between = False
        self.idle.pop(self, None)
        if not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: a connection between requests closes once its last answer is out."""
        if self.cycle is None or self.cycle.response_complete:
            assert self.writer is not None
            self.writer.close()
        else:
            self.cycle.keep_alive = self._keep_alive = False  # (not given back when the body comes whole)
