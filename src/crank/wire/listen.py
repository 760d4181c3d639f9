"""The listening socket of `crank serve` and `crank demo`: bound before anything is printed, so that a busy
port is one clear message instead of a banner followed by uvicorn's traceback, and then handed to uvicorn
(no second bind, so nothing can take the port in between)."""

from __future__ import annotations

import errno
import socket
from typing import Any

from crank.exceptions import SettingsError

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


def serve_on(app: Any, sock: socket.socket, **options: Any) -> None:
    """Run `app` with uvicorn on an already listening socket until it is stopped (Ctrl+C)."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, **options)
    uvicorn.Server(config).run(sockets=[sock])
