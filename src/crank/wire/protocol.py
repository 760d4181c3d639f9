"""`CrankHTTPProtocol`: uvicorn's httptools protocol with the limits of `crank.wire.listen.ConnectionLimits`
(the module docstring of `crank.wire.listen` says which and why) and the app's early answers
(`crank.wire.asgi.EarlyAnswers`, docs/architecture.md). It subclasses uvicorn's
`HttpToolsProtocol` and keeps its behaviour; tests/wire/test_listen.py runs it in a real `crank serve`, so
that a uvicorn upgrade that moves its hooks fails there."""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from crank import _json
from crank.wire.asgi import EarlyAnswer, EarlyAnswers
from crank.wire.listen import ConnectionLimits, logger
from crank.wire.notices import ThrottledLog

__all__ = ["CrankHTTPProtocol", "protocol_for"]


def protocol_for(limits: ConnectionLimits, answer_early: EarlyAnswers | None = None) -> type[CrankHTTPProtocol]:
    """The protocol class of one server: its connections share the limits, the idle list and the log, and
    the app's early answers (`crank.wire.asgi.EarlyAnswers`), if it has any."""

    class Protocol(CrankHTTPProtocol):
        pass

    Protocol.limits, Protocol.idle, Protocol.notices = limits, {}, ThrottledLog(logger)
    interval = max(_SWEEP_MIN_INTERVAL, min(_SWEEP_INTERVAL, limits.head_timeout / 4, limits.body_timeout / 4))
    Protocol.sweeper = _Sweeper(interval)
    Protocol.answer_early = staticmethod(answer_early) if answer_early is not None else None
    return Protocol


_SWEEP_INTERVAL = 0.5  # seconds: a deadline is noticed this late at most (less for timeouts under 2 s)
_SWEEP_MIN_INTERVAL = 0.01  # however small a timeout: the sweep never runs more than 100 times a second


