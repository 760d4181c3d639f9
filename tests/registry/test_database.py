"""The registry's connections have timeouts: a registry that stops answering fails requests, never hangs them; and
a registry already at the newest migration is told so by one read, without Alembic."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from crank.registry import open_engine


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel completes the handshake) and never answers a byte."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        yield hole.getsockname()[1]


def _outcome_within(seconds: float, action: object) -> BaseException | str:
    """Run `action` in a thread; its exception, "returned", or "hung" if it is still running after `seconds`
    (generous: this guards against a hang, it measures nothing)."""
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            action()  # type: ignore[operator]
            outcome.append("returned")
        except BaseException as exc:  # noqa: BLE001 - the outcome is what the test reads
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else "hung"


def test_a_registry_that_never_answers_fails_at_the_connect_timeout(black_hole: int) -> None:
    engine = open_engine(f"postgresql+psycopg://postgres@127.0.0.1:{black_hole}/crank", pooled=False, connect_timeout=1)

    def connect() -> None:
        with engine.connect():
            pass

    outcome = _outcome_within(60, connect)
    engine.dispose()
    assert isinstance(outcome, OperationalError), outcome
    assert "timeout" in str(outcome).lower()


def test_a_statement_over_the_timeout_is_cancelled(postgres_url: str) -> None:
    url = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = open_engine(url, pooled=False, statement_timeout=0.3)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT 1")).scalar_one() == 1
        with pytest.raises(OperationalError, match="statement timeout"):
            connection.execute(text("SELECT pg_sleep(10)"))
    engine.dispose()


def test_the_schema_revision_is_alembics_head_and_a_current_registry_is_not_upgraded_again(database_url: str) -> None:
    """`SCHEMA_REVISION` names the newest migration (a migration added without it fails here); `migrate` upgrades a
    new registry, and on one at that revision reads `alembic_version` and returns, Alembic never imported."""
    import subprocess
    import sys
    from pathlib import Path

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    import crank.registry
    from crank.registry import migrate
    from crank.registry.database import SCHEMA_REVISION, schema_revision

    config = Config()
    config.set_main_option("script_location", str(Path(crank.registry.__file__).parent / "migrations"))
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_REVISION
    engine = open_engine(database_url, pooled=False)
    try:
        assert schema_revision(engine) is None
        migrate(engine)
        assert schema_revision(engine) == SCHEMA_REVISION
    finally:
        engine.dispose()
    code = (
        "import sys; from crank.registry import migrate, open_engine; migrate(open_engine(sys.argv[1], pooled=False)); "
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'alembic'))"
    )
    done = subprocess.run([sys.executable, "-c", code, database_url], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
