"""The typed runtime view: a publish writes format 2; views written before it (format 1, plain dicts) are
still read and served, on SQLite and on PostgreSQL.

`runtime_v1_bookshop.json` and `runtime_v1_desk.json` are views as the code at e5b7c84 (before the typed
view) published them, with `http://127.0.0.1:9` as the upstream: the demo catalog applied with
`CRANK_DEMO_API=http://127.0.0.1:9/demo-api`, and the agent `desk` published from `desk_drafts` below.
The tests write them into the registry's tables with SQL, as that code left them, and serve them.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import DateTime, bindparam, text
from starlette.applications import Starlette
from starlette.routing import Mount

from crank.demo.api import create_app
from crank.exceptions import ConfigurationError
from crank.registry import FORMAT_VERSION, Registry, RuntimeView, load_runtime
from crank.registry.models import JSONType
from crank.registry.runtime import BodyConfig
from crank.server import GatewayService
from crank.types import JSONObject
from mcp import Client
from tests.gateway import upstream

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def upstream_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator gives the `UPSTREAM_*` variables to the workspace of these agents (crank.gateway.secrets)."""
    monkeypatch.setenv("CRANK_SECRET_ENV_PREFIX", "acme:UPSTREAM_")


FIXTURES = Path(__file__).parent
CAPTURED_BASE = "http://127.0.0.1:9"


def stored_view(name: str, base: str = CAPTURED_BASE) -> JSONObject:
    """A captured format-1 view, its upstream moved to `base` (a server of the test)."""
    view: JSONObject = json.loads((FIXTURES / f"runtime_v1_{name}.json").read_text().replace(CAPTURED_BASE, base))
    return view


def desk_drafts(base: str) -> tuple[dict[str, JSONObject], JSONObject]:
    """The operation drafts and the agent draft that e5b7c84 published as `runtime_v1_desk.json`."""
    user = {"type": "object", "properties": {"id": {"type": "integer", "description": "The user's id."}},
            "required": ["id"]}  # fmt: skip
    operations: dict[str, JSONObject] = {
        "list_users": {
            "protocol": "http", "target": {"method": "GET", "url": base + "/users"},
            "description": "Lists users with their e-mail. Use it to find a user's id.",
            "input_schema": {"type": "object",
                             "properties": {"limit": {"type": "integer", "description": "At most this many."}}},
            "input_mapping": [{"from": "limit", "to": "query.limit"}, {"value": "2", "to": "header.X-Api-Version"},
                              {"template": "crank-{limit}", "to": "header.X-Trace"}],
            "output_schema": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "integer"}, "mail": {"type": "string"}}}},
            "output_mapping": {"select": "items[].{id: id, email: email}", "rename": {"email": "mail"},
                               "max_items": 2},
            "execution_config": {"timeout": 5, "retries": 2, "forward_headers": ["X-Tenant"],
                                 "auth": {"type": "header", "name": "X-Api-Key", "secret": "env:UPSTREAM_KEY"}},
            "annotations": {"readOnlyHint": True, "openWorldHint": True},
            "samples": [{"limit": 2}],
        },
        "create_user": {
            "protocol": "http", "target": {"method": "POST", "url": base + "/users"},
            "description": "Creates a user. Use it when the user asks to add someone.",
            "input_schema": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "description": "Full name."},
                "request_id": {"type": "string", "description": "A new id per user."}}},
            "input_mapping": [{"from": "name", "to": "body.name"}],
            "execution_config": {"idempotency": {"argument": "request_id", "header": "X-Request-Key", "window": 60},
                                 "idempotent": False, "auth": {"type": "bearer", "secret": "env:UPSTREAM_TOKEN"}},
        },
        "delete_user": {
            "protocol": "http", "target": {"method": "DELETE", "url": base + "/users/{id}"},
            "description": "Deletes a user. Use it only when the user asks to remove someone.", "input_schema": user,
            "execution_config": {"confirmation_ttl": 120},
        },
        "replace_user": {
            "protocol": "http", "target": {"method": "PUT", "url": base + "/users/{id}"},
            "description": "Replaces a user's record. Use it to correct a user.", "input_schema": user,
            "execution_config": {"confirmation": True, "confirmation_ttl": 30, "timeout": 2.5},
            "annotations": {"idempotentHint": True},
        },
        "wipe_cache": {
            "protocol": "http", "target": {"method": "DELETE", "url": base + "/cache"},
            "description": "Empties the cache. Use it when data looks stale.",
            "input_schema": {"type": "object", "properties": {}},
            "execution_config": {"confirmation": False},
        },
        "search_catalog": {
            "protocol": "jsonrpc", "target": {"url": base + "/rpc", "method": "Catalog.search"},
            "description": "Searches the catalog. Use it to find products.",
            "input_schema": {"type": "object", "properties": {"query": {"type": "string", "description": "Words."}}},
            "execution_config": {"idempotent": True, "retries": 1, "timeout": 3},
        },
    }  # fmt: skip
    agent: JSONObject = {
        "description": "Look after users.", "token_budget": 2500,
        "bindings": [
            {"operation": "list_users", "title": "Users",
             "translations": {"uk": {"title": "Користувачі", "description": "Перелік користувачів."}}},
            {"operation": "create_user", "tool_name": "add_user",
             "description": "Adds a user. Use it when asked to add someone."},
            {"operation": "delete_user", "annotations": {"destructiveHint": True}},
            {"operation": "replace_user", "annotations": {"destructiveHint": True, "title": "Replace"}},
            {"operation": "wipe_cache"},
            {"operation": "search_catalog"},
        ],
    }  # fmt: skip
    return operations, agent


