"""The change log (crank.registry.change_log): each generation names what it changed, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import text, update
from sqlalchemy.orm import Session

import crank.registry
from crank.registry import Registry, change_log, key_digest, migrate, open_engine
from crank.registry.models import Base, RegistryState
from crank.registry.runtime import Limits, OAuthPolicy, RateLimit


def workspace(registry: Registry, slug: str) -> None:
    """A workspace with one agent, `desk`, of one tool, published."""
    registry.create_workspace(slug, slug.title())
    target = {"method": "GET", "url": "http://127.0.0.1:9/books"}
    registry.put_operation(slug, "get_book", {"protocol": "http", "target": target})
    registry.put_agent(slug, "desk", {"bindings": [{"operation": "get_book"}]})
    registry.publish(slug, "desk")


def test_each_write_names_what_it_changed_and_a_replica_reads_back_those_alone(registry: Registry) -> None:
    for slug in ("acme", "globex", "initech"):
        workspace(registry, slug)
    since = registry.generation()
    assert registry.changes_since(since) == change_log.Changes(since)  # nothing after the current generation
    registry.publish("acme", "desk", skip_unchanged=False)
    key = registry.create_api_key("globex")
    registry.set_workspace_oauth("initech", OAuthPolicy(issuers=("https://id.initech.example",)))
    changes = registry.changes_since(since)
    assert not changes.everything and changes.generation == registry.generation() == since + 3
    assert changes.agents == {("acme", "desk")}
    assert changes.keys == {key_digest(key)}
    assert changes.workspaces == {"initech"}
    # What a replica reads back: the agent published, and every agent of the workspace whose policy changed.
    assert sorted((agent.workspace, agent.agent) for agent in registry.published(changes)) == [
        ("acme", "desk"),
        ("initech", "desk"),
    ]
    assert changes.touches_key(key_digest(key), "globex") and not changes.touches_key("other", "globex")
    assert set(registry.workspace_oauth(changes.workspaces)) == {"initech"}
    assert len(registry.published()) == 3  # without changes: everything, as at a first load


def test_limits_of_a_workspace_change_its_keys_and_a_rollback_its_agent(registry: Registry) -> None:
    workspace(registry, "acme")
    first = registry.create_api_key("acme")
    registry.publish("acme", "desk", skip_unchanged=False)
    since = registry.generation()
    registry.put_workspace("acme", "ACME", key_limits=Limits(rate=RateLimit(calls=5, window=60)))
    registry.rollback("acme", "desk", 1)
    changes = registry.changes_since(since)
    assert changes.workspaces == {"acme"} and changes.agents == {("acme", "desk")}
    assert changes.touches_key(key_digest(first), "acme")  # every key of the workspace carries its limits
    assert set(registry.api_keys([key_digest(first), "no-such-digest"])) == {key_digest(first)}


def test_a_replica_behind_the_log_or_ahead_of_the_registry_reloads_everything(registry: Registry) -> None:
    assert registry.changes_since(-1).everything  # a replica's first load
    workspace(registry, "acme")
    generation = registry.generation()
    with Session(registry.engine) as session, session.begin():  # as the upgrade to the log leaves a registry
        session.execute(update(RegistryState).where(RegistryState.id == 1).values(changes_from=generation))
    assert registry.changes_since(generation - 1).everything  # its changes were never logged
    assert not registry.changes_since(generation).everything
    assert registry.changes_since(generation + 5).everything  # a registry reset under a replica


def test_the_log_forgets_its_oldest_generations_and_a_replica_that_far_behind_reloads_everything(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_log, "CHANGE_LOG_GENERATIONS", 3)
    monkeypatch.setattr(change_log, "_PRUNE_EVERY", 1)
    workspace(registry, "acme")
    for _ in range(6):
        registry.publish("acme", "desk", skip_unchanged=False)
    generation = registry.generation()
    assert registry.changes_since(generation - 3).agents == {("acme", "desk")}
    assert registry.changes_since(generation - 4).everything


def test_more_changes_than_are_read_one_by_one_are_everything(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_log, "MAX_CHANGES_READ", 2)
    for slug in ("acme", "globex"):
        workspace(registry, slug)
    since = registry.generation()
    registry.create_api_key("acme")
    registry.create_api_key("globex")
    assert not registry.changes_since(since).everything
    registry.create_api_key("acme")
    assert registry.changes_since(since).everything


def test_a_registry_upgraded_to_the_log_starts_it_at_its_generation_and_its_models_match_the_migrations(
    database_url: str,
) -> None:
    engine = open_engine(database_url, pooled=False)
    try:
        config = Config()
        config.set_main_option("script_location", str(Path(crank.registry.__file__).parent / "migrations"))
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "0009")
        with engine.begin() as connection:  # generations of an older Crank, whose changes were logged nowhere
            connection.execute(text("UPDATE registry_state SET generation = 7"))
        generation = 7
        migrate(engine)
        upgraded = Registry(engine)
        assert upgraded.changes_since(generation).generation == generation
        assert not upgraded.changes_since(generation).everything
        assert upgraded.changes_since(generation - 1).everything  # that change was never logged: reload everything
        with engine.connect() as connection:
            context = MigrationContext.configure(connection)
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_a_generation_an_older_crank_bumped_without_the_log_makes_a_replica_reload_everything(
    registry: Registry,
) -> None:
    workspace(registry, "acme")
    since = registry.generation()
    with registry.engine.begin() as connection:  # a rolling upgrade: an older process publishes, logging nothing
        connection.execute(text("UPDATE registry_state SET generation = generation + 1"))
    registry.publish("acme", "desk", skip_unchanged=False)
    assert registry.changes_since(since).everything
    assert not registry.changes_since(since + 1).everything  # the logged generation after it reads as ever
