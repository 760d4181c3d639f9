"""Alembic environment: migrations run against the connection Crank passes in, or `sqlalchemy.url`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, engine_from_config, pool

from crank.registry.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite alters tables by copying them.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as fresh:
        _run(fresh)


run_migrations()
