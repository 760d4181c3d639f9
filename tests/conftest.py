from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import uvicorn

from crank.types import ASGIApp


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # running in a thread: leave signals to pytest
        pass


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Serve an ASGI app over real HTTP on a free loopback port; returns its base URL."""
    servers: list[tuple[_Server, threading.Thread]] = []

    def start(app: ASGIApp, host: str = "127.0.0.1") -> str:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        server = _Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        servers.append((server, thread))
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)
