"""`crank check WS AGENT`: call an agent's tools against their real upstreams and report answers that drift
from the published output schema, before a client meets them.

The agent's draft is checked (what the next publish serves), through the same pipeline a client's call
takes (argument validation, confirmation, mappings, the adapter, the output check). Which tools are
called:

- a tool whose operation draft has `sample_arguments` (an object): called with them;
- else a read-only tool (`readOnlyHint: true`, or no hint and a GET or HEAD) that needs no argument:
  called with none;
- every other tool is skipped and says why. A destructive tool never runs: the first call of the two-step
  confirmation only returns a token, and `check` never sends one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from crank import _json
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import EgressPolicy
from crank.mcp.calls import call_tool
from crank.mcp.catalog import CatalogEntry
from crank.mcp.tools import CallContext
from crank.registry import Registry, RuntimeTool, tool_name_of
from crank.sources.agents import build_catalog
from crank.types import JSONObject

__all__ = ["SAMPLE_FIELD", "CheckResult", "check_agent"]

SAMPLE_FIELD = "sample_arguments"
"""The operation draft's field with the arguments `crank check` calls it with (never published)."""

CheckStatus = Literal["ok", "drift", "error", "skipped"]
_READ_METHODS = frozenset({"GET", "HEAD"})
_PROTOCOL = "2025-11-25"


@dataclass(frozen=True)
class CheckResult:
    """One tool's outcome: `ok`, `drift` (the answer fails the output schema, `violations` say where),
    `error` (another structured error: `error_code` and `message`) or `skipped` (`message` says why)."""

    tool: str
    status: CheckStatus
    message: str = ""
    error_code: str | None = None
    violations: list[JSONObject] = field(default_factory=list)

    def __str__(self) -> str:
        if self.status == "drift":
            where = "; ".join(f"{item['path']}: {item['message']}" for item in self.violations)
            return f"drift    {self.tool}: {where}"
        if self.status == "error":
            return f"error    {self.tool}: {self.error_code}: {self.message}"
        return f"{self.status:<8} {self.tool}{': ' + self.message if self.message else ''}"

    def to_json(self) -> JSONObject:
        return {"tool": self.tool, "status": self.status, "message": self.message, "error_code": self.error_code,
                "violations": self.violations}  # fmt: skip


async def check_agent(
    registry: Registry,
    workspace: str,
    agent: str,
    *,
    client: UpstreamClient | None = None,
    egress: EgressPolicy | None = None,
) -> list[CheckResult]:
    """Call the agent's draft tools as the module says; one result per tool, in binding order. Without a
    `client`, one of its own under `egress` (the environment's policy when None)."""
    runtime = registry.draft_runtime(workspace, agent)
    operations = registry.operations(workspace)
    samples = {
        tool_name_of(binding): operations.get(str(binding.get("operation")), {}).get(SAMPLE_FIELD)
        for binding in registry.agent(workspace, agent)["bindings"]
    }
    own = client is None
    client = client or UpstreamClient(egress=egress)
    try:
        catalog = build_catalog(runtime, client)
        results = []
        for spec in runtime.tools:
            entry = catalog.get(spec.tool_name)
            assert entry is not None  # the catalog holds every tool of the view
            results.append(await _check(entry, spec, samples.get(spec.tool_name)))
        return results
    finally:
        if own:
            await client.aclose()


async def _check(entry: CatalogEntry, spec: RuntimeTool, sample: Any) -> CheckResult:
    name = spec.tool_name
    if sample is not None and not isinstance(sample, dict):
        return CheckResult(name, "skipped", f"{SAMPLE_FIELD} must be an object of arguments")
    if sample is None:
        read_only = spec.annotations.read_only_hint
        if read_only is False or (read_only is None and spec.http_method not in _READ_METHODS):
            return CheckResult(name, "skipped", f"not read-only; give the operation {SAMPLE_FIELD} to call it")
        if (spec.input_schema or {}).get("required"):
            return CheckResult(name, "skipped", f"needs arguments; give the operation {SAMPLE_FIELD}")
    context = CallContext(tool_name=name, protocol_version=_PROTOCOL)
    result = await call_tool(entry, dict(sample or {}), context, result_format="json")
    if not result.get("isError"):
        return CheckResult(name, "ok")
    error = _json.loads(result["content"][0]["text"])
    if error.get("error_code") == "output_schema_mismatch":
        return CheckResult(name, "drift", error["message"], "output_schema_mismatch", error["details"]["violations"])
    return CheckResult(name, "error", str(error.get("message", "")), str(error.get("error_code")))