def insert_as_e5b7c84(registry: Registry, view: JSONObject, drafts: tuple[dict[str, JSONObject], JSONObject]) -> None:
    """The rows the code at e5b7c84 left after publishing `view` from `drafts`: workspace, operations and
    agent with the view's own ids, the agent serving version 1, and the generation bumped."""
    operations, agent = drafts
    ws, info = view["workspace"], view["agent"]
    ids = {tool["tool_name"]: tool["operation_id"] for tool in view["tools"]}
    by_binding = {
        binding.get("tool_name") or binding["operation"]: binding["operation"] for binding in agent["bindings"]
    }
    operation_ids = {by_binding[name]: operation_id for name, operation_id in ids.items() if name in by_binding}
    now = datetime.datetime.now(datetime.UTC)
    json_params = [bindparam(name, type_=JSONType) for name in ("spec", "runtime")]
    with registry.engine.begin() as connection:

        def sql(statement: str, **values: Any) -> None:
            used = [param for param in json_params if f":{param.key}" in statement]
            stamped = [bindparam("now", type_=DateTime(timezone=True))] if ":now" in statement else []
            connection.execute(text(statement).bindparams(*used, *stamped), {**values, "now": now})

        sql(
            "INSERT INTO workspaces (id, slug, name, default_language, created_at) "
            "VALUES (:id, :slug, :slug, :lang, :now)",
            id=ws["id"],
            slug=ws["slug"],
            lang=ws["default_language"],
        )
        for name, spec in operations.items():
            sql(
                "INSERT INTO operations (id, workspace_id, name, spec, updated_at) "
                "VALUES (:id, :ws, :name, :spec, :now)",
                id=operation_ids.get(name, name),
                ws=ws["id"],
                name=name,
                spec=spec,
            )
        sql(
            "INSERT INTO agents (id, workspace_id, slug, spec, published_version) VALUES (:id, :ws, :slug, :spec, 1)",
            id=info["id"],
            ws=ws["id"],
            slug=info["slug"],
            spec=agent,
        )
        sql(
            "INSERT INTO agent_versions (id, agent_id, version, runtime, created_at) "
            "VALUES (:id, :agent, 1, :runtime, :now)",
            id=info["id"][:30] + "v1",
            agent=info["id"],
            runtime=view,
        )
        sql("UPDATE registry_state SET generation = generation + 1 WHERE id = 1")


