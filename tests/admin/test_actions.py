"""Publishing through the admin actions: compiled first, linted, never blocked by the budget."""

from __future__ import annotations

import pytest

from crank.admin.actions import bind_tool, publish_agent, unbind_tool
from crank.exceptions import RegistryNotFoundError
from crank.registry import Registry

OPERATION = {
    "protocol": "http", "target": {"method": "GET", "url": "http://shop.test/books/{book_id}"},
    "description": "Returns one book with its price. Use it when the user names a book by its id.",
    "input_schema": {"type": "object", "properties": {"book_id": {"type": "integer", "description": "The id."}}},
    "output_schema": {"type": "object", "properties": {"title": {"type": "string"}}},
}  # fmt: skip


def test_publishing_over_budget_warns_and_does_not_block(registry: Registry) -> None:
    registry.put_workspace("shop", "Shop", token_budget=10)
    registry.put_operation("shop", "get_book", OPERATION)
    registry.put_agent("shop", "desk", {"description": "Books.", "bindings": [{"operation": "get_book"}]})
    report = publish_agent(registry, "shop", "desk")
    assert report.version == 1 and registry.published()[0].version == 1
    assert report.catalog.budget == 10 and report.catalog.over_budget
    assert [finding.rule for finding in report.findings] == ["over-budget"]
    registry.put_agent("shop", "desk", {"bindings": [{"operation": "get_book"}], "token_budget": 5000})
    report = publish_agent(registry, "shop", "desk")  # the agent's own budget wins over the workspace's
    assert report.catalog.budget == 5000 and not report.catalog.over_budget


def test_bindings_are_replaced_in_place_and_keep_the_agent_settings(registry: Registry) -> None:
    registry.put_workspace("shop", "Shop")
    registry.put_operation("shop", "get_book", OPERATION)
    registry.put_agent("shop", "desk", {"description": "Books.", "token_budget": 900, "bindings": []})
    bind_tool(registry, "shop", "desk", {"operation": "get_book", "tool_name": "a"})
    bind_tool(registry, "shop", "desk", {"operation": "get_book", "tool_name": "b"})
    agent = bind_tool(registry, "shop", "desk", {"operation": "get_book", "tool_name": "a", "title": "A"})
    assert [b.get("title") for b in agent["bindings"]] == ["A", None] and agent["token_budget"] == 900
    unbind_tool(registry, "shop", "desk", "a")
    assert [b["tool_name"] for b in registry.agent("shop", "desk")["bindings"]] == ["b"]
    with pytest.raises(RegistryNotFoundError, match="has no tool 'a'"):
        unbind_tool(registry, "shop", "desk", "a")
