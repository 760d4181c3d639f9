"""Drafts, publishing, versions, rollback and the runtime view, on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import inspect

from crank.exceptions import RegistryError
from crank.registry import Registry, RuntimeView, migrate

OPERATION = {
    "protocol": "http",
    "target": {"method": "GET", "url": "http://upstream/users/{id}"},
    "description": "One user by id.",
    "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    "output_schema": None,
    "input_mapping": [{"from": "id", "to": "path.id"}],
    "output_mapping": {"select": "{id: id, name: name}"},
    "execution_config": {"timeout": 5},
    "samples": [{"id": 1}],  # draft-only: never in the runtime view
    "import": {"source": "openapi.yaml", "operationId": "getUser"},
}


def seeded(registry: Registry, *bindings: dict[str, Any]) -> None:
    registry.create_workspace("acme", "Acme", default_language="uk")
    registry.put_operation("acme", "get_user", OPERATION)
    registry.put_agent("acme", "support", {"description": "Support desk", "bindings": list(bindings)})


def test_migrations_are_idempotent(registry: Registry) -> None:
    migrate(registry.engine)
    tables = set(inspect(registry.engine).get_table_names())
    assert {"workspaces", "operations", "agents", "agent_versions", "registry_state", "alembic_version"} <= tables


def test_publish_makes_a_runtime_view_without_draft_fields(registry: Registry) -> None:
    seeded(registry, {"operation": "get_user", "tool_name": "user_get_profile", "title": "Profile",
                      "annotations": {"readOnlyHint": True}, "translations": {"uk": {"title": "Профіль"}}})  # fmt: skip
    assert registry.publish("acme", "support") == 1
    (published,) = registry.published()
    assert (published.workspace, published.agent, published.version) == ("acme", "support", 1)
    (tool,) = published.runtime.tools
    assert tool.tool_name == "user_get_profile" and tool.tool_description == "One user by id."
    assert tool.to_json()["target"] == OPERATION["target"]
    assert tool.to_json()["input_mapping"] == OPERATION["input_mapping"]
    assert tool.execution_config.timeout == 5 and tool.annotations.read_only_hint is True
    assert "samples" not in str(published.stored) and "openapi.yaml" not in str(published.stored)
    assert published.runtime.workspace.default_language == "uk"


def test_versions_are_immutable_and_rollback_serves_an_earlier_one(registry: Registry) -> None:
    seeded(registry, {"operation": "get_user", "tool_name": "v1_name"})
    registry.publish("acme", "support")
    registry.put_agent("acme", "support", {"bindings": [{"operation": "get_user", "tool_name": "v2_name"}]})
    before = registry.generation()
    assert registry.publish("acme", "support") == 2
    assert registry.published()[0].runtime.tools[0].tool_name == "v2_name"
    registry.rollback("acme", "support", 1)
    assert registry.published()[0].version == 1
    assert registry.published()[0].runtime.tools[0].tool_name == "v1_name"
    assert registry.versions("acme", "support") == [1, 2]
    assert registry.generation() == before + 2


def test_drafts_are_not_served_until_published(registry: Registry) -> None:
    seeded(registry, {"operation": "get_user"})
    assert registry.published() == []


def test_duplicate_tool_names_fail_the_publish(registry: Registry) -> None:
    seeded(registry, {"operation": "get_user", "tool_name": "same"}, {"operation": "get_user", "tool_name": "same"})
    with pytest.raises(RegistryError, match=r"acme/support: tool names must be unique, repeated: \['same'\]"):
        registry.publish("acme", "support")


def test_unknown_operation_names_the_binding(registry: Registry) -> None:
    seeded(registry, {"operation": "nope"})
    with pytest.raises(RegistryError, match="binding 0: no operation 'nope'"):
        registry.publish("acme", "support")


def test_a_failed_publish_writes_nothing(registry: Registry) -> None:
    seeded(registry, {"operation": "get_user", "tool_name": "first"})
    registry.publish("acme", "support")
    registry.put_agent("acme", "support", {"bindings": [{"operation": "get_user", "tool_name": "second"}]})
    generation = registry.generation()

    def refuse(runtime: RuntimeView) -> None:
        raise RegistryError("tool 'second': refused by the check")

    with pytest.raises(RegistryError, match="refused"):
        registry.publish("acme", "support", check=refuse)
    assert registry.versions("acme", "support") == [1]
    assert registry.generation() == generation
    assert registry.published()[0].runtime.tools[0].tool_name == "first"


def test_clear_errors_for_missing_things(registry: Registry) -> None:
    registry.create_workspace("acme", "Acme")
    with pytest.raises(RegistryError, match="workspace 'acme' already exists"):
        registry.create_workspace("acme", "Again")
    with pytest.raises(RegistryError, match="no workspace 'nope'"):
        registry.put_operation("nope", "x", {})
    with pytest.raises(RegistryError, match="no agent 'ghost' in workspace 'acme'"):
        registry.publish("acme", "ghost")
    registry.put_operation("acme", "get_user", OPERATION)
    registry.put_agent("acme", "support", {"bindings": [{"operation": "get_user"}]})
    registry.publish("acme", "support")
    with pytest.raises(RegistryError, match="has no version 7"):
        registry.rollback("acme", "support", 7)


def test_concurrent_binding_edits_lose_nothing(registry: Registry) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from crank.admin.actions import bind_tool

    seeded(registry)

    def bind(index: int) -> None:
        bind_tool(registry, "acme", "support", {"operation": "get_user", "tool_name": f"t{index}"})

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(bind, range(16)))
    names = {binding["tool_name"] for binding in registry.agent("acme", "support")["bindings"]}
    assert names == {f"t{i}" for i in range(16)}


def test_operation_summaries_read_a_few_fields_of_each_draft(registry: Registry) -> None:
    from crank.registry import OperationSummary

    registry.create_workspace("ws", "WS")
    registry.put_operation("ws", "get_item", {"protocol": "http", "description": "One item <b>bold</b>",
                                              "target": {"method": "get", "url": "https://api.example/items/{id}"},
                                              "input_schema": {"type": "object"}})  # fmt: skip
    registry.put_operation("ws", "rpc_sum", {"protocol": "jsonrpc", "target": {"url": "https://rpc.example/"}})
    registry.put_operation("ws", "bare", {"target": {"url": "https://api.example/bare"}})
    assert registry.operation_summaries("ws") == [
        OperationSummary("bare", "http", None, "https://api.example/bare", ""),
        OperationSummary("get_item", "http", "get", "https://api.example/items/{id}", "One item <b>bold</b>"),
        OperationSummary("rpc_sum", "jsonrpc", None, "https://rpc.example/", ""),
    ]


def test_a_published_versions_view_reads_back_and_a_missing_one_is_not_found(registry: Registry) -> None:
    from crank.exceptions import RegistryNotFoundError

    registry.create_workspace("ws", "WS")
    registry.put_operation("ws", "op", {"protocol": "http", "target": {"url": "http://127.0.0.1:9/x"}})
    registry.put_agent("ws", "a", {"bindings": [{"operation": "op"}]})
    registry.publish("ws", "a")
    assert [tool.tool_name for tool in registry.version_runtime("ws", "a", 1).tools] == ["op"]
    with pytest.raises(RegistryNotFoundError, match="no version 2"):
        registry.version_runtime("ws", "a", 2)


def test_an_agent_whose_view_is_over_the_per_agent_bound_is_refused_at_publish_and_nothing_is_written(
    registry: Registry,
) -> None:
    """A replica builds and holds an agent from its published view: one tenant's huge agent is refused when it is
    published, naming the agent and the bound, before any replica meets it."""
    from crank.registry.runtime import MAX_AGENT_VIEW_BYTES

    registry.create_workspace("big", "Big")
    properties = {
        f"field_{field}": {"type": "string", "enum": [f"choice-{field}-{index}-" + "x" * 40 for index in range(40)]}
        for field in range(150)
    }
    for index in range(30):  # 30 operations of about 350 KB of schema each
        registry.put_operation("big", f"op{index}", {
            "protocol": "http", "target": {"method": "POST", "url": "https://api.example.com/items"},
            "input_schema": {"type": "object", "properties": properties},
        })  # fmt: skip
    registry.put_agent("big", "everything", {"bindings": [{"operation": f"op{index}"} for index in range(30)]})
    registry.put_agent("big", "some", {"bindings": [{"operation": f"op{index}"} for index in range(3)]})
    with pytest.raises(RegistryError) as refused:
        registry.publish("big", "everything")
    message = str(refused.value)
    assert "agent big/everything" in message and f"more than the {MAX_AGENT_VIEW_BYTES} allowed" in message
    assert "split its tools among several agents" in message
    assert registry.versions("big", "everything") == []
    assert registry.publish("big", "some") == 1  # a part of the same tools is within the bound


def test_the_index_of_published_versions_counts_their_tools_and_the_upgrade_counts_those_published_before(
    database_url: str,
) -> None:
    """A replica's index says what building each agent costs (its tools) without reading its view; the migration
    that adds the count counts the versions published before it from their views."""
    from pathlib import Path

    from alembic import command
    from alembic.config import Config

    import crank.registry
    from crank.registry import PublishedVersion, open_engine

    engine = open_engine(database_url, pooled=False)
    try:
        migrate(engine)
        registry = Registry(engine)
        registry.create_workspace("ws", "WS")
        for name in ("one", "two", "three"):
            registry.put_operation("ws", name, {"protocol": "http", "target": {"url": f"http://127.0.0.1:9/{name}"}})
        registry.put_agent("ws", "big", {"bindings": [{"operation": name} for name in ("one", "two", "three")]})
        registry.put_agent("ws", "small", {"bindings": [{"operation": "one"}]})
        registry.publish("ws", "big")
        registry.publish("ws", "small")
        expected = {("ws", "big"): PublishedVersion(1, 3), ("ws", "small"): PublishedVersion(1, 1)}
        assert registry.published_versions() == expected
        config = Config()
        config.set_main_option("script_location", str(Path(crank.registry.__file__).parent / "migrations"))
        with engine.begin() as connection:  # back to the registry of before the count, and up again
            config.attributes["connection"] = connection
            command.downgrade(config, "0010")
        migrate(engine)
        assert registry.published_versions() == expected
    finally:
        engine.dispose()
