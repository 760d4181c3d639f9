"""The listening socket of `crank serve` and `crank demo`: bound before anything is printed, so that a busy
port is one clear message instead of a banner followed by uvicorn's traceback, and then handed to uvicorn
(no second bind, so nothing can take the port in between).

What a connection may cost is bounded (`ConnectionLimits`), because uvicorn alone bounds none of it: a
connection that never sends a request, or sends half a head, or a body a byte a minute, is kept open
for ever, and enough of them exhaust the process's file descriptors so that nobody is answered.
`crank.wire.protocol.CrankHTTPProtocol` (uvicorn's httptools protocol with deadlines) closes them:

- a request head must be complete `head_timeout` seconds after the connection opened or after the
  request's first byte (408 if part of a head came, else closed without a word), and at most
  `max_head_bytes` long (431; llhttp itself sets no limit);
- a request body must be complete `body_timeout` seconds after its head (408, the app sees a disconnect);
- a keep-alive connection idle `keepalive_timeout` seconds between requests is closed (uvicorn's timer);
- an answer must be taken: a connection holding unsent bytes that sends fewer than 64 KiB of them (or not all
  of them, when fewer are left) within `send_timeout` seconds is closed, its answer dropped; and what a
  connection holds unsent is bounded (an answer is handed to the kernel 64 KiB at a time, as it drains);
- an answer written before its request's body has come whole (a refusal: 401, 413, 429) closes the
  connection: at most `drain_bytes` more of the body are read and dropped, unparsed, for at most
  `DRAIN_TIMEOUT` seconds, so that the client can read its answer, and then it is closed;
- at most `max_connections` connections are open: one more closes the connection idle the longest
  (waiting for a request's first byte), else the one stalled the longest (its answer untaken, or closing
  after a refusal), or when there is none, is answered 503 and closed at once;
- an upgrade to WebSocket is answered 400 (WebSockets are not part of MCP) and closed.

Each limit hit is logged, at most once per 10 s and kind with the count since (`ThrottledLog`).
"""

from __future__ import annotations

import errno
import logging
import resource
import socket
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from crank.exceptions import SettingsError
from crank.wire.asgi import EarlyAnswers, EarlyAnswersNow

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_BYTES",
    "DEFAULT_LISTEN",
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_KEEPALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEAD_BYTES",
    "DEFAULT_SEND_TIMEOUT",
    "DRAIN_TIMEOUT",
    "ConnectionLimits",
    "bind_listener",
    "serve_on",
]

logger = logging.getLogger("crank.server")

DEFAULT_LISTEN = "127.0.0.1:8000"
"""Where `crank serve` listens unless told otherwise (`CRANK_LISTEN`, `--listen`)."""
DEFAULT_HEAD_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_KEEPALIVE_TIMEOUT = 5.0  # uvicorn's default
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_HEAD_BYTES = 64 * 1024
DEFAULT_SEND_TIMEOUT = 30.0
"""Seconds a connection may hold unsent bytes without sending 64 KiB of them (or the rest): about 2 KiB/s at
least, as nginx's `send_timeout` (60 s between two writes) asks of a client."""
DEFAULT_DRAIN_BYTES = 64 * 1024
"""The most of a refused request's body read (and dropped) before its connection is closed."""
DRAIN_TIMEOUT = 5.0
"""Seconds a connection closing after a refusal waits for its client to close (nginx's `lingering_timeout`)."""
_FD_SHARE = 2  # at most half the file descriptors for client connections: upstreams, registry and logs need theirs


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one client connection may cost `crank serve` (settings `CRANK_HEAD_TIMEOUT`, `CRANK_BODY_TIMEOUT`,
    `CRANK_KEEPALIVE_TIMEOUT`, `CRANK_SEND_TIMEOUT`, `CRANK_MAX_CONNECTIONS`, `CRANK_MAX_HEAD_BYTES`;
    `drain_bytes` is `DEFAULT_DRAIN_BYTES`, or the body limit when that is less)."""

    head_timeout: float = DEFAULT_HEAD_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    drain_bytes: int = DEFAULT_DRAIN_BYTES

    def within_file_limit(self) -> ConnectionLimits:
        """These limits with `max_connections` lowered to half the process's file descriptors (`ulimit -n`),
        when that is fewer: past it, accepting fails and nobody is answered."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        most = max(soft // _FD_SHARE, 1) if soft != resource.RLIM_INFINITY else self.max_connections
        if most >= self.max_connections:
            return self
        logger.warning("at most %d client connections (CRANK_MAX_CONNECTIONS is %d): half of the %d file "
                       "descriptors this process may open (ulimit -n)", most, self.max_connections, soft)  # fmt: skip
        return replace(self, max_connections=most)