class _Sweeper:
    """One server's deadlines, checked by one timer every `interval` seconds: a timer per request (two
    `call_later` and their `cancel`) cost about 4 µs of each request's CPU (docs/benchmarks.md, "The cost of one
    refusal"), a sweep costs a comparison per open connection and interval. Runs while the server has
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
            deadline = getattr(connection, "deadline", 0.0)
            if deadline and deadline <= now:
                connection.deadline = 0.0
                try:
                    connection.timed_out()
                except Exception:  # pragma: no cover - closing a transport does not raise; logged if it does
                    logger.exception("closing a connection past its deadline failed")


class _HeadTooLarge(Exception):
    """Raised in a parser callback: the head passed `max_head_bytes`."""


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


class CrankHTTPProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and caps of `ConnectionLimits` (see the module's
    docstring). `protocol_for` makes the class a server uses, with its own limits and idle list."""

    limits: ConnectionLimits = ConnectionLimits()
    idle: dict[CrankHTTPProtocol, None]  # connections waiting for a request's first byte, the longest first
    notices: ThrottledLog
    sweeper: _Sweeper
    answer_early: EarlyAnswers | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = 0.0  # loop time by which the head (or the body) must be complete; 0: none running
        self._in_body = False  # the deadline is the body's
        self._head_bytes = 0
        self._in_head = False  # part of a request head has come

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._make_room():
            self.notices.warning("max_connections", "refused a connection: %d connections are open, none idle "
                                 "(CRANK_MAX_CONNECTIONS)", self.limits.max_connections)  # fmt: skip
            transport.write(_TOO_MANY)
            transport.close()
            return
        self.deadline = self.loop.time() + self.limits.head_timeout
        self.sweeper.start(self.loop, self.connections)
        self.idle[self] = None

    def _make_room(self) -> bool:
        """Close the connection idle the longest, if any: it costs its client a reconnect, nothing more."""
        oldest = next(iter(self.idle), None)
        if oldest is None:
            return False
        del self.idle[oldest]
        oldest.transport.close()
        self.notices.warning("max_connections_idle", "closed the connection idle the longest: %d connections are "
                             "open (CRANK_MAX_CONNECTIONS)", self.limits.max_connections)  # fmt: skip
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.idle.pop(self, None)
        self._cancel_deadline()
        super().connection_lost(exc)

    def _cancel_deadline(self) -> None:
        self.deadline = 0.0

    def timed_out(self) -> None:
        """The sweeper's call: the deadline passed (`deadline` is already 0)."""
        if self._in_body:
            self._body_timed_out()
        else:
            self._head_timed_out()

    def data_received(self, data: bytes) -> None:
        # uvicorn's, but a head over the limit is a 431 rather than its 400 for any parser error.
        self.idle.pop(self, None)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, _HeadTooLarge):
                self._bad_request()
                return
            self.notices.warning("max_head_bytes", "refused a request head over %d bytes (CRANK_MAX_HEAD_BYTES)",
                                 self.limits.max_head_bytes)  # fmt: skip
            self._close_with(_HEAD_TOO_LARGE)
        except httptools.HttpParserError:
            self._bad_request()
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

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
        self._head_bytes = 0
        self._in_head = True
        if not self.deadline:
            self.deadline = self.loop.time() + self.limits.head_timeout

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_head_bytes:
            raise _HeadTooLarge

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
        self._in_head = False
        if self.answer_early is None or not self._answered_early():
            super().on_headers_complete()
        self.deadline, self._in_body = self.loop.time() + self.limits.body_timeout, True

    # early answers: written from the head, without an ASGI call (the app's `answer_early`)

    def _answered_early(self) -> bool:
        """Ask the app for an early answer to the request whose head just came, and write it: True when it was
        answered. Only for a request with nothing before it on the connection (an answer never overtakes
        another), while the client reads what it was sent (else the app's path and its backpressure: a client
        that never reads cannot make answers pile up), not HEAD (its answer has no body), no upgrade, no
        `Expect: 100-continue` (its client waits for a go-ahead before the body) and a plain ASCII path
        (uvicorn decodes the rest its own way). An app whose `answer_early` fails answers the request itself."""
        if (self.cycle is not None and not self.cycle.response_complete) or self.pipeline or self.expect_100_continue:
            return False
        method = self.parser.get_method()
        if self.flow.write_paused or method == b"HEAD" or self.parser.should_upgrade():
            return False
        url = httptools.parse_url(self.url)
        if b"%" in url.path or not url.path.isascii():
            return False
        scope = self.scope
        scope["method"] = method.decode("ascii")
        scope["path"] = self.root_path + url.path.decode("ascii")
        scope["raw_path"] = self.root_path.encode("ascii") + url.path
        scope["query_string"] = url.query or b""
        assert self.answer_early is not None
        try:
            answer = self.answer_early(scope)  # type: ignore[arg-type]
        except Exception:  # inside the parser's callback it would be a 400: the app answers, and the log says why
            logger.exception("an early answer failed; the app answers the request")
            return False
        if answer is None:
            return False
        self._write_early(answer)
        return True

    def _write_early(self, answer: EarlyAnswer) -> None:
        """Write a whole answer as uvicorn writes an app's, and leave the connection as an answered request
        does: the rest of the body is read and dropped, the next request waits for it."""
        status, headers, body = answer
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        cycle = RequestResponseCycle(
            scope=self.scope, transport=self.transport, flow=self.flow, logger=self.logger,
            access_logger=self.access_logger, access_log=False, default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(), expect_100_continue=False, keep_alive=keep_alive,
            on_response=self.on_response_complete,
        )  # fmt: skip
        cycle.response_started = cycle.response_complete = True  # on_body and on_message_complete drop the body
        self.cycle = cycle
        content = [STATUS_LINE[status]]
        for name, value in (*self.server_state.default_headers, (b"content-length", b"%d" % len(body)), *headers):
            content += (name, b": ", value, b"\r\n")
        if not keep_alive:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", body)
        self.transport.write(b"".join(content))
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()

    def on_message_complete(self) -> None:
        self.deadline, self._in_body = 0.0, False
        super().on_message_complete()
        # A request answered before its body came whole (early, or refused by the app unread) went idle when
        # answered, and the body's bytes then took it out of the idle list and stopped its keep-alive timer:
        # waiting for the next request from here, it needs both again, or a silent client keeps it for ever.
        cycle = self.cycle
        if (
            cycle is not None
            and cycle.response_complete
            and not self.pipeline
            and self.timeout_keep_alive_task is None
            and not self.transport.is_closing()
        ):
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )
            self.idle[self] = None

    def _body_timed_out(self) -> None:
        self._in_body = False
        self.notices.warning("body_timeout", "closed a connection whose request body was not complete within %g s "
                             "(CRANK_BODY_TIMEOUT)", self.limits.body_timeout)  # fmt: skip
        answered = self.cycle is not None and self.cycle.response_started
        self._close_with(b"" if answered else _BODY_TIMEOUT)

    # between requests

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # waiting for the next request
            self.idle[self] = None

    def timeout_keep_alive_handler(self) -> None:
        self.idle.pop(self, None)
        self._cancel_deadline()
        super().timeout_keep_alive_handler()