def without_ids(view: RuntimeView) -> JSONObject:
    data = view.to_json()
    data["workspace"]["id"] = data["agent"]["id"] = ""
    for tool in data["tools"]:
        tool["workspace_id"] = tool["agent_id"] = tool["operation_id"] = ""
    return data


# -- reading -----------------------------------------------------------------------------------------


def test_a_publish_writes_format_3_for_an_agent_with_limits_and_format_2_otherwise(registry: Registry) -> None:
    operations, agent = desk_drafts("http://upstream.test")
    registry.put_workspace("acme", "Acme")
    registry.put_operations("acme", operations)
    registry.put_agent("acme", "desk", agent)
    registry.publish("acme", "desk")
    registry.edit_agent("acme", "desk", lambda spec: {**spec, "limits": {"rate": {"calls": 5, "window": 1}}})
    registry.publish("acme", "desk")
    with registry.engine.connect() as connection:
        rows = connection.execute(text("SELECT runtime FROM agent_versions ORDER BY version")).all()
    plain, limited = (row[0] if isinstance(row[0], dict) else json.loads(row[0]) for row in rows)
    # Without limits, nothing of format 3 is used: the Crank before it (format 2) serves it in a rolling upgrade.
    assert plain["format_version"] == 2 and "limits" not in plain["agent"]
    assert limited["format_version"] == 3 and limited["agent"]["limits"]["rate"]["calls"] == 5
    assert load_runtime(limited) == registry.published()[0].runtime == registry.draft_runtime("acme", "desk")
    assert "samples" not in json.dumps(plain) + json.dumps(limited)


def test_a_view_is_written_as_format_5_only_when_a_tool_sends_a_body_that_is_not_json() -> None:
    """Format 4 had no `execution_config.body`: a view whose bodies are all JSON is written without it (a Crank
    before format 5 reads it in a rolling upgrade); one with a form body is format 5, and reads back the same."""
    view = load_runtime(stored_view("desk"))
    assert all("body" not in tool["execution_config"] for tool in view.to_json()["tools"])
    form = {"content_type": "application/x-www-form-urlencoded", "deep_objects": ["address"]}
    tools = [tool.model_copy(update={"execution_config": tool.execution_config.model_copy(
        update={"body": BodyConfig.model_validate(form)})}) if tool.tool_name == "add_user" else tool
        for tool in view.tools]  # fmt: skip
    written = view.model_copy(update={"tools": tuple(tools)}).to_json()
    assert written["format_version"] == 5
    bodies = {tool["tool_name"]: tool["execution_config"]["body"] for tool in written["tools"]}
    assert bodies["add_user"] == {**form, "deep_objects": ["address"], "files": []}
    assert bodies["list_users"] == {"content_type": "application/json", "deep_objects": [], "files": []}
    assert load_runtime(written).tools == tuple(tools)


def test_format_1_is_read_with_every_execution_setting() -> None:
    view = load_runtime(stored_view("desk"))
    tools = {tool.tool_name: tool for tool in view.tools}
    listing = tools["list_users"].execution_config
    assert (listing.timeout, listing.retries, listing.forward_headers) == (5.0, 2, ("X-Tenant",))
    assert listing.auth is not None and (listing.auth.type, listing.auth.name) == ("header", "X-Api-Key")
    adding = tools["add_user"].execution_config
    assert adding.idempotent is False and adding.idempotency is not None
    assert (adding.idempotency.argument, adding.idempotency.header, adding.idempotency.window) == (
        "request_id", "X-Request-Key", 60.0
    )  # fmt: skip
    assert tools["delete_user"].execution_config.confirmation.required is None  # DELETE asks by itself
    assert tools["delete_user"].execution_config.confirmation.ttl == 120
    assert tools["replace_user"].execution_config.confirmation.required is True
    assert tools["wipe_cache"].execution_config.confirmation.required is False
    assert tools["search_catalog"].http_method == "POST" and tools["search_catalog"].target.method == "Catalog.search"
    assert tools["replace_user"].annotations.title == "Replace" and view.agent.token_budget == 2500
    assert view.to_json()["format_version"] == 2 and load_runtime(view.to_json()) == view  # no limits: format 2


