"""`ConnectionLimits`: what one client connection may cost `crank serve`, and the defaults.

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

`crank.wire.protocol.CrankHTTPProtocol` enforces them; `crank.wire.listen` hands them to it.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass, replace

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_BYTES",
    "DEFAULT_HEAD_TIMEOUT",
    "DEFAULT_KEEPALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEAD_BYTES",
    "DEFAULT_SEND_TIMEOUT",
    "DRAIN_TIMEOUT",
    "ConnectionLimits",
]

logger = logging.getLogger("crank.server")

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
