"""Opening the registry database and bringing its schema up to date with Alembic.

The embedded default is a SQLite file under the data folder, created on first start; PostgreSQL is
chosen by a `postgresql+psycopg://` URL. Both run the same migrations.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.pool import NullPool

__all__ = [
    "DATABASE_ERRORS",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_STATEMENT_TIMEOUT",
    "SCHEMA_REVISION",
    "connection_options",
    "describe_database_error",
    "migrate",
    "open_engine",
    "schema_revision",
]

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
"""Seconds to open a registry connection (PostgreSQL), the server's answer to the handshake included."""
DEFAULT_STATEMENT_TIMEOUT: Final = 15.0
"""Seconds one statement may take: PostgreSQL cancels it, and a connection whose sent data goes unanswered
that long is dropped (a network black hole); on SQLite, how long to wait for the write lock."""

_MIGRATIONS = Path(__file__).parent / "migrations"
SCHEMA_REVISION: Final = "0012"
"""The newest migration's revision (`migrations/versions`): a registry at it needs no upgrade, which one read of
`alembic_version` tells without importing Alembic (a CLI command's start). A test holds it to Alembic's head."""

DATABASE_ERRORS: Final = (OperationalError, InterfaceError)
"""What the driver raises when the registry database cannot be used at all (refused, unreachable, timed out,
gone, a file that cannot be opened): an operational fault, answered 503 by the admin API and in one line by
the CLI. Errors of a statement itself (IntegrityError, ProgrammingError) are not among them."""


def describe_database_error(error: Exception) -> str:
    """One line for an operator: the driver's first line, without SQLAlchemy's statement and link (a libpq
    message names host and port, never the password)."""
    cause = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return f"the registry database cannot be used: {lines[0] if lines else type(cause).__name__}"


def open_engine(
    url: str,
    *,
    pooled: bool = True,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
) -> Engine:
    """`pooled=False` opens a connection per session and closes it after (no idle connections left open).

    Every connection has the two timeouts: a registry that stops answering makes a request fail (and
    `/readyz` say so) instead of hanging it."""
    connect_args = connection_options(make_url(url).get_backend_name(), connect_timeout, statement_timeout)
    if pooled:
        engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    else:
        engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def connection_options(backend: str, connect_timeout: float, statement_timeout: float) -> dict[str, Any]:
    """The driver's connection arguments that bound every wait (also used by the PostgreSQL listener of
    `crank.registry.changes`)."""
    if backend == "sqlite":
        return {"timeout": statement_timeout}  # the driver's wait for a lock held by another writer
    milliseconds = max(1, round(statement_timeout * 1000))
    return {
        "connect_timeout": max(1, math.ceil(connect_timeout)),  # libpq counts whole seconds, at least 1 (0 = never)
        "options": f"-c statement_timeout={milliseconds}",
        # A black hole answers nothing, not even a refusal: without these, a request waits on the socket for
        # as long as the kernel retransmits (15 minutes and more). Data unacknowledged for longer than a
        # statement may take, or an idle connection whose peer stopped answering probes, is dropped.
        "tcp_user_timeout": milliseconds + 5000,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }


def _sqlite_pragmas(connection: Any, record: Any) -> None:
    # The driver's own transaction handling starts a transaction only at the first write, so a read and the
    # write that follows it would not be one transaction; Crank begins them itself (`_sqlite_begin`).
    connection.isolation_level = None
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")  # off by default in SQLite
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (MCP) do not wait for a publishing writer
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    """A writing transaction (`crank_write` execution option, see `Registry`) begins `IMMEDIATE`: it takes
    the write lock when it starts, so read-modify-write edits (bindings, publishes) run one after the
    other instead of losing one another's changes. Reads begin deferred and never wait for a writer."""
    write = connection.get_execution_options().get("crank_write", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def migrate(engine: Engine) -> None:
    """Upgrade the schema to the newest migration (idempotent). A registry already at it costs one read."""
    if schema_revision(engine) == SCHEMA_REVISION:
        return
    from alembic import command  # only to upgrade: it takes longer to import than most commands take to run
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def schema_revision(engine: Engine) -> str | None:
    """The registry's migration revision; None when it has none (a new database)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        found = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return str(found) if found is not None else None