_BACKLOG = 2048  # uvicorn's default


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a `SettingsError` that says why not and how to choose another."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]  # fmt: skip
    except socket.gaierror as exc:
        raise SettingsError(f"cannot listen on {shown}: unknown host ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        # As asyncio's create_server does on POSIX: a port left in TIME_WAIT by the last run is free, one that
        # another process listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise SettingsError(
            f"cannot listen on {shown}: {why}. Choose another address with --listen HOST:PORT "
            "(or CRANK_LISTEN; `make run LISTEN=HOST:PORT`)"
        ) from None
    return sock


def serve_on(
    app: Any,
    sock: socket.socket,
    limits: ConnectionLimits | None = None,
    *,
    answer_early: EarlyAnswers | None = None,
    answers_early_now: EarlyAnswersNow | None = None,
    stopping: Callable[[], None] | None = None,
    trusted_proxies: str = "",
    **options: Any,
) -> None:
    """Run `app` with uvicorn on an already listening socket until it is stopped (Ctrl+C), each connection
    bounded by `limits` (the defaults when None); `answer_early`: the app's early answers, which the protocol
    writes without calling the app (`crank.wire.asgi.EarlyAnswers`), asked only while `answers_early_now` says
    it may answer anything (`crank.wire.asgi.EarlyAnswersNow`; None: always); `stopping`: called when the server
    stops taking connections, before it waits for the open ones to close (to end streams that never would);
    `trusted_proxies`: the addresses or networks (comma-separated, `CRANK_TRUSTED_PROXIES`) of reverse proxies whose
    `X-Forwarded-For` and `X-Forwarded-Proto` name the client and its scheme (uvicorn's proxy headers); none: the
    peer is the client."""
    import uvicorn

    from crank.wire.protocol import protocol_for  # uvicorn's modules: imported only to serve
    from crank.wire.workers import beat

    class Server(uvicorn.Server):
        async def on_tick(self, counter: int) -> bool:
            beat()  # a worker's heartbeat to its supervisor (crank.wire.workers): its event loop turns
            return await super().on_tick(counter)

        async def shutdown(self, sockets: Any = None) -> None:
            if stopping is not None:  # before uvicorn waits for every connection to close
                stopping()
            await super().shutdown(sockets)

    limits = (limits or ConnectionLimits()).within_file_limit()
    host, port = sock.getsockname()[:2]
    protocol = protocol_for(limits, answer_early, answers_early_now)
    # ws="none": no WebSocket (not part of MCP); the protocol answers an upgrade to one with 400.
    # Proxy headers only from trusted proxies (the per-address budgets and limits, crank.wire.budgets, read the
    # client's address): uvicorn's rewriting of them costs every request a wrapper, so none when there is no proxy.
    # server_header=False: no `server: uvicorn`.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, http=protocol, ws="none",
                            proxy_headers=bool(trusted_proxies), forwarded_allow_ips=trusted_proxies or None,
                            server_header=False,
                            timeout_keep_alive=limits.keepalive_timeout,  # type: ignore[arg-type]
                            **options)  # fmt: skip
    Server(config).run(sockets=[sock])
