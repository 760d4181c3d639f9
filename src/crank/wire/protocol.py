"""`CrankHTTPProtocol`: uvicorn's httptools protocol with the limits of `crank.wire.listen.ConnectionLimits`
(the module docstring of `crank.wire.listen` says which and why). It subclasses uvicorn's
`HttpToolsProtocol` and keeps its behaviour; tests/wire/test_listen.py runs it in a real `crank serve`, so
that a uvicorn upgrade that moves its hooks fails there."""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from crank import _json
from crank.wire.listen import ConnectionLimits, logger
from crank.wire.notices import ThrottledLog

__all__ = ["CrankHTTPProtocol", "protocol_for"]


def protocol_for(limits: ConnectionLimits) -> type[CrankHTTPProtocol]:
    """The protocol class of one server: its connections share the limits, the idle list and the log."""

    class Protocol(CrankHTTPProtocol):
        pass

    Protocol.limits, Protocol.idle, Protocol.notices = limits, {}, ThrottledLog(logger)
    return Protocol


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
    """uvicorn's httptools protocol with the timers and caps of `ConnectionLimits` (see the module's
    docstring). `protocol_for` makes the class a server uses, with its own limits and idle list."""

    limits: ConnectionLimits = ConnectionLimits()
    idle: dict[CrankHTTPProtocol, None]  # connections waiting for a request's first byte, the longest first
    notices: ThrottledLog

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
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
        self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)
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
        self._cancel_timers()
        super().connection_lost(exc)

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

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
        self._cancel_timers()
        self.send_400_response("Invalid HTTP request received.")

    def _close_with(self, answer: bytes) -> None:
        self._cancel_timers()
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
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.head_timeout, self._head_timed_out)

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
        self._head_timer = None
        self.idle.pop(self, None)
        self.notices.warning("head_timeout", "closed a connection that sent no complete request head within %g s "
                             "(CRANK_HEAD_TIMEOUT)", self.limits.head_timeout)  # fmt: skip
        if self._in_head:
            self._close_with(_HEAD_TIMEOUT)
        else:  # nothing was asked: nothing to answer
            self.transport.close()

    # the body: one deadline from the end of the head

    def on_headers_complete(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._in_head = False
        super().on_headers_complete()
        self._body_timer = self.loop.call_later(self.limits.body_timeout, self._body_timed_out)

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def _body_timed_out(self) -> None:
        self._body_timer = None
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
        self._cancel_timers()
        super().timeout_keep_alive_handler()
