"""Usage metrics and structured logs of gateway calls, labelled by workspace, agent, tool and request id."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from crank.registry import Registry
from crank.server import GatewayService
from crank.telemetry import JSONLogFormatter
from tests.gateway import upstream
from tests.gateway.test_gateway import publish_demo

pytestmark = pytest.mark.anyio


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


async def test_calls_errors_and_latency_are_counted_per_tool(
    registry: Registry, serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    publish_demo(registry, serve(upstream.app))
    root = serve(GatewayService(registry, require_api_keys=False))
    url = root + "/mcp/v1/acme/support/call"
    caplog.set_level(logging.INFO, logger="crank")
    async with httpx.AsyncClient() as client:
        for arguments in ({"id": 1}, {"id": 2}, {"id": 42}, {"id": "x"}):
            await client.post(url, json={"name": "get_user", "arguments": arguments})
        failed = (await client.post(url, json={"name": "broken", "arguments": {}})).json()
        text = (await client.get(root + "/metrics")).text

    def value(name: str, **labels: str) -> float:
        return samples(text, name)[tuple(sorted({"workspace": "acme", "agent": "support", **labels}.items()))]

    assert value("crank_tool_calls_total", tool="get_user", outcome="ok") == 2
    assert value("crank_tool_calls_total", tool="get_user", outcome="error") == 2
    assert value("crank_tool_errors_total", tool="get_user", error_class="external_service",
                 error_code="upstream_rejected") == 1  # fmt: skip
    assert value("crank_tool_errors_total", tool="get_user", error_class="schema_validation",
                 error_code="invalid_arguments") == 1  # fmt: skip
    assert value("crank_tool_call_duration_seconds_count", tool="get_user") == 4
    assert value("crank_tool_calls_total", tool="broken", outcome="error") == 1

    # The failure's log line carries the labels and the request id the client got.
    request_id = json.loads(failed["content"][0]["text"])["request_id"]
    (record,) = [r for r in caplog.records if getattr(r, "request_id", None) == request_id and r.name == "crank.calls"]
    assert (record.workspace, record.agent, record.tool, record.error_class) == (  # type: ignore[attr-defined]
        "acme", "support", "broken", "external_service")  # fmt: skip
    line = json.loads(JSONLogFormatter().format(record))
    assert line["request_id"] == request_id and line["workspace"] == "acme" and line["level"] == "info"
    assert line["error_code"] == "upstream_unavailable" and "Traceback" not in json.dumps(line)


def test_json_log_lines_keep_exceptions_and_extra_fields() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("crank.x", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    record.tool = "t"
    line = json.loads(JSONLogFormatter().format(record))
    assert line["message"] == "failed here" and line["tool"] == "t" and "ValueError: boom" in line["exception"]
