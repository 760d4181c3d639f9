"""Opening the registry database and bringing its schema up to date with Alembic.

The embedded default is a SQLite file under the data folder, created on first start; PostgreSQL is
chosen by a `postgresql+psycopg://` URL. Both run the same migrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool

__all__ = ["migrate", "open_engine"]

_MIGRATIONS = Path(__file__).parent / "migrations"


def open_engine(url: str, *, pooled: bool = True) -> Engine:
    """`pooled=False` opens a connection per session and closes it after (no idle connections left open)."""
    engine = create_engine(url, pool_pre_ping=True) if pooled else create_engine(url, poolclass=NullPool)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


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
    """Upgrade the schema to the newest migration (idempotent)."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
