"""Response streams: what a request's handler sends the client before its answer, in each era's rules.

A request is answered as JSON unless its handler emits something first (progress, a log message, a request to the
client): then the answer becomes an SSE stream (`ResponseStream`), opened at that first message with a priming
event (an id, `retry`, empty data) and `X-Accel-Buffering: no`, carrying the messages and then the answer.
Nothing is paid by a request that emits nothing: its `Channel` is made on first use.

- **2025-11-25**: progress for a request that sent a `progressToken`, log messages at or above the session's
  level (`logging/setLevel`, `crank.mcp.sessions`), and server requests (`elicitation/create`,
  `sampling/createMessage`) related to the request. The client answers a server request with a new POST; the
  process that holds the stream waits for it in `ServerRequests` (ids are unique per process and say which;
  with a `Relay`, an answer POST that reaches another replica is carried there). A closed stream is no cancel.
- **2026-07-28**: only that request's notifications, then its answer; log messages only when the request's
  `_meta` carries a level; no server requests (a handler that asks gets `input_required` instead,
  `crank.mcp.tools.CallContext.elicit`). Closing the stream cancels the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from crank import _json
from crank.exceptions import ClientRequestError, RequestTooLargeError
from crank.mcp.sessions import LogLevels, SessionIds, log_level_rank
from crank.types import JSONObject, Receive, Scope, Send
from crank.wire.auth import Principal

__all__ = [
    "DEFAULT_CLIENT_REQUEST_TIMEOUT",
    "DEFAULT_MAX_PENDING_REQUESTS",
    "LOG_LEVEL_META_KEY",
    "MAX_PENDING_PER_CALLER",
    "SSE_RETRY_MS",
    "Channel",
    "Relay",
    "RequestInfo",
    "ResponseStream",
    "ServerRequests",
    "StreamSettings",
    "owner_of",
]

logger = logging.getLogger("crank.mcp")

SSE_RETRY_MS: Final = 2000
"""The `retry` every stream announces in its priming event (milliseconds)."""
DEFAULT_CLIENT_REQUEST_TIMEOUT: Final = 300.0
"""Seconds a server request (a question to the user, a sampling request) waits for the client's answer."""
DEFAULT_MAX_PENDING_REQUESTS: Final = 1000
"""Server requests one process waits on at once; past it a handler's question is refused at once."""
MAX_PENDING_PER_CALLER: Final = 16
"""Questions one authenticated caller may have waiting at once: one caller cannot take every slot."""
LOG_LEVEL_META_KEY: Final = "io.modelcontextprotocol/logLevel"
_EVENT_STREAM = b"text/event-stream"
_RELAY_READY_TIMEOUT = 2.0


class Relay(Protocol):
    """Carries a client's answer to the process that asked, when another one got it (`crank.state.relay`)."""

    async def forward(self, process: str, payload: bytes) -> bool: ...

    async def listen(self, process: str, deliver: Callable[[bytes], None], ready: asyncio.Event) -> None: ...

    async def aclose(self) -> None: ...


