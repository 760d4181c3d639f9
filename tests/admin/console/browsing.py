"""What the console's browser tests share: Playwright helpers, axe-core, screenshots."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.admin.console.conftest import TOKEN

ROOT = Path(__file__).resolve().parents[3]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
ARTIFACTS = ROOT / "artifacts" / "console"


def in_thread(coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run an async check beside Playwright's own event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine()).result()


def accessibility_problems(page: Page) -> list[Any]:
    """axe-core's serious and critical violations on the page (evaluated by the browser, not through the page's
    own scripts: the CSP allows none but the console's)."""
    page.evaluate(AXE.read_text())
    found = page.evaluate(
        "async () => (await axe.run()).violations"
        ".filter(v => ['serious', 'critical'].includes(v.impact))"
        ".map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' '))}))"
    )
    return list(found)


def look(page: Page, name: str) -> None:
    """Check the page with axe-core and keep a screenshot of it."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)
    assert accessibility_problems(page) == [], name


def sign_in(page: Page, console_url: str) -> None:
    page.goto(console_url + "/")
    expect(page).to_have_url(f"{console_url}/login?next=/console/")
    look(page, "login")
    page.get_by_label("Admin token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Workspaces")).to_be_visible()