def test_format_2_is_read_as_format_3_without_the_agents_limits() -> None:
    view = load_runtime(stored_view("desk"))
    written_as_format_2 = view.to_json()  # an agent without limits is written as format 2
    assert written_as_format_2["format_version"] == 2 and "limits" not in written_as_format_2["agent"]
    assert load_runtime(written_as_format_2) == view and view.agent.limits is None


def test_format_1_reads_as_what_the_same_drafts_publish_now(registry: Registry) -> None:
    operations, agent = desk_drafts(CAPTURED_BASE)
    registry.put_workspace("acme", "Acme", token_budget=3000)
    registry.put_operations("acme", operations)
    registry.put_agent("acme", "desk", agent)
    assert without_ids(load_runtime(stored_view("desk"))) == without_ids(registry.draft_runtime("acme", "desk"))


def test_an_unchanged_draft_over_a_format_1_version_publishes_nothing(registry: Registry) -> None:
    insert_as_e5b7c84(registry, stored_view("desk"), desk_drafts(CAPTURED_BASE))
    assert registry.publish("acme", "desk", skip_unchanged=True) == 1
    assert registry.versions("acme", "desk") == [1]
    assert registry.publish("acme", "desk") == 2  # an explicit publish still writes, now in format 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format_version": 6}, r"^agent acme/desk: format_version 6 is not one this Crank reads .* a newer Crank"),
        ({"tools": "none"}, r"^agent acme/desk: tools must be a list"),
        ({"agent": {"slug": "desk"}}, r"^agent acme/desk: agent\.id: Field required"),
    ],
)
def test_a_view_that_cannot_be_read_says_why(change: JSONObject, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_runtime({**stored_view("desk"), **change}, where="agent acme/desk")


# -- serving -----------------------------------------------------------------------------------------


def bookshop_api() -> Starlette:
    """The demo REST API where the captured bookshop view calls it (under /demo-api)."""
    return Starlette(routes=[Mount("/demo-api", app=create_app())])


async def test_a_format_1_bookshop_is_served_to_the_official_client(
    registry: Registry, serve: Callable[..., str]
) -> None:
    view = stored_view("bookshop", base=serve(bookshop_api()))
    insert_as_e5b7c84(registry, view, ({}, {"description": view["agent"]["description"], "bindings": []}))
    url = serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False)) + "/mcp/v1/demo/bookshop"
    async with Client(url) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        found = await client.call_tool("search_books", {"query": ""})
        book = await client.call_tool("get_book", {"book_id": 2})
        order = await client.call_tool("order_book", {"book_id": 2, "quantity": 1, "idempotency_key": "k-1"})
        again = await client.call_tool("order_book", {"book_id": 2, "quantity": 1, "idempotency_key": "k-1"})
        first = await client.call_tool("cancel_order", {"order_id": 1001})
        token = json.loads(first.content[0].text)["details"]["confirmation_token"]  # type: ignore[union-attr]
        cancelled = await client.call_tool("cancel_order", {"order_id": 1001, "_crank_confirmation_token": token})
    assert names == ["search_books", "get_book", "get_bestseller", "order_book", "get_order", "cancel_order"]
    assert found.structured_content is not None and len(found.structured_content["result"]) == 3
    assert found.content[1].text == "2 more items were left out; narrow the query to see them."  # type: ignore[union-attr]
    assert book.structured_content == {"result": {**_book(2)}}
    assert order.structured_content == again.structured_content  # one order: the key was seen before
    assert first.is_error and "confirmation_required" in first.content[0].text  # type: ignore[union-attr]
    assert cancelled.structured_content is not None and cancelled.structured_content["result"]["status"] == "cancelled"
    with registry.engine.connect() as connection:
        (row,) = connection.execute(text("SELECT runtime FROM agent_versions")).all()
    assert "format_version" not in str(row[0])  # served as it is stored, never rewritten


