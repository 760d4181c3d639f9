"""The console in Debian's Chromium, driven by Playwright (no browser is downloaded): an operator signs in,
reads an agent's budget, publishes, compares and rolls back versions, and revokes a key, and the MCP endpoint
serves each change. axe-core (from npm) checks every page; screenshots go to artifacts/console/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Page, expect

from crank.admin.lint import catalog_report
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client
from tests.admin.console.browsing import in_thread, look, sign_in
from tests.admin.console.conftest import TOKEN
from tests.admin.console.test_app import newer_demo
from tests.mcp.wire import legacy_headers, legacy_request


def test_an_operator_opens_an_agent_and_reads_its_budget_bar(
    page: Page, console_url: str, sqlite_registry: Registry, tmp_path: Path
) -> None:
    sign_in(page, console_url)
    look(page, "workspaces")
    page.get_by_role("link", name="shop").click()
    expect(page.get_by_role("heading", name="Agents")).to_be_visible()
    look(page, "workspace")
    page.get_by_label("Search operations").fill("order")
    expect(page.locator("#operations p.muted")).to_contain_text("match “order”")  # htmx swapped the table
    matching = [name for name, spec in sqlite_registry.operations("shop").items()
                if "order" in f"{name} {spec.get('description')} {spec['target']['url']}".lower()]  # fmt: skip
    assert 0 < len(matching) < len(sqlite_registry.operations("shop"))
    assert sorted(page.locator("#operations tbody tr td:first-child").all_inner_texts()) == sorted(matching)
    page.get_by_role("link", name="desk").click()
    report = catalog_report(sqlite_registry.draft_runtime("shop", "desk"))
    bar = page.get_by_label("Token estimate against the budget")
    assert bar.get_attribute("value") == str(report.estimate) and bar.get_attribute("high") == str(report.budget)
    expect(page.locator("#budget-text")).to_contain_text(f"about {report.estimate} of {report.budget} tokens")
    heaviest = page.locator("#tools tbody tr").first.locator("td").first
    assert heaviest.inner_text() == report.tools[0][0]
    look(page, "agent")
    page.get_by_label("Mode", exact=True).select_option("discovery")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#tools caption")).to_contain_text("discovery")
    assert "call_operation" in page.locator("#tools").inner_text()

    page.goto(console_url + "/workspaces/shop/import")
    newer = tmp_path / "newer.yaml"
    newer.write_text(newer_demo())
    page.get_by_label("or a description file").set_input_files(newer)  # read by console.js into the text
    expect(page.get_by_label("or the description itself")).to_have_value(newer_demo())
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#breaking")).to_contain_text("tool cancel_order")
    look(page, "import")
    page.goto(console_url + "/workspaces/shop/access")
    expect(page.get_by_role("heading", name="OAuth access tokens")).to_be_visible()
    look(page, "access")
    page.goto(console_url + "/workspaces/shop/usage")
    expect(page.get_by_role("heading", name="Calls and errors of shop")).to_be_visible()
    look(page, "usage-admin-role")
    page.goto(console_url + "/workspaces/nope")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    look(page, "not-found")


def test_an_operator_signs_in_and_moves_around_from_the_keyboard(page: Page, console_url: str) -> None:
    page.goto(console_url + "/login")
    page.keyboard.type(TOKEN)  # the token field has the focus
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Workspaces")).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    for _ in range(10):  # past the header's links and button, to the first workspace
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "shop":
            break
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Agents")).to_be_visible()


def test_an_operation_description_never_runs_as_script(page: Page, console_url: str) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in(page, console_url)
    page.goto(console_url + "/workspaces/shop?q=%22%3E%3Cscript%3Ealert(1)%3C/script%3E")
    page.goto(console_url + "/workspaces/shop")
    expect(page.locator("#operations")).to_contain_text("<script>window.pwned = true</script>")  # shown as text
    assert page.evaluate("window.pwned") is None and dialogs == []


def test_publish_compare_roll_back_and_revoke_reach_the_mcp_endpoint(
    page: Page, console_url: str, sqlite_registry: Registry, serve: Callable[..., str]
) -> None:
    mcp_url = serve(GatewayService(sqlite_registry, poll_interval=0.05)) + "/mcp/v1/shop/desk"
    sign_in(page, console_url)
    page.goto(console_url + "/workspaces/shop/keys")
    page.get_by_label("desk").check()
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_label("Key", exact=True).input_value()
    look(page, "keys")
    every_tool = sorted(sqlite_registry.operations("shop"))
    assert eventually_listed(mcp_url, key, every_tool)

    sqlite_registry.put_agent("shop", "desk", {"bindings": [{"operation": "search_books"}]})  # a change
    page.goto(console_url + "/workspaces/shop/agents/desk")
    # How a client connects: the MCP URL (this page's address, without CRANK_PUBLIC_URL) and its configuration.
    shown = console_url.removesuffix("/console") + "/mcp/v1/shop/desk"
    expect(page.locator("#mcp-url")).to_have_text(shown)
    config = json.loads(page.locator("#client-config").inner_text())["mcpServers"]["shop-desk"]
    assert config == {"type": "http", "url": shown, "headers": {"Authorization": "Bearer <API key>"}}
    page.get_by_role("button", name="Publish the draft").click()
    expect(page.get_by_role("status")).to_have_text("Published version 2.")
    assert eventually_listed(mcp_url, key, ["search_books"])
    page.get_by_label("Compare version").select_option("1")
    page.get_by_label("with").select_option("2")
    page.get_by_role("button", name="Compare").click()
    expect(page.locator("#removed")).to_contain_text("get_book")
    look(page, "diff")
    page.go_back()
    page.get_by_role("button", name="Serve version 1").click()
    expect(page.get_by_role("status")).to_have_text("Now serving version 1 again.")
    assert eventually_listed(mcp_url, key, every_tool)

    page.goto(console_url + "/workspaces/shop/keys")
    (info,) = sqlite_registry.api_key_infos("shop")
    page.get_by_role("button", name=f"Revoke {info.id}").click()
    expect(page.get_by_role("status")).to_have_text(f"Revoked key {info.id}.")
    assert eventually_refused(mcp_url, key)


def eventually_listed(url: str, key: str, names: list[str]) -> bool:
    """Whether the endpoint lists exactly `names` (sorted) within a few seconds, through the official client."""

    async def listed() -> list[str]:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
                return sorted(tool.name for tool in (await client.list_tools()).tools)

    for _ in range(50):  # the replica reloads within its poll interval (0.05 s)
        if in_thread(listed) == names:
            return True
    return False


def eventually_refused(url: str, key: str) -> bool:
    async def status() -> int:
        body = legacy_request("tools/list")
        headers = {**legacy_headers(), "Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient() as http:
            return (await http.post(url, json=body, headers=headers)).status_code

    return any(in_thread(status) == 401 for _ in range(50))


def recording_proxy(target: str, seen: list[tuple[str, str]]) -> Any:
    """An ASGI app that forwards every request to `target` (Prism) and notes its method and path."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append((scope["method"], scope["path"]))
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        query = f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        async with httpx.AsyncClient() as client:
            answer = await client.request(
                scope["method"], target + scope["path"] + query, content=body, headers=headers
            )
        kind = answer.headers.get("content-type", "application/json").encode()
        await send({"type": "http.response.start", "status": answer.status_code, "headers": [(b"content-type", kind)]})
        await send({"type": "http.response.body", "body": answer.content})

    return app


