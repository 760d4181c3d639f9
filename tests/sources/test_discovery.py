"""Discovery mode end to end: an agent published with `mode: discovery`, served by the gateway, called by the
official MCP client (auto and legacy mode) through search_operations, get_operation_schema and
call_operation against a real upstream on loopback: the same validation, confirmation, idempotency,
mappings, structured errors and metrics as a direct tool."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import check_runtime, publish_agent
from crank.gateway.safety import CONFIRMATION_ARGUMENT
from crank.mcp import EndpointOptions, MCPEndpoint
from crank.registry import Registry
from crank.registry.runtime import load_runtime
from crank.server import GatewayService
from crank.sources.agents import build_catalog
from crank.sources.discovery import CALL_TOOL, SCHEMA_TOOL, SEARCH_TOOL
from mcp import Client

pytestmark = pytest.mark.anyio


class Upstream:
    """Counts what it is asked to create and delete."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.app = Starlette(routes=[
            Route("/records", self.create, methods=["POST"]),
            Route("/records/{id}", self.get, methods=["GET"]),
            Route("/records/{id}", self.delete, methods=["DELETE"]),
        ])  # fmt: skip

    async def create(self, request: Request) -> Response:
        record = {"body": await request.json(), "key": request.headers.get("idempotency-key")}
        self.created.append(record)
        return JSONResponse({"id": len(self.created), **record["body"]}, status_code=201)

    async def get(self, request: Request) -> Response:
        return JSONResponse({"id": request.path_params["id"], "title": "Hello", "internal": "not for models"})

    async def delete(self, request: Request) -> Response:
        self.deleted.append(request.path_params["id"])
        return JSONResponse({"deleted": request.path_params["id"]})


def operations(base: str) -> dict[str, dict[str, Any]]:
    key = {"type": "string", "description": "A new unique id per intended record."}
    record = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "pages": {"type": "integer", "minimum": 1}, "request_id": key},
        "required": ["title"],
    }
    by_id = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    return {
        "create_record": {"protocol": "http", "target": {"method": "POST", "url": base + "/records"},
                          "description": "Create a record with a title.", "input_schema": record,
                          "execution_config": {"idempotency": {"argument": "request_id"}}},
        "get_record": {"protocol": "http", "target": {"method": "GET", "url": base + "/records/{id}"},
                       "description": "Get one record by its id.", "input_schema": by_id,
                       "output_mapping": {"select": "{id: id, title: title}"}},
        "delete_record": {"protocol": "http", "target": {"method": "DELETE", "url": base + "/records/{id}"},
                          "description": "Delete a record for good.", "input_schema": by_id},
    }  # fmt: skip


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def gateway(registry: Registry, serve: Callable[..., str], upstream: Upstream) -> str:
    base = serve(upstream.app)
    registry.create_workspace("acme", "Acme")
    for name, spec in operations(base).items():
        registry.put_operation("acme", name, spec)
    bindings = [{"operation": name} for name in operations(base)]
    registry.put_agent("acme", "records", {"description": "Records", "mode": "discovery", "bindings": bindings})
    registry.publish("acme", "records", check=check_runtime)
    return serve(GatewayService(registry, poll_interval=0.05, require_api_keys=False)) + "/mcp/v1/acme/records"


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    payload: dict[str, Any] = json.loads(result.content[0].text)
    return payload