class ServerRequests:
    """Requests this process sent to clients on response streams, each waiting for the POST that answers it.

    An id names the process that asked (`crank-<process>-<n>-<random>`): with a `relay`, an answer that
    reaches another process is carried to this one. The random part makes an id unguessable, and an answer
    counts only from the caller the question was asked of (`owner`, its `Principal.id`): nobody else can answer
    someone's question (accept someone's confirmation, say)."""

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING_REQUESTS, relay: Relay | None = None) -> None:
        self.max_pending = max_pending
        self.relay = relay
        self.process = secrets.token_hex(6)
        self._count = 0
        self._pending: dict[str, tuple[asyncio.Future[JSONObject], str]] = {}
        self._listening: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def open(self, owner: str = "") -> tuple[str, asyncio.Future[JSONObject]]:
        mine = sum(1 for _, asker in self._pending.values() if asker == owner) if owner else 0
        if len(self._pending) >= self.max_pending or mine >= MAX_PENDING_PER_CALLER:
            raise ClientRequestError(
                "Too many questions are waiting for clients' answers on this server.",
                error_code="client_requests_busy",
                recoverable=True,
                suggested_action="Retry the call in a moment.",
            )
        if self.relay is not None:
            await self._listen(self.relay)
        self._count += 1
        request_id = f"crank-{self.process}-{self._count}-{secrets.token_urlsafe(16)}"
        future: asyncio.Future[JSONObject] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (future, owner)
        return request_id, future

    def close(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    async def aclose(self) -> None:
        """Stop listening and close the relay's connections (at the server's shutdown)."""
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
            self._listening = None
        if self.relay is not None:
            await self.relay.aclose()

    async def answer(self, message: Mapping[str, Any], owner: str = "") -> bool:
        """Hand a client's response (from the caller `owner`) to the request waiting for it, here or (with a
        relay) in the process that asked; False when none is (an unknown id, one answered or given up already,
        another caller's)."""
        if self._resolve(message, owner):
            return True
        request_id = message.get("id")
        if self.relay is None or not isinstance(request_id, str) or not request_id.startswith("crank-"):
            return False
        process = request_id[len("crank-") :].partition("-")[0]
        if process == self.process:
            return False
        return await self.relay.forward(process, _json.dumps({"message": dict(message), "owner": owner}))

    def _resolve(self, message: Mapping[str, Any], owner: str) -> bool:
        request_id = message.get("id")
        waiting = self._pending.get(request_id) if isinstance(request_id, str) else None
        if waiting is None or waiting[0].done() or not secrets.compare_digest(waiting[1], owner):
            return False
        del self._pending[request_id]  # type: ignore[arg-type]
        waiting[0].set_result(dict(message))
        return True

    def _deliver(self, payload: bytes) -> None:
        try:
            relayed = _json.loads_bounded(payload)
        except (_json.JSONDecodeError, _json.JSONDepthError):
            return
        if isinstance(relayed, dict) and isinstance(relayed.get("message"), dict):
            self._resolve(relayed["message"], str(relayed.get("owner", "")))

    async def _listen(self, relay: Relay) -> None:
        """Listen on this process's channel from its first question on; wait (a little) until subscribed."""
        if self._listening is None or self._listening.done():
            self._ready.clear()
            self._listening = asyncio.create_task(relay.listen(self.process, self._deliver, self._ready))
        if not self._ready.is_set():
            with contextlib.suppress(TimeoutError):  # Redis away: answers that reach this process still count
                await asyncio.wait_for(self._ready.wait(), _RELAY_READY_TIMEOUT)


@dataclass(slots=True)
class StreamSettings:
    """An endpoint's settings and state for streams: one per endpoint, shared by its requests."""

    sessions: SessionIds = field(default_factory=SessionIds)
    log_levels: LogLevels = field(default_factory=LogLevels)
    requests: ServerRequests = field(default_factory=ServerRequests)
    client_request_timeout: float = DEFAULT_CLIENT_REQUEST_TIMEOUT


@dataclass(slots=True)
class RequestInfo:
    """What the transport learned from the HTTP request, beyond the JSON-RPC body."""

    headers: Mapping[str, str] = field(default_factory=dict)
    format_query: str | None = None
    caller: Principal | None = None
    """Who calls (`scope["crank.auth"]`, a `Principal`); passed on to each call's `CallContext`."""
    send: Send | None = None
    """The response's ASGI `send`, when the request may be answered as a stream (a single request over HTTP)."""
    receive: Receive | None = None
    settings: StreamSettings | None = None
    stream: ResponseStream | None = None
    """The SSE stream, once a handler opened one: the transport then ends it with the answer."""
    scope: Scope | None = None
    """The request's ASGI scope (the client's address, for those who need it: `subscriptions/listen`)."""

    def accepts_stream(self) -> bool:
        return self.send is not None and "text/event-stream" in self.headers.get("accept", "")


class ResponseStream:
    """An SSE answer to one POST: opened by its first message, closed by the answer."""

    def __init__(self, send: Send, receive: Receive | None, *, cancel_on_close: bool) -> None:
        self._send = send
        self._receive = receive
        self._cancel_on_close = cancel_on_close
        self.prefix = secrets.token_hex(8)
        """What each event id starts with (`{prefix}-{n}`): random, or what a stream wants a resuming client to
        send back in `Last-Event-ID` (the list-change stream's fingerprints)."""
        self._count = 0
        self._watcher: asyncio.Task[None] | None = None
        self.closed_by_client = False

    async def open(self) -> None:
        head = [
            (b"content-type", _EVENT_STREAM),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await self._send({"type": "http.response.start", "status": 200, "headers": head})
        priming = b"id: %s\nretry: %d\ndata: \n\n" % (self._next_id(), SSE_RETRY_MS)
        await self._send({"type": "http.response.body", "body": priming, "more_body": True})
        if self._cancel_on_close and self._receive is not None:
            self._watcher = asyncio.create_task(self._watch(self._receive, asyncio.current_task()))

    async def message(self, body: bytes) -> None:
        event = b"id: %s\ndata: %s\n\n" % (self._next_id(), body)
        await self._send({"type": "http.response.body", "body": event, "more_body": True})

    async def comment(self) -> None:
        """An SSE comment: keeps an idle stream alive through proxies, and finds a client that left."""
        await self._send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})

    async def finish(self, body: bytes | None) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        if body is not None:
            await self.message(body)
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    def _next_id(self) -> bytes:
        self._count += 1
        return f"{self.prefix}-{self._count}".encode()

    async def _watch(self, receive: Receive, task: asyncio.Task[Any] | None) -> None:
        """2026-07-28: the client closing the stream cancels the call. A client that sends more body than the limit
        (`RequestTooLargeError` from the counted `receive`) has left the exchange as surely as one that closed it."""
        while True:
            try:
                message = await receive()
            except RequestTooLargeError:
                message = {"type": "http.disconnect"}
            if message["type"] == "http.disconnect":
                self.closed_by_client = True
                if task is not None:
                    task.cancel()
                return


