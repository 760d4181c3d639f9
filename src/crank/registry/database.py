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

__all__ = ["default_url", "migrate", "open_engine"]

_MIGRATIONS = Path(__file__).parent / "migrations"


def default_url(data_dir: Path) -> str:
    data_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{data_dir / 'registry.sqlite3'}"


def open_engine(url: str, *, pooled: bool = True) -> Engine:
    """`pooled=False` opens a connection per session and closes it after (no idle connections left open)."""
    engine = create_engine(url, pool_pre_ping=True) if pooled else create_engine(url, poolclass=NullPool)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(connection: Any, record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")  # off by default in SQLite
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (MCP) do not wait for a publishing writer
    cursor.close()


def migrate(engine: Engine) -> None:
    """Upgrade the schema to the newest migration (idempotent)."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
