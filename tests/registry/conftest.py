from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from crank.registry import Registry, migrate, open_engine

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind: nothing depends on what an earlier run left behind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.sqlite3'}"
        return
    name = f"crank_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def registry(database_url: str) -> Iterator[Registry]:
    engine = open_engine(database_url)
    migrate(engine)
    yield Registry(engine)
    engine.dispose()
