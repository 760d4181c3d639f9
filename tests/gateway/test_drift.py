"""Answers that drift never break a client (issue 11, item 3) and problems that surface before the first call
(item 4): the official SDK client, in both modes, against an upstream that drifts on purpose and against
Prism's dynamic answers for a real API description; Accept; configuration_error; /readyz; bind; check."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import bind_tool, publish_agent
from crank.admin.changes import reimport
from crank.admin.check import check_agent
from crank.cli import main
from crank.exceptions import (
    LimitReachedError,
    RegistryNotFoundError,
    RPCToolError,
    StateStoreUnavailableError,
    ToolError,
)
from crank.registry import Registry
from crank.server import GatewayService
from mcp import Client
from tests import realapis
from tests.gateway import upstream

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.anyio
MODES = ["auto", "legacy"]
THING = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["id", "name"],
}
# What the drifting upstream answers, in turn: valid, a wrong type, a missing field, a list, nothing, a null.
ANSWERS: list[Any] = [
    {"id": 1, "name": "a"}, {"id": "secret-value", "name": "a"}, {"name": "a"}, [1, 2], None, {"id": 2, "name": None},
]  # fmt: skip
accepts: list[str] = []


def _drifting_app() -> Starlette:
    turns: dict[str, itertools.count[int]] = {}

    async def thing(request: Request) -> Response:
        turn = turns.setdefault(request.url.path, itertools.count())  # each path drifts in its own turn
        answer = ANSWERS[next(turn) % len(ANSWERS)]
        return Response(status_code=204) if answer is None else JSONResponse(answer)

    async def negotiated(request: Request) -> Response:
        """Offers XML first: only an Accept that names JSON gets JSON."""
        accept = request.headers.get("accept", "")
        accepts.append(accept)
        if "json" in accept:
            return JSONResponse({"id": 1, "name": "json"}, media_type=accept if "+json" in accept else None)
        return Response("<thing><id>1</id></thing>", media_type="application/xml")

    return Starlette(routes=[Route("/thing", thing), Route("/loose", thing), Route("/negotiated", negotiated)])


@pytest.fixture(autouse=True)
def secured(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator gives the variable of the `secured` operations to their workspace (crank.gateway.secrets)."""
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "acme:DRIFT_TEST_UNSET_TOKEN")


def _operation(url: str, **extra: Any) -> dict[str, Any]:
    # Published as written (compaction off): these tests are about the answers, not the schema's size.
    return {"protocol": "http", "target": {"method": "GET", "url": url}, "description": "A thing.",
            "input_schema": {"type": "object", "properties": {}}, "output_schema": THING,
            "compact": {"enabled": False}, **extra}  # fmt: skip


def _publish(registry: Registry, base: str) -> None:
    registry.create_workspace("acme", "Acme")
    operations = {
        "get_thing": _operation(base + "/thing"),
        "get_thing_loose": _operation(base + "/loose", execution_config={"output_schema": "omit"}),
        "get_negotiated": _operation(base + "/negotiated"),
        "get_vendor_json": _operation(base + "/negotiated", execution_config={"accept": "application/vnd.acme+json"}),
        "get_xml": _operation(base + "/negotiated", execution_config={"accept": "application/xml"}),
        "get_secured": _operation(
            base + "/thing", execution_config={"auth": {"type": "bearer", "secret": "env:DRIFT_TEST_UNSET_TOKEN"}}
        ),
    }
    for name, spec in operations.items():
        registry.put_operation("acme", name, spec)
    registry.put_agent("acme", "desk", {"bindings": [{"operation": name} for name in operations]})
    publish_agent(registry, "acme", "desk")


@pytest.fixture
def drifting(sqlite_registry: Registry, serve: Callable[..., str]) -> tuple[str, str]:
    _publish(sqlite_registry, serve(_drifting_app()))
    root = serve(GatewayService(sqlite_registry, poll_interval=0.05, require_api_keys=False))
    return root, root + "/mcp/v1/acme/desk"


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error is True and result.structured_content is None
    payload: dict[str, Any] = json.loads(result.content[0].text)
    assert payload["suggested_action"]
    return payload


