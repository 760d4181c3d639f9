"""A registry with the demo bookshop imported and bound, and the console serving it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from crank.admin.actions import publish_agent
from crank.admin.changes import reimport
from crank.admin.console import Console
from crank.registry import Registry

TOKEN = "console-admin-token-0123456789"
DEMO_SPEC = Path(__file__).resolve().parents[3] / "src" / "crank" / "demo" / "openapi.yaml"
HOSTILE = '<script>window.pwned = true</script><img src=x onerror="window.pwned = true">'
"""An operation description from an untrusted document."""


def fill(registry: Registry) -> None:
    """Workspace `shop`: the demo's operations (one with a hostile description), an agent `desk` bound to all of
    them and published once."""
    registry.create_workspace("shop", "Shop")
    reimport(registry, "shop", "openapi", str(DEMO_SPEC), base_url="http://127.0.0.1:9/demo-api")
    names = list(registry.operations("shop"))
    spec = registry.operation("shop", names[0])
    registry.put_operation("shop", names[0], {**spec, "description": HOSTILE})
    registry.put_agent("shop", "desk", {"description": "The shop's front desk.",
                                        "bindings": [{"operation": name} for name in names]})  # fmt: skip
    publish_agent(registry, "shop", "desk")


@pytest.fixture
def console_url(sqlite_registry: Registry, serve: Callable[..., str]) -> str:
    fill(sqlite_registry)
    return serve(Console(sqlite_registry, token=TOKEN, idle_timeout=60)) + "/console"
