"""The listening socket of `crank serve` and `crank demo`: bound before anything is printed, so that a busy
port is one clear message instead of a banner followed by uvicorn's traceback, and then handed to uvicorn
(no second bind, so nothing can take the port in between).

What a connection may cost is bounded by `crank.wire.connection_limits.ConnectionLimits` (its module says which
limits and why), which `crank.wire.protocol.CrankHTTPProtocol` enforces.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from typing import Any

from crank.exceptions import SettingsError
from crank.wire.asgi import EarlyAnswers, EarlyAnswersNow
from crank.wire.connection_limits import ConnectionLimits

__all__ = ["DEFAULT_LISTEN", "bind_listener", "serve_on"]

DEFAULT_LISTEN = "127.0.0.1:8000"
"""Where `crank serve` listens unless told otherwise (`CRANK_LISTEN`, `--listen`)."""


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
