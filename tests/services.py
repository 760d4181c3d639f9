"""Throwaway PostgreSQL and Redis servers for the tests, started from the installed binaries.

Each server listens on a free port on 127.0.0.1 only and keeps its data in a temporary directory of its own,
removed by `destroy()`. `stop()` and `start()` may be called any number of times in between: the server comes
back on the same port with the same data (PostgreSQL) or empty (Redis), which is what a test that takes a
service away and brings it back needs.

    with start_redis() as redis:          # or: redis = start_redis(); ...; redis.destroy()
        use(redis.url)
        redis.stop(); redis.start()

`scripts/install` puts the binaries in place from Debian's packages (`postgresql`, `redis-server`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from sqlalchemy.engine import make_url

PG_BIN_DIRS = "/usr/lib/postgresql"  # Debian keeps each major version's programs in /usr/lib/postgresql/N/bin
HOST = "127.0.0.1"


class ServiceError(RuntimeError):
    """A server could not be found, started or stopped."""


def free_port(host: str = HOST) -> int:
    """A TCP port that nothing listens on right now (the caller should still be ready to lose a race for it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_answers(url: str, process: subprocess.Popen[Any], *, timeout: float = 60, note: str = "") -> None:
    """Until `url` answers HTTP at all; fails (with `note`) when `process` ends first or `timeout` seconds pass."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            assert process.poll() is None and time.monotonic() < deadline, note
            time.sleep(0.1)


def postgres_program(name: str) -> str:
    """The path of a PostgreSQL server program (initdb, pg_ctl): the newest /usr/lib/postgresql/N/bin, else PATH."""
    versions = [p for p in Path(PG_BIN_DIRS).glob("*/bin") if p.parent.name.isdigit() and (p / name).is_file()]
    if versions:
        return str(max(versions, key=lambda p: int(p.parent.name)) / name)
    found = shutil.which(name)
    if found is None:
        raise ServiceError(f"{name} not found under {PG_BIN_DIRS}/*/bin or on PATH: run scripts/install")
    return found


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class _Server:
    """What both servers share: a directory of their own, deleted with them, and use as a context manager."""

    root: Path

    def _halt(self) -> None:
        raise NotImplementedError

    def destroy(self) -> None:
        """Stop the server if it runs and delete its data."""
        try:
            self._halt()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.destroy()


class PostgresServer(_Server):
    """A PostgreSQL cluster of its own: superuser `postgres`, trust authentication, TCP on 127.0.0.1 only,
    its Unix socket in its own directory, fsync off. Built by `start_postgres()`."""

    def __init__(self, root: Path, port: int, user: str | None) -> None:
        self.root = root  # holds data/, server.log and the socket
        self.port = port
        self._as_user = ["runuser", "-u", user, "--"] if user else []

    @property
    def url(self) -> str:
        """The maintenance database of the cluster, as a URL psycopg and SQLAlchemy both accept."""
        return f"postgresql://postgres@{HOST}:{self.port}/postgres"

    @property
    def running(self) -> bool:
        return self._pg_ctl("status").returncode == 0

    def _run(self, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        # Output to a file, not a pipe: the server that pg_ctl leaves running must not hold our pipe open.
        with (self.root / "commands.log").open("a") as out:
            return subprocess.run(
                [*self._as_user, *command], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                timeout=timeout, check=False,
            )  # fmt: skip

    def _fail(self, what: str) -> ServiceError:
        log = _tail(self.root / "commands.log") + "\n" + _tail(self.root / "server.log")
        return ServiceError(f"PostgreSQL in {self.root}: {what}\n{log}")

    def _pg_ctl(self, action: str, *options: str) -> subprocess.CompletedProcess[bytes]:
        wait = ("--wait", "--timeout", "60") if action in ("start", "stop") else ()
        return self._run(postgres_program("pg_ctl"), action, "--pgdata", str(self.root / "data"), *wait, *options)

    def init(self) -> None:
        data = self.root / "data"
        done = self._run(postgres_program("initdb"), "--pgdata", str(data), "--username", "postgres",
                         "--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-sync")  # fmt: skip
        if done.returncode != 0:
            raise self._fail("initdb failed")
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '{HOST}'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            )

    def start(self) -> None:
        """Start the server (on its port, with its data) and wait until it accepts connections."""
        if self.running:
            return
        done = self._pg_ctl("start", "--log", str(self.root / "server.log"), "-o", f"-p {self.port}")
        if done.returncode != 0:
            raise self._fail(f"pg_ctl start on port {self.port} failed")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; `mode` is pg_ctl's: smart, fast or immediate (a crash, recovered at the next start)."""
        if not self.running:
            return
        done = self._pg_ctl("stop", "--mode", mode)
        if done.returncode != 0:
            raise self._fail(f"pg_ctl stop --mode {mode} failed")

    def _halt(self) -> None:
        if (self.root / "data").exists():
            self.stop("immediate")


def start_postgres(attempts: int = 3) -> PostgresServer:
    """A new, running PostgreSQL cluster on a free port, in a new temporary directory.

    initdb refuses to run as root: then the cluster belongs to the `postgres` system user (the one Debian's
    package creates) and its programs run through `runuser`."""
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ServiceError("running as root, and there is no postgres user to run initdb as") from None
    root = Path(tempfile.mkdtemp(prefix="crank-pg-"))  # directly under /tmp: the postgres user must reach it
    if user is not None:
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(root, free_port(), user)
    try:
        server.init()
        for attempt in range(attempts):
            try:
                server.start()
                return server
            except ServiceError:
                if attempt == attempts - 1:
                    raise
                server.port = free_port()  # most likely someone else took the port in between: take another
    except BaseException:
        server.destroy()
        raise
    raise AssertionError("unreachable")


class RedisServer(_Server):
    """A redis-server of its own on 127.0.0.1, with persistence off. Built by `start_redis()`."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30) -> None:
        """Start the server on its port (empty: nothing is saved) and wait until it answers PING."""
        if self.running:
            return
        program = shutil.which("redis-server")
        if program is None:
            raise ServiceError("redis-server not found on PATH: run scripts/install")
        self._log = (self.root / "server.log").open("ab")
        self.process = subprocess.Popen(
            [program, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
             "--dir", str(self.root), "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"redis-server on port {self.port} did not start\n{_tail(self.root / 'server.log')}")
            time.sleep(0.02)

    def _answers(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 10) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it does not exit in time)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _halt(self) -> None:
        self.stop()


def start_redis(attempts: int = 3) -> RedisServer:
    """A new, running redis-server on a free port, with a new temporary directory as its working directory."""
    server = RedisServer(Path(tempfile.mkdtemp(prefix="crank-redis-")), free_port())
    try:
        for attempt in range(attempts):
            try:
                server.start()
                return server
            except ServiceError:
                if attempt == attempts - 1:
                    raise
                server.port = free_port()
    except BaseException:
        server.destroy()
        raise
    raise AssertionError("unreachable")


def create_database(admin_url: str, prefix: str) -> tuple[str, str]:
    """A new, empty database with a fresh name starting with `prefix` on the server of `admin_url`: its
    SQLAlchemy URL and its name (`drop_database` removes it)."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    libpq, url = database_urls(admin_url, name)
    with psycopg.connect(libpq, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return url, name


def drop_database(admin_url: str, name: str) -> None:
    """Drop the database `name` (made by `create_database`), closing whatever is still connected to it."""
    import psycopg

    libpq, _ = database_urls(admin_url, name)
    with psycopg.connect(libpq, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def fresh_database(admin_url: str, prefix: str) -> Iterator[tuple[str, str]]:
    """`create_database`, dropped on leaving: its SQLAlchemy URL and its name."""
    url, name = create_database(admin_url, prefix)
    try:
        yield url, name
    finally:
        drop_database(admin_url, name)


def database_urls(admin_url: str, name: str) -> tuple[str, str]:
    """For a server's admin URL (postgresql:// or postgresql+psycopg://): the libpq URL of its maintenance
    database, for psycopg, and the SQLAlchemy URL of the database `name` on the same server."""
    url = make_url(admin_url)
    if url.get_backend_name() != "postgresql":
        raise ServiceError(f"not a PostgreSQL URL (postgresql://user@host:port/db): {url!r}")
    admin = url.set(drivername="postgresql", database=url.database or "postgres")
    return admin.render_as_string(hide_password=False), url.set(
        drivername="postgresql+psycopg", database=name
    ).render_as_string(hide_password=False)
