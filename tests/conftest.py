from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from crank.gateway.egress import ALLOW_VARIABLE, LOOPBACK
from crank.registry import Registry, migrate, open_engine
from crank.types import ASGIApp
from tests import services

# tests/cluster.py: `start_cluster` and `cluster_database`, several `crank serve` processes behind nginx.
pytest_plugins = ["tests.cluster"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def loopback_egress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's one egress allowance: its upstreams are real servers on loopback, which the egress policy
    refuses by default (crank.gateway.egress). Loopback only: private, link-local and the other ranges stay
    refused, and so does a gateway's own listening port. The egress tests set their own policy."""
    monkeypatch.setenv(ALLOW_VARIABLE, ",".join(LOOPBACK))


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # running in a thread: leave signals to pytest
        pass


@contextlib.contextmanager
def serving() -> Iterator[Callable[..., str]]:
    """Serve ASGI apps over real HTTP on free loopback ports until the block ends (`serve` for one test; a
    module's fixture can share servers between its tests)."""
    servers: list[tuple[_Server, threading.Thread]] = []

    def start(app: ASGIApp, host: str = "127.0.0.1", port: int = 0, http: Any = "auto", **options: Any) -> str:
        """`http`: uvicorn's HTTP protocol, or a class (`crank.wire.protocol.protocol_for`); `options`: more of
        uvicorn's settings (`timeout_keep_alive`, say)."""
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="auto", access_log=False, http=http, **options)
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

    try:
        yield start
    finally:
        for server, thread in servers:
            server.should_exit = True
            thread.join(timeout=10)


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Serve an ASGI app over real HTTP on a free loopback port; returns its base URL."""
    with serving() as start:
        yield start


POSTGRES_URL_VARIABLE = "CRANK_TEST_POSTGRES_URL"
REDIS_URL_VARIABLE = "CRANK_TEST_REDIS_URL"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the whole session, as an admin URL (postgresql://user@host:port/dbname) whose
    user may create databases: $CRANK_TEST_POSTGRES_URL if set, else a throwaway cluster started here."""
    configured = os.environ.get(POSTGRES_URL_VARIABLE)
    if configured:
        yield configured
        return
    with services.start_postgres() as server:
        yield server.url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server for the whole session (redis://host:port/db): $CRANK_TEST_REDIS_URL if set, else a
    throwaway redis-server started here. Tests share it: each keeps to a key prefix of its own."""
    configured = os.environ.get(REDIS_URL_VARIABLE)
    if configured:
        yield configured
        return
    with services.start_redis() as server:
        yield server.url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind: nothing depends on what an earlier run left behind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.sqlite3'}"
        return
    with services.fresh_database(request.getfixturevalue("postgres_url"), "crank_test") as (url, _):
        yield url


@pytest.fixture
def sqlite_registry(tmp_path: Path) -> Iterator[Registry]:
    """A new, migrated SQLite registry of the test's own (for tests that need no PostgreSQL run)."""
    engine = open_engine(f"sqlite:///{tmp_path / 'registry.sqlite3'}", pooled=False)
    migrate(engine)
    yield Registry(engine)
    engine.dispose()


@pytest.fixture
def registry(database_url: str) -> Iterator[Registry]:
    # Unpooled: a test's servers may still be finishing a poll when the database is dropped, and a pooled
    # connection left behind would be garbage-collected open.
    engine = open_engine(database_url, pooled=False)
    migrate(engine)
    yield Registry(engine)
    engine.dispose()