async def test_a_discovery_agent_lists_three_tools_and_finds_its_operations(gateway: str) -> None:
    for mode in ("auto", "legacy"):
        async with Client(gateway, mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            found = await client.call_tool(SEARCH_TOOL, {"query": "remove a record", "limit": 2})
            schema = await client.call_tool(SCHEMA_TOOL, {"name": "delete_record"})
        assert list(tools) == [SEARCH_TOOL, SCHEMA_TOOL, CALL_TOOL]
        assert "Records" in (tools[SEARCH_TOOL].description or "")
        answer = found.structured_content
        assert answer is not None and answer["operations"][0] == {
            "name": "delete_record",
            "summary": "Delete a record for good.",
        }
        assert len(answer["operations"]) == 2 and all(set(op) == {"name", "summary"} for op in answer["operations"])
        described = schema.structured_content
        assert described is not None and described["name"] == "delete_record"
        assert (
            described["inputSchema"]["required"] == ["id"]
            and CONFIRMATION_ARGUMENT in described["inputSchema"]["properties"]
        )


async def test_a_destructive_operation_through_discovery_needs_confirmation(gateway: str, upstream: Upstream) -> None:
    for mode, record in (("auto", "7"), ("legacy", "8")):
        async with Client(gateway, mode=mode) as client:
            first = await client.call_tool(CALL_TOOL, {"name": "delete_record", "arguments": {"id": record}})
            error = error_of(first)
            assert error["error_code"] == "confirmation_required" and record not in upstream.deleted
            token = error["details"]["confirmation_token"]
            wrong = await client.call_tool(
                CALL_TOOL, {"name": "delete_record", "arguments": {"id": "other", CONFIRMATION_ARGUMENT: token}}
            )
            assert error_of(wrong)["error_code"] == "confirmation_invalid" and upstream.deleted.count(record) == 0
            again = await client.call_tool(CALL_TOOL, {"name": "delete_record", "arguments": {"id": record}})
            token = error_of(again)["details"]["confirmation_token"]
            done = await client.call_tool(
                CALL_TOOL, {"name": "delete_record", "arguments": {"id": record, CONFIRMATION_ARGUMENT: token}}
            )
        assert not done.is_error and done.structured_content == {"deleted": record}
        assert upstream.deleted.count(record) == 1


async def test_an_idempotent_call_through_discovery_takes_effect_once(gateway: str, upstream: Upstream) -> None:
    arguments = {"title": "Dune", "request_id": "order-1"}
    results = []
    for mode in ("auto", "legacy"):
        async with Client(gateway, mode=mode) as client:
            results.append(await client.call_tool(CALL_TOOL, {"name": "create_record", "arguments": arguments}))
            reused = await client.call_tool(
                CALL_TOOL, {"name": "create_record", "arguments": {**arguments, "title": "Other"}}
            )
            assert error_of(reused)["error_code"] == "idempotency_key_reused"
    assert [result.structured_content for result in results] == [{"id": 1, "title": "Dune"}] * 2
    assert upstream.created == [{"body": {"title": "Dune"}, "key": "order-1"}]  # the key goes in its header


async def test_invalid_arguments_through_discovery_come_back_with_their_paths(gateway: str, upstream: Upstream) -> None:
    for mode in ("auto", "legacy"):
        async with Client(gateway, mode=mode) as client:
            invalid = await client.call_tool(
                CALL_TOOL, {"name": "create_record", "arguments": {"pages": 0, "request_id": 5}}
            )
            unknown = await client.call_tool(CALL_TOOL, {"name": "create_recrod", "arguments": {}})
            unknown_schema = await client.call_tool(SCHEMA_TOOL, {"name": "create_recrod"})
            envelope = await client.call_tool(CALL_TOOL, {"arguments": {}})
        error = error_of(invalid)
        assert error["error_code"] == "invalid_arguments" and error["error_class"] == "schema_validation"
        assert "create_record" in error["message"]
        assert sorted(detail["path"] for detail in error["details"]) == ["$.pages", "$.request_id", "$.title"]
        for refused in (error_of(unknown), error_of(unknown_schema)):
            assert refused["error_code"] == "unknown_operation" and refused["recoverable"] is True
            assert SEARCH_TOOL in refused["suggested_action"] and refused["details"][0]["path"] == "$.name"
        assert error_of(envelope)["details"] == [{"path": "$.name", "message": "required property is missing"}]
    assert upstream.created == []


async def test_mappings_apply_and_metrics_are_labelled_by_the_real_operation(gateway: str) -> None:
    async with Client(gateway) as client:
        got = await client.call_tool(CALL_TOOL, {"name": "get_record", "arguments": {"id": "4"}})
        await client.call_tool(CALL_TOOL, {"name": "get_record", "arguments": {}})
        await client.call_tool(CALL_TOOL, {"name": "nothing_here", "arguments": {}})
        await client.call_tool(SEARCH_TOOL, {"query": "record"})
    assert got.structured_content == {"id": "4", "title": "Hello"}  # the output mapping's select
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(gateway.split("/mcp/")[0] + "/metrics")).text
    pattern = r'crank_tool_calls_total\{agent="records",outcome="(\w+)",tool="(\w+)",workspace="acme"\} (\S+)'
    calls = {(tool, outcome): float(value) for outcome, tool, value in re.findall(pattern, metrics)}
    assert calls[("get_record", "ok")] == 1 and calls[("get_record", "error")] == 1
    assert calls[(SEARCH_TOOL, "ok")] == 1
    assert calls[(CALL_TOOL, "error")] == 1 and calls.get((CALL_TOOL, "ok"), 0) == 0  # counted under the operation
    assert 'error_code="invalid_arguments",tool="get_record"' in metrics
    assert f'error_code="unknown_operation",tool="{CALL_TOOL}"' in metrics


async def test_a_request_format_reaches_the_operation(gateway: str) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            gateway + "/call",
            json={"name": CALL_TOOL, "arguments": {"name": "get_record", "arguments": {"id": "4"}}},
            headers={"X-Mcp-Format": "pretty_json"},
        )
    assert answer.json()["content"][0]["text"] == json.dumps({"id": "4", "title": "Hello"}, indent=2)


def test_the_mode_is_an_agent_setting_of_the_draft_and_old_views_are_direct(registry: Registry) -> None:
    registry.create_workspace("acme", "Acme")
    registry.put_operation("acme", "get_record", operations("http://127.0.0.1:9")["get_record"])
    registry.put_agent("acme", "records", {"bindings": [{"operation": "get_record"}]})
    assert registry.agent("acme", "records")["mode"] == "direct"
    assert registry.draft_runtime("acme", "records").agent.mode == "direct"
    registry.edit_agent("acme", "records", lambda spec: {**spec, "mode": "discovery"})
    report = publish_agent(registry, "acme", "records")
    assert sorted(name for name, _ in report.catalog.tools) == sorted([SEARCH_TOOL, SCHEMA_TOOL, CALL_TOOL])
    view = registry.published()[0].runtime
    assert view.agent.mode == "discovery"
    stored = view.to_json()
    assert stored["agent"]["mode"] == "discovery" and load_runtime(stored) == view
    del stored["agent"]["mode"]  # a view written before the setting existed
    assert load_runtime(stored).agent.mode == "direct"


async def test_call_operation_answers_in_the_endpoints_default_format(
    registry: Registry, serve: Callable[..., str], upstream: Upstream, gateway: str
) -> None:
    """The result format has one rule (`CallContext.result_format`): an operation run through discovery is
    formatted as the endpoint's `default_format` says when neither the request nor the tool chooses."""
    catalog = build_catalog(registry.draft_runtime("acme", "records"))
    url = serve(MCPEndpoint(catalog, EndpointOptions(default_format="pretty_json")))
    async with httpx.AsyncClient() as http:
        call = {"name": CALL_TOOL, "arguments": {"name": "get_record", "arguments": {"id": "4"}}}
        answer = await http.post(url + "/call", json=call)
    assert answer.json()["content"][0]["text"] == json.dumps({"id": "4", "title": "Hello"}, indent=2)