def owner_of(caller: Principal | None) -> str:
    """Whose question it is: the caller's `Principal.id` (every authenticated request has one), else ""."""
    owner = getattr(caller, "id", "")
    return owner if isinstance(owner, str) else ""


class Channel:
    """What one request's handler may send its client: made on first use by `CallContext`."""

    __slots__ = ("_info", "_modern", "_progress_token", "_log_rank", "_asked")

    def __init__(self, info: RequestInfo, params: JSONObject, *, modern: bool, logging: bool) -> None:
        self._info = info
        self._modern = modern
        self._asked = 0
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        token = meta.get("progressToken")
        self._progress_token = token if isinstance(token, str | int) and not isinstance(token, bool) else None
        self._log_rank: int | None = None
        if not logging:
            pass
        elif modern:
            level = meta.get(LOG_LEVEL_META_KEY)
            self._log_rank = log_level_rank(level, f"_meta.{LOG_LEVEL_META_KEY}") if level is not None else None
        elif info.settings is not None:
            session = info.settings.sessions.verified(info.headers.get("mcp-session-id"))
            self._log_rank = info.settings.log_levels.rank(session)

    @property
    def progress_token(self) -> str | int | None:
        return self._progress_token

    def session_capabilities(self) -> frozenset[str] | None:
        """2025-11-25: what the client declared at `initialize`, from its signed session id; None without one
        (a catalog that hands out none, or an id this server did not sign): then nobody knows."""
        settings, session = self._info.settings, self._info.headers.get("mcp-session-id")
        if settings is None or settings.sessions.verified(session) is None:
            return None
        return settings.sessions.capabilities(session)

    def can_stream(self) -> bool:
        return self._info.accepts_stream()

    def asked(self) -> int:
        """How many questions the call asked before this one (2026-07-28 answers are keyed by it)."""
        self._asked += 1
        return self._asked - 1

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self._progress_token is None:
            return
        params: JSONObject = {"progressToken": self._progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)

    async def log(self, level: str, data: Any, logger_name: str | None) -> None:
        rank = log_level_rank(level, "the log level")
        if self._log_rank is None or rank < self._log_rank:
            return
        params: JSONObject = {"level": level, "data": data}
        if logger_name is not None:
            params["logger"] = logger_name
        await self.notify("notifications/message", params)

    async def notify(self, method: str, params: JSONObject) -> None:
        stream = await self._stream()
        if stream is not None:
            await stream.message(_json.dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    async def request(self, method: str, params: JSONObject, timeout: float | None = None) -> JSONObject:
        """Send a server request on the stream and wait for the client's answer (2025-11-25 only)."""
        settings = self._info.settings
        stream = await self._stream()
        if self._modern or stream is None or settings is None:
            raise ClientRequestError(
                f"This request cannot carry {method}: the client must accept an event stream.",
                error_code="client_request_unavailable",
                suggested_action="Call from a client that accepts text/event-stream answers.",
            )
        request_id, future = await settings.requests.open(owner_of(self._info.caller))
        timeout = settings.client_request_timeout if timeout is None else timeout
        try:
            await stream.message(_json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}))
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise ClientRequestError(
                f"The client did not answer {method} within {timeout:g} s.",
                error_code="client_request_timeout",
                recoverable=True,
            ) from None
        finally:
            settings.requests.close(request_id)
        error = answer.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else None
            raise ClientRequestError(
                f"The client refused {method}: {message or error}", error_code="client_request_refused"
            )
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    async def _stream(self) -> ResponseStream | None:
        info = self._info
        if info.stream is None:
            if not info.accepts_stream() or info.send is None:
                return None
            info.stream = ResponseStream(info.send, info.receive, cancel_on_close=self._modern)
            await info.stream.open()
        return info.stream
