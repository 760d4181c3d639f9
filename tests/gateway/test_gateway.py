"""The gateway end to end: registry -> publish -> /mcp/v1/{workspace}/{agent} -> real upstream over HTTP,
driven by the official MCP client; republish and rollback while a client keeps calling."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from crank.admin.actions import publish_agent
from crank.admin.apply import apply_catalog, load_catalog_file
from crank.exceptions import ConfigurationError
from crank.gateway.client import UpstreamClient
from crank.mcp.formats import render
from crank.registry import KeyScope, Registry
from crank.server import GatewayService
from crank.sources.agents import build_catalog
from crank.sources.api_keys import KeyCacheLimits
from mcp import Client
from tests.gateway import upstream

pytestmark = pytest.mark.anyio

CHECK_CLIENT = UpstreamClient()  # only builds catalogs to check a publish; never sends a request
USER_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def operations(base: str) -> dict[str, dict[str, Any]]:
    return {
        "get_user": {
            "protocol": "http", "target": {"method": "GET", "url": base + "/users/{id}"}, "description": "One user.",
            "input_schema": USER_SCHEMA,
            "output_schema": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}},
            "output_mapping": {"select": "{id: id, name: name}"},
        },
        "list_users": {
            "protocol": "http", "target": {"method": "GET", "url": base + "/users"}, "description": "Users.",
            "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}},
            "input_mapping": [{"value": "2", "to": "header.X-Api-Version"}],
            "output_mapping": {"select": "items", "rename": {"email": "mail"}, "max_items": 3},
        },
        "create_user": {
            "protocol": "http", "target": {"method": "POST", "url": base + "/users"}, "description": "Create a user.",
            "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            "input_mapping": [
                {"from": "name", "to": "body.name"}, {"template": "crank-{name}", "to": "header.X-Trace"},
            ],
        },
        "broken": {"protocol": "http", "target": {"url": base + "/broken"}, "description": "Fails."},
        "limited": {"protocol": "http", "target": {"url": base + "/limited"}, "description": "Rate limited."},
        "html": {"protocol": "http", "target": {"url": base + "/html"}, "description": "Not JSON."},
    }  # fmt: skip


def publish_demo(registry: Registry, base: str, tool_prefix: str = "") -> int:
    if not registry.published() and not _has_workspace(registry):
        registry.create_workspace("acme", "Acme", default_language="en")
    for name, spec in operations(base).items():
        registry.put_operation("acme", name, spec)
    # get_user keeps its name in every version, so a client can call it across a republish.
    bindings = [{"operation": name, "tool_name": (tool_prefix if name != "get_user" else "") + name}
                for name in operations(base)]  # fmt: skip
    bindings[0]["translations"] = {"uk": {"title": "Користувач"}}
    bindings[0]["annotations"] = {"readOnlyHint": True}
    registry.put_agent("acme", "support", {"description": "Support", "bindings": bindings})
    return registry.publish("acme", "support", check=lambda runtime: build_catalog(runtime, CHECK_CLIENT) and None)


def _has_workspace(registry: Registry) -> bool:
    try:
        registry.put_operation("acme", "probe", {})
        return True
    except Exception:
        return False


@pytest.fixture
def gateway(registry: Registry, serve: Callable[..., str]) -> tuple[str, str, Registry]:
    base = serve(upstream.app)
    publish_demo(registry, base)
    url = serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False))
    return url + "/mcp/v1/acme/support", base, registry


async def test_api_keys_open_only_their_workspace_and_agents(registry: Registry, serve: Callable[..., str]) -> None:
    base = serve(upstream.app)
    publish_demo(registry, base)
    registry.create_workspace("other", "Other")
    registry.put_operation("other", "get_user", operations(base)["get_user"])
    registry.put_agent("other", "desk", {"bindings": [{"operation": "get_user"}]})
    registry.publish("other", "desk")
    everything = registry.create_api_key("acme")
    elsewhere = registry.create_api_key("acme", agents=["nobody"])
    foreign = registry.create_api_key("other")
    root = serve(GatewayService(registry, poll_interval=0.05))
    url = root + "/mcp/v1/acme/support"

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # The official client, sending the key on every request.
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {everything}"}) as keyed:
        async with Client(streamable_http_client(url, http_client=keyed)) as client:
            result = await client.call_tool("get_user", {"id": 2})
    assert result.structured_content == {"result": {"id": 2, "name": "user2"}}
    async with httpx.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {foreign}"}):
            response = await http.get(url + "/tools", headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["www-authenticate"] == 'Bearer realm="crank"'
        unknown = await http.get(root + "/mcp/v1/acme/nobody/tools", headers={"Authorization": f"Bearer {everything}"})
        assert unknown.status_code == 404
        # docs/gateway.md's table: another workspace's key learns nothing (401 whether or not the agent
        # exists); a key limited to other agents gets the same 404 for one it may not use as for one that is not.
        for agent, key, status in (("ghost", foreign, 401), ("ghost", elsewhere, 404), ("support", elsewhere, 404)):
            response = await http.get(f"{root}/mcp/v1/acme/{agent}/tools", headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == status, (agent, status)
        registry.revoke_api_key(everything)
        await asyncio.sleep(0.3)  # the revocation bumps the generation; the watcher reloads the keys
        revoked = await http.get(url + "/tools", headers={"Authorization": f"Bearer {everything}"})
        assert revoked.status_code == 401


async def test_a_key_made_after_the_last_reload_works_on_its_first_request(
    registry: Registry, serve: Callable[..., str]
) -> None:
    publish_demo(registry, serve(upstream.app))
    # No reload during the test: only the lookup can see the keys. One lookup for an address, the next 4 s later.
    gateway = GatewayService(registry, poll_interval=3600, key_cache=KeyCacheLimits(lookups_per_second=0.25))
    url = serve(gateway) + "/mcp/v1/acme/support/tools"
    async with httpx.AsyncClient() as http:
        assert (await http.get(url)).status_code == 401  # no key: no lookup; starts the watcher's only poll
        await asyncio.sleep(0.2)
        fresh, later = registry.create_api_key("acme"), registry.create_api_key("acme")
        assert (await http.get(url, headers={"Authorization": f"Bearer {fresh}"})).status_code == 200
        # Once looked up, a key is held: its next requests cost no lookup. A second new key finds the budget
        # spent (a flood of wrong keys costs the registry this much and no more): 503, as the key may be good.
        assert (await http.get(url, headers={"Authorization": f"Bearer {fresh}"})).status_code == 200
        busy = await http.get(url, headers={"Authorization": f"Bearer {later}"})
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        await asyncio.sleep(4.1)
        assert (await http.get(url, headers={"Authorization": f"Bearer {later}"})).status_code == 200


class _PausedLookups(Registry):
    """The real registry, whose key lookups wait for the test between reading and answering: a lookup and
    a revocation can then overlap the way they do under load."""

    def __init__(self, registry: Registry) -> None:
        super().__init__(registry.engine)
        self.read, self.answer = threading.Event(), threading.Event()

    def api_key(self, digest: str) -> KeyScope | None:
        found = super().api_key(digest)
        self.read.set()
        self.answer.wait(timeout=30)
        return found


async def test_a_key_revoked_while_it_is_looked_up_stays_revoked(registry: Registry, serve: Callable[..., str]) -> None:
    publish_demo(registry, serve(upstream.app))
    paused = _PausedLookups(registry)
    source = GatewayService(paused, poll_interval=3600).source
    key = registry.create_api_key("acme")
    lookup = asyncio.ensure_future(source.keys.confirm(key))
    assert await asyncio.to_thread(paused.read.wait, 30)  # the lookup found the key ...
    registry.revoke_api_key(key)
    await asyncio.to_thread(source.reload)  # ... and the revocation reached the replica before it answered
    paused.answer.set()
    assert await lookup is None
    assert source.keys.authenticate(key) is None  # the lookup did not bring the revoked key back


async def test_requests_that_come_with_a_new_key_while_it_is_looked_up_share_the_lookup(
    registry: Registry, serve: Callable[..., str]
) -> None:
    """A client's first requests with a key made a moment ago often come together (a POST and its GET stream):
    the one lookup answers them all, none is refused for arriving while it ran; another key's lookup runs beside
    it."""
    publish_demo(registry, serve(upstream.app))
    paused = _PausedLookups(registry)
    source = GatewayService(paused, poll_interval=3600).source
    key, other = registry.create_api_key("acme"), registry.create_api_key("acme")
    first = asyncio.ensure_future(source.keys.confirm(key))
    assert await asyncio.to_thread(paused.read.wait, 30)
    together = [asyncio.ensure_future(source.keys.confirm(key)) for _ in range(3)]
    beside = asyncio.ensure_future(source.keys.confirm(other))  # another key during the lookup: its own lookup
    paused.answer.set()
    answers = [await first, *[await request for request in together], await beside]
    assert all(answer is not None and answer.workspace == "acme" for answer in answers)


def test_keys_are_stored_as_digests(registry: Registry) -> None:
    registry.create_workspace("acme", "Acme")
    key = registry.create_api_key("acme")
    with registry.engine.connect() as connection:
        stored = connection.exec_driver_sql("SELECT digest FROM api_keys").scalar_one()
    assert key not in stored and len(stored) == 64


async def test_official_client_lists_and_calls_through_to_the_upstream(gateway: tuple[str, str, Registry]) -> None:
    url, _, _ = gateway
    for mode in ("auto", "legacy"):
        async with Client(url, mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            user = await client.call_tool("get_user", {"id": 3})
            users = await client.call_tool("list_users", {"limit": 5})
        assert list(tools) == list(operations("")) + []  # binding order
        assert tools["get_user"].annotations is not None and tools["get_user"].annotations.read_only_hint is True
        assert user.structured_content == {"result": {"id": 3, "name": "user3"}}
        expected = [{"id": i, "name": f"user{i}", "mail": f"u{i}@example.com", "internal": "x"} for i in (1, 2, 3)]
        assert users.structured_content == {"result": expected}
        assert "2 more items were left out" in users.content[1].text
    assert upstream.seen[-1]["headers"]["x-api-version"] == "2" and upstream.seen[-1]["query"] == {"limit": "5"}


async def test_body_header_template_and_path_encoding(gateway: tuple[str, str, Registry]) -> None:
    url, _, _ = gateway
    async with Client(url) as client:
        created = await client.call_tool("create_user", {"name": "Olena"})
    assert created.structured_content == {"id": 99, "name": "Olena"}
    assert upstream.seen[-1]["body"] == {"name": "Olena"} and upstream.seen[-1]["headers"]["x-trace"] == "crank-Olena"


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "fragment"),
    [
        ("get_user", {"id": 42}, "upstream_rejected", "user 42 does not exist"),
        ("broken", {}, "upstream_unavailable", "HTTP 500"),
        ("limited", {}, "upstream_rate_limited", "Wait 7 s"),
        ("html", {}, "upstream_bad_response", "JSON"),
    ],
)
async def test_upstream_failures_are_structured_errors(
    gateway: tuple[str, str, Registry], tool: str, arguments: dict[str, Any], code: str, fragment: str
) -> None:
    url, _, _ = gateway
    async with Client(url) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    error = json.loads(result.content[0].text)
    assert error["error_code"] == code and fragment in json.dumps(error)
    assert "Traceback" not in result.content[0].text and len(error["request_id"]) == 32


async def test_unknown_workspace_or_agent_is_404(gateway: tuple[str, str, Registry]) -> None:
    url, _, _ = gateway
    async with httpx.AsyncClient() as client:
        for path in ("/mcp/v1/acme/nobody/tools", "/mcp/v1/nowhere/support/tools"):
            response = await client.get(url.split("/mcp/")[0] + path)
            assert response.status_code == 404


async def test_the_routes_a_gateway_keeps_are_bounded_and_a_flood_of_paths_breaks_none(
    registry: Registry, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import crank.server

    monkeypatch.setattr(crank.server, "_ROUTE_CACHE_SIZE", 8)
    publish_demo(registry, serve(upstream.app))
    service = GatewayService(registry, require_api_keys=False)
    root = serve(service)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    async with httpx.AsyncClient(base_url=root, headers=headers) as client:
        for i in range(30):  # distinct paths, as a client probing for agents sends them
            assert (await client.post(f"/mcp/v1/acme/ghost{i}", json=listing)).status_code == 404
            assert len(service._routes) <= 8
        answer = await client.post("/mcp/v1/acme/support", json=listing)  # the real agent still routes
        assert answer.status_code == 200 and answer.json()["result"]["tools"]
        assert (await client.post("/mcp/v1/acme/support/tools")).status_code == 405  # the plain pair's route too


async def test_languages_come_from_the_binding(gateway: tuple[str, str, Registry]) -> None:
    url, _, _ = gateway
    async with httpx.AsyncClient() as client:
        tools = (await client.get(url + "/tools", headers={"Accept-Language": "uk"})).json()["tools"]
    assert tools[0]["title"] == "Користувач"


async def test_republish_and_rollback_while_a_client_keeps_calling(gateway: tuple[str, str, Registry]) -> None:
    url, base, registry = gateway
    seen_sets: list[frozenset[str]] = []
    errors: list[BaseException] = []
    stop = asyncio.Event()

    async def keep_listing() -> None:
        async with Client(url, cache=None) as client:
            while not stop.is_set():
                try:
                    names = frozenset(tool.name for tool in (await client.list_tools()).tools)
                    seen_sets.append(names)
                    result = await client.call_tool("get_user", {"id": 1})
                    assert result.structured_content == {"result": {"id": 1, "name": "user1"}}
                except Exception as exc:  # any failure during the switch is a bug
                    errors.append(exc)

    worker = asyncio.create_task(keep_listing())
    await asyncio.sleep(0.2)
    version = await asyncio.to_thread(publish_demo, registry, base, "v2_")
    assert version == 2
    await _until(lambda: any("v2_list_users" in names for names in seen_sets))
    await asyncio.to_thread(registry.rollback, "acme", "support", 1)
    count = len(seen_sets)
    await _until(lambda: len(seen_sets) > count and "list_users" in seen_sets[-1])
    stop.set()
    await worker
    assert errors == []
    old = frozenset(operations(""))
    new = frozenset(name if name == "get_user" else "v2_" + name for name in operations(""))
    assert all(names in (old, new) for names in seen_sets)  # always a whole version, never a mix


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the new version was not served in time"
        await asyncio.sleep(0.02)


async def test_client_headers_pass_through_only_where_the_operation_allows(
    registry: Registry, serve: Callable[..., str]
) -> None:
    base = serve(upstream.app)
    registry.create_workspace("acme", "Acme")
    listing = {"protocol": "http", "target": {"method": "GET", "url": base + "/users"},
               "input_schema": {"type": "object"}}  # fmt: skip
    registry.put_operation("acme", "open", {**listing, "execution_config": {"forward_headers": ["X-Tenant"]}})
    registry.put_operation("acme", "closed", listing)
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "open"}, {"operation": "closed"}]})
    registry.publish("acme", "desk", check=lambda runtime: build_catalog(runtime, CHECK_CLIENT) and None)
    key = registry.create_api_key("acme")
    url = serve(GatewayService(registry, poll_interval=0.05)) + "/mcp/v1/acme/desk/call"
    headers = {"Authorization": f"Bearer {key}", "X-Tenant": "t-42", "X-Other": "no"}
    async with httpx.AsyncClient(headers=headers) as client:
        await client.post(url, json={"name": "open", "arguments": {}})
        forwarded = upstream.seen[-1]["headers"]
        await client.post(url, json={"name": "closed", "arguments": {}})
        kept = upstream.seen[-1]["headers"]
    assert forwarded["x-tenant"] == "t-42" and "x-other" not in forwarded
    assert "authorization" not in forwarded  # the caller's Crank key never goes upstream
    assert "x-tenant" not in kept


def test_credentials_cannot_be_forwarded(registry: Registry) -> None:
    registry.create_workspace("acme", "Acme")
    config = {"forward_headers": ["Authorization", "Cookie"]}
    registry.put_operation(
        "acme", "leaky", {"protocol": "http", "target": {"url": "http://u/x"}, "execution_config": config}
    )
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "leaky"}]})
    with pytest.raises(Exception, match="forward_headers may not include authorization, cookie"):
        registry.publish("acme", "desk", check=lambda runtime: build_catalog(runtime, CHECK_CLIENT) and None)
    assert registry.published() == []


# -- result formats ----------------------------------------------------------------------------------


async def test_a_list_cut_short_comes_in_the_requested_format(gateway: tuple[str, str, Registry]) -> None:
    url, _, _ = gateway
    expected = [{"id": i, "name": f"user{i}", "mail": f"u{i}@example.com", "internal": "x"} for i in (1, 2, 3)]
    async with Client(url + "?format=markdown") as client:
        users = await client.call_tool("list_users", {"limit": 5})
    table, note = (block.text for block in users.content)  # type: ignore[union-attr]
    assert table == render(expected, "markdown") and table.startswith("| id | name | mail | internal |")
    assert note == "2 more items were left out; narrow the query to see them."
    assert users.structured_content == {"result": expected}
    async with httpx.AsyncClient() as http:
        call = {"name": "list_users", "arguments": {"limit": 5}}
        plain = (await http.post(url + "/call", json=call, headers={"X-Mcp-Format": "toon"})).json()
    assert [block["text"] for block in plain["content"]] == [render(expected, "toon"), note]


def publish_formats(registry: Registry, base: str, operation_format: str, binding_format: str | None) -> None:
    listing = {"protocol": "http", "target": {"method": "GET", "url": base + "/users"}, "description": "Users.",
               "input_schema": {"type": "object"}, "output_mapping": {"select": "items[:2].{id: id, name: name}"},
               }  # fmt: skip
    registry.put_workspace("acme", "Acme")
    registry.put_operation("acme", "plain_users", listing)
    registry.put_operation("acme", "users", {**listing, "format": operation_format})
    bindings = [{"operation": "plain_users"}, {"operation": "users"}, {"operation": "users", "tool_name": "tooned"}]
    if binding_format is not None:
        bindings[2]["format"] = binding_format
    registry.put_agent("acme", "desk", {"description": "Users.", "bindings": bindings})
    publish_agent(registry, "acme", "desk")


async def test_the_binding_format_overrides_the_operations_and_a_request_overrides_both(
    registry: Registry, serve: Callable[..., str]
) -> None:
    publish_formats(registry, serve(upstream.app), "markdown", "toon")
    url = serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False)) + "/mcp/v1/acme/desk"
    rows = [{"id": 1, "name": "user1"}, {"id": 2, "name": "user2"}]
    async with Client(url) as client:
        texts = [(await client.call_tool(name, {})).content[0].text for name in ("plain_users", "users", "tooned")]  # type: ignore[union-attr]
    assert texts == [render(rows, "json"), render(rows, "markdown"), render(rows, "toon")]
    async with httpx.AsyncClient() as http:
        asked = await http.post(url + "/call?format=pretty_json", json={"name": "tooned", "arguments": {}})
    assert asked.json()["content"][0]["text"] == render(rows, "pretty_json")


@pytest.mark.parametrize(("operation_format", "binding_format"), [("xml", None), ("json", "yaml")])
def test_an_unknown_format_fails_the_publish(registry: Registry, operation_format: str, binding_format: str) -> None:
    wrong = binding_format or operation_format
    with pytest.raises(ConfigurationError, match=rf"unknown result format '{wrong}' in tool '(users|tooned)'; allowed"):
        publish_formats(registry, "http://upstream.test", operation_format, binding_format)
    assert registry.published() == []


async def test_the_format_example_of_the_docs_applies_and_serves(
    registry: Registry, serve: Callable[..., str], tmp_path: Path
) -> None:
    page = (Path(__file__).parents[2] / "docs" / "gateway.md").read_text()
    section = page[page.index("### Result formats") :]
    start = section.index("```yaml\n") + len("```yaml\n")
    (tmp_path / "catalog.yaml").write_text(section[start : section.index("\n```", start)])
    catalog = load_catalog_file(tmp_path / "catalog.yaml", variables={"PEOPLE_API": serve(upstream.app)})
    apply_catalog(registry, catalog, base_dir=tmp_path)
    url = serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False)) + "/mcp/v1/people/desk"
    rows = [{"id": 1, "name": "user1"}, {"id": 2, "name": "user2"}]
    note = "5 more items were left out; narrow the query to see them."
    async with Client(url) as client:
        table = await client.call_tool("list_users", {})
        compact = await client.call_tool("list_users_compact", {})
    assert [block.text for block in table.content] == [render(rows, "markdown"), note]  # type: ignore[union-attr]
    assert [block.text for block in compact.content] == [render(rows, "toon"), note]  # type: ignore[union-attr]


async def test_a_wrong_mcp_path_says_the_url_form_and_what_is_unknown_where_the_key_may_know(
    registry: Registry, serve: Callable[..., str]
) -> None:
    base = serve(upstream.app)
    publish_demo(registry, base)
    everything, limited = registry.create_api_key("acme"), registry.create_api_key("acme", agents=["support"])
    root = serve(GatewayService(registry, poll_interval=0.05))
    form = "/mcp/v1/{workspace}/{agent}"
    async with httpx.AsyncClient() as http:
        elsewhere = await http.get(root + "/mcp/acme")
        assert elsewhere.status_code == 404 and form in elsewhere.json()["error"]["message"]
        ghost = await http.get(root + "/mcp/v1/acme/ghost/tools", headers={"Authorization": f"Bearer {everything}"})
        message = ghost.json()["error"]["message"]
        assert ghost.status_code == 404 and "no published agent 'ghost'" in message and form in message
        hidden = await http.get(root + "/mcp/v1/acme/ghost/tools", headers={"Authorization": f"Bearer {limited}"})
        assert hidden.json()["error"]["message"] == f"No MCP endpoint at this path (MCP endpoints are at {form})"
