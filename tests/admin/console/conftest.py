"""A registry with the demo bookshop imported and bound, and the console serving it."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

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


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is missing: scripts/install-services installs it")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1366, "height": 900})  # a laptop's screen
    yield context.new_page()
    context.close()