@pytest.mark.parametrize("mode", MODES)
async def test_the_sdk_client_never_raises_on_drifted_answers(
    drifting: tuple[str, str], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    root, url = drifting
    wrapped = {"type": "object", "properties": {"result": THING}, "required": ["result"]}
    codes = []
    with caplog.at_level(logging.INFO, logger="crank"):
        async with Client(url, mode=mode) as client:
            for _ in range(2 * len(ANSWERS)):
                strict = await client.call_tool("get_thing", {})  # the SDK raises on content that fails the schema
                if strict.is_error:
                    error = _error(strict)
                    codes.append(error["error_code"])
                    assert error["error_class"] == "output_validation" and error["recoverable"] is False
                    assert error["details"]["violations"] and "secret-value" not in strict.content[0].text
                else:
                    jsonschema.validate(strict.structured_content, wrapped)
                loose = await client.call_tool("get_thing_loose", {})  # `omit`: no schema, every answer passes
                assert loose.is_error is False
    assert codes == ["output_schema_mismatch"] * 10  # all but the first answer of each round of six
    paths = {record.__dict__.get("paths", [None])[0] for record in caplog.records if record.levelname == "WARNING"}
    assert {"$.result.id", "$.result.name", "$.result"} <= paths
    assert "secret-value" not in caplog.text  # paths, never values
    metrics = httpx.get(root + "/metrics").text
    assert 'crank_tool_output_mismatches_total{agent="desk",tool="get_thing",workspace="acme"} 10.0' in metrics


async def test_a_mismatch_names_every_path(drifting: tuple[str, str]) -> None:
    _, url = drifting
    async with Client(url, mode="legacy") as client:
        results = [await client.call_tool("get_thing", {}) for _ in ANSWERS]
    violations = [_error(result)["details"]["violations"] for result in results[1:]]
    assert violations == [
        [{"path": "$.result.id", "message": 'value is not of type "integer"'}],
        [{"path": "$.result.id", "message": "required property is missing"}],
        [{"path": "$.result", "message": 'value is not of type "object"'}],
        [{"path": "$.result", "message": 'value is not of type "object"'}],
        [{"path": "$.result.name", "message": 'value is not of type "string"'}],
    ]


async def test_the_gateway_asks_for_json_unless_the_operation_says_otherwise(drifting: tuple[str, str]) -> None:
    _, url = drifting
    accepts.clear()
    async with Client(url, mode="legacy") as client:
        json_first = await client.call_tool("get_negotiated", {})
        vendor = await client.call_tool("get_vendor_json", {})
        xml = await client.call_tool("get_xml", {})
    assert accepts == ["application/json", "application/vnd.acme+json", "application/xml"]
    assert json_first.structured_content == {"result": {"id": 1, "name": "json"}}
    assert vendor.structured_content == {"result": {"id": 1, "name": "json"}}
    error = _error(xml)
    assert error["error_code"] == "upstream_bad_response"
    assert error["message"] == "The upstream did not answer with JSON (Content-Type: application/xml)."


async def test_a_missing_secret_is_a_configuration_error_and_not_ready(
    drifting: tuple[str, str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, url = drifting
    with caplog.at_level(logging.INFO, logger="crank"):
        async with Client(url, mode="auto") as client:
            result = await client.call_tool("get_secured", {})
    error = _error(result)
    assert (error["error_code"], error["error_class"]) == ("configuration_error", "configuration")
    assert "DRIFT_TEST_UNSET_TOKEN" not in result.content[0].text
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]
    ready = httpx.get(root + "/readyz")
    assert ready.status_code == 503
    assert ready.json() == {"status": "not_ready", "missing_secrets": [{
        "workspace": "acme", "agent": "desk", "operation": "get_secured", "tool": "get_secured",
        "reference": "env:DRIFT_TEST_UNSET_TOKEN",
        "problem": "environment variable 'DRIFT_TEST_UNSET_TOKEN' is not set"}]}  # fmt: skip
    monkeypatch.setenv("DRIFT_TEST_UNSET_TOKEN", "s3cr3t-value")
    assert httpx.get(root + "/readyz").json() == {"status": "ready"}
    async with Client(url, mode="auto") as client:
        assert (await client.call_tool("get_secured", {})).is_error in (False, True)  # it reaches the upstream now
    assert "s3cr3t-value" not in caplog.text


def test_publish_warns_about_secrets_that_do_not_resolve(sqlite_registry: Registry) -> None:
    _publish(sqlite_registry, "http://127.0.0.1:9")
    report = publish_agent(sqlite_registry, "acme", "desk")
    warnings = [finding for finding in report.findings if finding.rule == "unresolved-secret"]
    assert [(finding.tool, finding.severity) for finding in warnings] == [("get_secured", "warning")]
    assert "env:DRIFT_TEST_UNSET_TOKEN" in warnings[0].message


def test_bind_refuses_an_operation_that_does_not_exist(sqlite_registry: Registry, tmp_path: Path) -> None:
    _publish(sqlite_registry, "http://127.0.0.1:9")
    with pytest.raises(RegistryNotFoundError, match="no operation 'get_nothing'"):
        bind_tool(sqlite_registry, "acme", "desk", {"operation": "get_nothing"})
    env = {"CRANK_REGISTRY_URL": str(sqlite_registry.engine.url), "CRANK_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["agent", "bind", "acme", "newagent", "get_nothing"], env=env)
    assert result.exit_code == 1
    assert "no operation 'get_nothing' in workspace 'acme'" in result.output
    with pytest.raises(RegistryNotFoundError):
        sqlite_registry.agent("acme", "newagent")  # nothing was created


@pytest.mark.parametrize("mode", MODES)
async def test_prism_dynamic_answers_of_a_real_api_never_break_the_sdk_client(
    sqlite_registry: Registry, serve: Callable[..., str], mode: str
) -> None:
    with realapis.prism(realapis.APIS_GURU, dynamic=True) as upstream:
        sqlite_registry.create_workspace("guru", "APIs.guru")
        names = reimport(sqlite_registry, "guru", "openapi", str(realapis.APIS_GURU), base_url=upstream).names
        sqlite_registry.put_agent("guru", "catalog", {"bindings": [{"operation": name} for name in names]})
        publish_agent(sqlite_registry, "guru", "catalog")
        url = serve(GatewayService(sqlite_registry, require_api_keys=False)) + "/mcp/v1/guru/catalog"
        arguments = {"get_api": {"provider": "a.com", "api": "v1"}, "get_provider": {"provider": "a.com"},
                     "get_services": {"provider": "a.com"},
                     "get_service_api": {"provider": "a.com", "service": "s", "api": "v1"}}  # fmt: skip
        outcomes = set()
        async with Client(url, mode=mode) as client:
            for _ in range(3):  # dynamic mode: another answer each time
                for name in names:
                    result = await client.call_tool(name, arguments.get(name, {}))
                    outcomes.add("ok" if not result.is_error else _error(result)["error_code"])
    assert "ok" in outcomes
    assert outcomes <= {"ok", "output_schema_mismatch"}


def test_check_reports_answers_that_drift_from_prism(sqlite_registry: Registry, tmp_path: Path) -> None:
    with realapis.prism(realapis.APIS_GURU) as upstream:  # static: the document's examples
        sqlite_registry.create_workspace("guru", "APIs.guru")
        reimport(sqlite_registry, "guru", "openapi", str(realapis.APIS_GURU), base_url=upstream)
        metrics = sqlite_registry.operation("guru", "get_metrics")
        drifted = {**metrics["output_schema"], "required": ["numSpecs", "uptime_days"]}  # the upstream has none
        sqlite_registry.put_operation("guru", "get_metrics", {**metrics, "output_schema": drifted,
                                                              "compact": {"enabled": False}})  # fmt: skip
        services = sqlite_registry.operation("guru", "get_services")
        sqlite_registry.put_operation("guru", "get_services", {**services, "sample_arguments": {"provider": "a.com"}})
        bindings = [{"operation": name} for name in ("get_providers", "get_metrics", "get_services", "get_api")]
        sqlite_registry.put_agent("guru", "catalog", {"bindings": bindings})
        results = {result.tool: result for result in asyncio.run(check_agent(sqlite_registry, "guru", "catalog"))}
        env = {"CRANK_REGISTRY_URL": str(sqlite_registry.engine.url), "CRANK_DATA_DIR": str(tmp_path)}
        cli = CliRunner().invoke(main, ["check", "guru", "catalog"], env=env)
    assert results["get_providers"].status == "ok"
    assert results["get_services"].status == "ok"  # called with its sample
    assert results["get_metrics"].status == "drift"
    assert results["get_metrics"].violations == [
        {"path": "$.result.uptime_days", "message": "required property is missing"}
    ]
    assert results["get_api"].status == "skipped" and "sample_arguments" in results["get_api"].message
    assert cli.exit_code == 1
    assert "drift    get_metrics: $.result.uptime_days: required property is missing" in cli.output


def _tool_error_classes() -> list[type[ToolError]]:
    found, stack = [], [ToolError]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


# Tool errors made with arguments of their own, each with the suggestion it computes from them.
_OWN_ARGUMENTS: dict[type[ToolError], tuple[Any, ...]] = {
    LimitReachedError: ("key_rate", 7, "failed"),
    StateStoreUnavailableError: ("failed",),
}


def test_no_structured_error_can_be_made_without_a_suggested_action() -> None:
    for cls in _tool_error_classes():
        assert cls.default_action.strip(), cls
        if cls in _OWN_ARGUMENTS:
            assert "Nothing was sent" in cls(*_OWN_ARGUMENTS[cls]).suggested_action
        elif cls is not RPCToolError:
            assert cls("failed").suggested_action == cls.default_action
            assert cls("failed", suggested_action="").suggested_action == cls.default_action
            assert cls("failed", suggested_action="Do this.").to_payload("r")["suggested_action"] == "Do this."

    class Silent(ToolError):
        default_action = " "

    with pytest.raises(ValueError, match="non-empty suggested_action"):
        Silent("failed")


async def test_every_error_code_of_the_gateway_suggests_an_action(
    sqlite_registry: Registry, serve: Callable[..., str]
) -> None:
    import anyio

    async def slow(request: Request) -> Response:
        await anyio.sleep(2)
        return JSONResponse({})

    base = serve(upstream.app)
    slow_base = serve(Starlette(routes=[Route("/slow", slow)]))
    sqlite_registry.create_workspace("acme", "Acme")
    key = {"type": "object", "properties": {"id": {"type": "integer"}, "key": {"type": "string"}}, "required": ["id"]}
    operations: dict[str, dict[str, Any]] = {
        "get_user": {"protocol": "http", "target": {"url": base + "/users/{id}"}, "description": "A user.",
                     "input_schema": key, "output_schema": {"type": "object", "required": ["missing"]},
                     "compact": {"enabled": False}},
        "update_user": {"protocol": "http", "target": {"method": "POST", "url": base + "/users"}, "description": "x",
                        "input_schema": key, "execution_config": {"idempotency": {"argument": "key"}}},
        "delete_user": {"protocol": "http", "target": {"method": "DELETE", "url": base + "/users/{id}"},
                        "description": "x", "input_schema": key},
        "broken": {"protocol": "http", "target": {"url": base + "/broken"}, "description": "x"},
        "limited": {"protocol": "http", "target": {"url": base + "/limited"}, "description": "x"},
        "html": {"protocol": "http", "target": {"url": base + "/html"}, "description": "x"},
        "slow": {"protocol": "http", "target": {"url": slow_base + "/slow"}, "description": "x",
                 "execution_config": {"timeout": 0.2}},
        "mapped": {"protocol": "http", "target": {"url": base + "/users"}, "description": "x",
                   "output_mapping": {"select": "items[0].name.nope()"}},
        "secured": {"protocol": "http", "target": {"url": base + "/users"}, "description": "x",
                    "execution_config": {"auth": {"type": "bearer", "secret": "env:DRIFT_TEST_UNSET_TOKEN"}}},
    }  # fmt: skip
    for name, spec in operations.items():
        sqlite_registry.put_operation("acme", name, spec)
    sqlite_registry.put_agent("acme", "desk", {"bindings": [{"operation": name} for name in operations]})
    publish_agent(sqlite_registry, "acme", "desk")
    url = serve(GatewayService(sqlite_registry, require_api_keys=False)) + "/mcp/v1/acme/desk"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_user", {"id": "x"}), ("get_user", {"id": 1}), ("get_user", {"id": 404}),
        ("get_user", {"id": 1, "key": "x" * 17_000}),  # bound for the query: a request head over 16 KiB
        ("delete_user", {"id": 1}), ("delete_user", {"id": 1, "_crank_confirmation_token": "forged"}),
        ("update_user", {"id": 1, "key": "k1"}), ("update_user", {"id": 2, "key": "k1"}),
        ("broken", {}), ("limited", {}), ("html", {}), ("slow", {}), ("mapped", {}), ("secured", {}),
    ]  # fmt: skip
    codes = {}
    async with Client(url, mode="auto") as client:
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            if result.is_error:
                error = _error(result)  # a non-empty suggested_action
                codes[error["error_code"]] = error["error_class"]
    documented = set(re.findall(r"^\| `([a-z_]+)` \| `", (ROOT / "docs/safety.md").read_text(), re.MULTILINE))
    # Produced elsewhere (a concurrent repeat, a repeat after a timeout, an unexpected exception, a pool with
    # no free connection, a full in-process store): tests/gateway/test_safety.py, tests/mcp,
    # tests/gateway/test_fairness.py and tests/state/test_store.py.
    # A used-up limit and a Redis that does not answer: tests/gateway/test_limits.py and test_safety.py; an
    # upstream's 401 and 403: tests/gateway/test_http_adapter.py; a token endpoint that gives no token:
    # tests/gateway/test_credentials.py. A confirmation the user declines, never answers, or cannot be asked
    # for (`confirmation: human`): tests/sources/test_confirmation.py. Files over the bound:
    # tests/gateway/test_bodies.py.
    elsewhere = {"idempotency_in_progress", "idempotency_outcome_unknown", "internal_error", "upstream_busy",
                 "state_store_full", "rate_limited", "state_unavailable", "upstream_unauthorized",
                 "upstream_forbidden", "upstream_token_unavailable", "confirmation_declined",
                 "confirmation_timeout", "confirmation_unavailable", "file_too_large"}  # fmt: skip
    assert set(codes) == documented - elsewhere