def _book(book_id: int) -> JSONObject:
    from crank.demo.api import BOOKS

    return next(book for book in BOOKS if book["id"] == book_id)


async def test_a_format_1_agent_keeps_its_execution_config(
    registry: Registry, serve: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = serve(upstream.app)
    insert_as_e5b7c84(registry, stored_view("desk", base), desk_drafts(base))
    monkeypatch.setenv("UPSTREAM_KEY", "key-1")
    monkeypatch.setenv("UPSTREAM_TOKEN", "token-1")
    root = serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False)) + "/mcp/v1/acme/desk"
    upstream.seen.clear()

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"X-Tenant": "t-7", "X-Other": "no"}) as http:
        async with Client(streamable_http_client(root, http_client=http)) as client:
            listed = await client.call_tool("list_users", {"limit": 4})
            listing = upstream.seen[-1]
            created = await client.call_tool("add_user", {"name": "Olena", "request_id": "r-1"})
            repeated = await client.call_tool("add_user", {"name": "Olena", "request_id": "r-1"})
            deleting = await client.call_tool("delete_user", {"id": 1})
            replacing = await client.call_tool("replace_user", {"id": 1})
            wiping = await client.call_tool("wipe_cache", {})
    assert listed.structured_content == {"result": [{"id": 1, "mail": "u1@example.com"},
                                                    {"id": 2, "mail": "u2@example.com"}]}  # fmt: skip
    assert "2 more items were left out" in listed.content[1].text  # type: ignore[union-attr]
    headers = listing["headers"]
    assert (headers["x-api-key"], headers["x-tenant"], headers["x-api-version"], headers["x-trace"]) == (
        "key-1", "t-7", "2", "crank-4"
    )  # fmt: skip
    assert "x-other" not in headers and listing["query"] == {"limit": "4"}
    creations = [seen for seen in upstream.seen if "body" in seen]
    assert len(creations) == 1 and created.structured_content == repeated.structured_content
    assert creations[0]["headers"]["authorization"] == "Bearer token-1"
    assert creations[0]["headers"]["x-request-key"] == "r-1"
    assert [_error(result)["details"]["expires_in"] for result in (deleting, replacing)] == [120, 30]
    assert _error(wiping)["error_code"] == "upstream_rejected"  # confirmation off: it went straight upstream


def _error(result: Any) -> JSONObject:
    assert result.is_error
    error: JSONObject = json.loads(result.content[0].text)
    return error


async def test_a_view_this_crank_cannot_read_fails_only_its_agent(
    registry: Registry, serve: Callable[..., str]
) -> None:
    view = stored_view("bookshop", base=serve(bookshop_api()))
    insert_as_e5b7c84(registry, view, ({}, {"bindings": []}))
    newer = stored_view("desk")
    newer["format_version"] = FORMAT_VERSION + 1
    insert_as_e5b7c84(registry, newer, desk_drafts(CAPTURED_BASE))
    root = serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False))
    async with httpx.AsyncClient() as http:
        served = await http.get(root + "/mcp/v1/demo/bookshop/tools")
        refused = await http.get(root + "/mcp/v1/acme/desk/tools")
    assert served.status_code == 200 and len(served.json()["tools"]) == 6
    assert refused.status_code == 404


def test_a_stored_version_heavier_than_todays_bound_is_still_read() -> None:
    """The agents' media bound applies to drafts and publishes: a version published before it is still served."""
    from crank.registry.runtime import MAX_AGENT_MEDIA, load_runtime

    documents = [{"uri": f"docs://{n}", "name": f"d{n}", "text": "x" * 250_000} for n in range(17)]
    stored = {"format_version": 4, "workspace": {"id": "w", "slug": "shop"},
              "agent": {"id": "a", "slug": "desk", "documents": documents}, "tools": []}  # fmt: skip
    view = load_runtime(stored)
    assert sum(len(document.text or "") for document in view.agent.documents) > MAX_AGENT_MEDIA