def test_try_it_calls_through_the_endpoint_and_a_destructive_call_runs_once_confirmed(
    page: Page, sqlite_registry: Registry, serve: Callable[..., str]
) -> None:
    from crank.admin.actions import publish_agent
    from crank.admin.changes import reimport
    from crank.admin.console import Console
    from tests.admin.console.conftest import DEMO_SPEC
    from tests.realapis import prism

    seen: list[tuple[str, str]] = []
    with prism(DEMO_SPEC) as mock:
        upstream = serve(recording_proxy(mock, seen))
        sqlite_registry.create_workspace("store", "Store")
        reimport(sqlite_registry, "store", "openapi", str(DEMO_SPEC), base_url=upstream)
        bindings = [{"operation": name} for name in sqlite_registry.operations("store")]
        limits = {"rate": {"calls": 60, "window": 60}, "quota": {"calls": 1000, "period": "day"}}
        sqlite_registry.put_agent("store", "front", {"bindings": bindings, "limits": limits})
        publish_agent(sqlite_registry, "store", "front")
        key = sqlite_registry.create_api_key("store")
        gateway = GatewayService(sqlite_registry, poll_interval=0.05)
        serve(gateway)  # its lifespan runs: the console calls it in-process, as `crank serve` does
        console = Console(sqlite_registry, token=TOKEN, mcp=gateway, metrics=gateway.metrics)
        console_url = serve(console) + "/console"
        sign_in(page, console_url)

        page.goto(console_url + "/workspaces/store/agents/front/tools/search_books")
        page.get_by_label("API key of the workspace").fill(key)
        page.get_by_label("query").fill("kobzar")
        page.get_by_role("button", name="Call search_books").click()
        expect(page.locator("#structured")).to_contain_text('"items"')  # Prism's example answer, as JSON
        expect(page.locator("pre.format-toon")).to_have_count(1)
        assert ("GET", "/books") in seen
        look(page, "try")

        page.goto(console_url + "/workspaces/store/agents/front/tools/cancel_order")
        # The key given for the call before is still there (kept in this tab), never in the page's HTML.
        expect(page.get_by_label("API key of the workspace")).to_have_value(key)
        assert key not in page.request.get(page.url).text()  # the server's page itself holds no key
        page.get_by_label("order_id").fill("7")
        page.get_by_role("button", name="Call cancel_order").click()
        expect(page.get_by_role("heading", name="Confirm this call")).to_be_visible()
        expect(page.locator("#confirm-arguments")).to_have_text('{"order_id":7}')
        look(page, "try-confirm")
        assert not any(method == "DELETE" for method, _ in seen)  # asked, nothing sent yet
        expect(page.locator("#confirm-key")).to_have_value(key)  # kept for the confirmation too
        page.get_by_role("button", name="Run it").click()
        expect(page.get_by_role("heading", name="Answer")).to_be_visible()
        assert [path for method, path in seen if method == "DELETE"] == ["/orders/7"]  # once

        page.goto(console_url + "/workspaces/store/usage")  # three calls: the confirmation's first step is no error
        cells = page.locator("#usage tbody tr").first.locator("td").all_inner_texts()
        assert cells == ["front", "3", "0", "0.0%", "60 calls per 60 s; 1000 calls per day, UTC"]
        look(page, "usage")
    assert console.usage is not None
    console.usage.close()
