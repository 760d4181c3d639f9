"""Usage metrics (Prometheus) and structured JSON logs, labelled by workspace, agent, tool and request id.

`Metrics` owns its own `CollectorRegistry`, so two servers in one process (tests, say) never share
counters. `Metrics.observer(...)` gives a catalog the `CallObserver` that counts its calls:

    crank_tool_calls_total{workspace, agent, tool, outcome}            outcome: ok | error
    crank_tool_errors_total{workspace, agent, tool, error_class, error_code}
    crank_tool_call_duration_seconds{workspace, agent, tool}          histogram
    crank_tool_output_mismatches_total{workspace, agent, tool}        answers that failed the outputSchema
    crank_rate_limited_total{workspace, agent, limit}                 requests and calls a limit refused
                                                                      (limit: workspace_rate, key_quota, ...)

Calls and their latency are counted in plain numbers on the hot path (`_ToolCalls`) and handed to
prometheus-client's exposition when `/metrics` is read (`_CallsCollector`): a `Counter.inc` and a
`Histogram.observe` per call took a lock each and about 170 interpreter steps, a tenth of a gateway
call's own work. Every call is observed on the event loop's thread, so the numbers need no lock.

Failures are also logged (one line each, with the request id the client got); successes are logged
only at debug level, so that the hot path does not format a log line per call. An answer that failed
the tool's outputSchema is logged at warning level with its violations' paths (never the values).

`Probe` is the readiness check of one dependency (the registry, Redis): bounded by a timeout, cached
for a moment, one check in flight at a time, so that `/readyz` and the admin API can ask it on every
request.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import os
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from crank import _json, tracing
from crank.exceptions import ConfirmationError, OutputValidationError, ToolError
from crank.wire.auth import Principal

__all__ = [
    "DEFAULT_PROBE_CACHE",
    "DEFAULT_PROBE_TIMEOUT",
    "METRICS_CONTENT_TYPE",
    "JSONLogFormatter",
    "Metrics",
    "Probe",
    "configure_logging",
]

DEFAULT_PROBE_TIMEOUT: Final = 2.0
"""Seconds a dependency has to answer a readiness check before it counts as unreachable."""
DEFAULT_PROBE_CACHE: Final = 1.0
"""Seconds a readiness verdict is kept: a flood of `/readyz` (or of admin requests) costs one check a second."""

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST
_LABELS = ("workspace", "agent", "tool")
Observe = Callable[[str, ToolError | None, float, str | None, Principal | None, Mapping[str, Any]], None]
"""What `Metrics.observer` returns: it has the shape of the MCP core's `CallObserver`, which the core
declares; telemetry sits below the core and never imports it."""
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# As a `Histogram` writes its `le` labels (prometheus-client's helper is untyped).
_BUCKET_LABELS: tuple[str, ...] = tuple(floatToGoString(b) for b in (*_BUCKETS, math.inf))  # type: ignore[no-untyped-call]
# Whether counters and histograms write their `_created` series: prometheus-client's own switch, read as it reads it.
_CREATED_SERIES = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")
logger = logging.getLogger("crank.calls")
health_logger = logging.getLogger("crank.health")


class _ToolCalls:
    """One tool's calls (by outcome) and their latency histogram."""

    __slots__ = ("buckets", "created", "errors", "errors_created", "ok", "seconds", "steps")

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.steps = 0  # of the errors, first steps of a confirmation (`confirmation_required`): no failure
        self.buckets = [0] * (len(_BUCKETS) + 1)  # per bucket (not cumulative); the last one is +Inf
        self.seconds = 0.0
        self.created = time.time()
        self.errors_created = 0.0  # set by the first failure, as a `Counter` child is made by its first `inc`

    def observe(self, seconds: float) -> None:
        self.buckets[bisect_left(_BUCKETS, seconds)] += 1  # a bucket's bound is inclusive (`le`)
        self.seconds += seconds


class _CallsCollector:
    """`crank_tool_calls_total` and `crank_tool_call_duration_seconds` from the `_ToolCalls` of each tool, in
    the families a `Counter` and a `Histogram` would expose (an `ok` sample for every tool called, an
    `error` sample once one failed)."""

    def __init__(self) -> None:
        self.tools: dict[tuple[str, str, str], _ToolCalls] = {}

    def describe(self) -> list[Metric]:
        return [self._calls(), self._latency()]

    def collect(self) -> Iterator[Metric]:
        calls, latency = self._calls(), self._latency()
        created = _CREATED_SERIES
        for labels, tool in list(self.tools.items()):
            calls.add_metric([*labels, "ok"], tool.ok, created=tool.created if created else None)
            if tool.errors:
                calls.add_metric([*labels, "error"], tool.errors, created=tool.errors_created if created else None)
            cumulative, buckets = 0, []
            for bound, count in zip(_BUCKET_LABELS, tool.buckets, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric(list(labels), buckets, tool.seconds)
            if created:  # `add_metric` of a histogram takes no creation time; a `Histogram` writes this sample
                latency.samples.append(Sample(f"{latency.name}_created", dict(zip(_LABELS, labels, strict=True)),
                                              tool.created))  # fmt: skip
        yield calls
        yield latency

    @staticmethod
    def _calls() -> CounterMetricFamily:
        return CounterMetricFamily("crank_tool_calls", "Tool calls, by outcome.", labels=[*_LABELS, "outcome"])

    @staticmethod
    def _latency() -> HistogramMetricFamily:
        return HistogramMetricFamily(
            "crank_tool_call_duration_seconds", "Time to answer a tool call, upstream included.", labels=list(_LABELS)
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._calls = _CallsCollector()
        self.registry.register(self._calls)
        self.errors = Counter(
            "crank_tool_errors", "Failed tool calls, by error class and code.",
            [*_LABELS, "error_class", "error_code"], registry=self.registry,
        )  # fmt: skip
        self.mismatches = Counter(
            "crank_tool_output_mismatches", "Answers that failed the tool's published output schema.",
            list(_LABELS), registry=self.registry,
        )  # fmt: skip
        self.audit_dropped = Counter(
            "crank_audit_dropped", "Audit records dropped: the buffer of records waiting to be written was full.",
            registry=self.registry,
        )  # fmt: skip
        self.rate_limited = Counter(
            "crank_rate_limited", "Requests and tool calls refused by a rate limit or quota, by the limit.",
            ["workspace", "agent", "limit"], registry=self.registry,
        )  # fmt: skip

    def observer(self, workspace: str, agent: str) -> Observe:
        """The observer of one agent's catalog; each tool's counts are found once (no label lookup per call) and
        outlive the catalog: a reloaded version goes on counting in them."""
        tools: dict[str, _ToolCalls] = {}
        labels = {"workspace": workspace, "agent": agent}

        def observe(
            tool: str, error: ToolError | None, seconds: float, request_id: str | None, caller: Principal | None,
            arguments: Mapping[str, Any],
        ) -> None:  # fmt: skip
            counts = tools.get(tool)
            if counts is None:
                counts = tools[tool] = self._calls.tools.setdefault((workspace, agent, tool), _ToolCalls())
            counts.observe(seconds)
            if error is None:
                counts.ok += 1
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("tool call", extra={**labels, "tool": tool, "duration_ms": round(seconds * 1000, 2)})
                return
            if not counts.errors:
                counts.errors_created = time.time()
            counts.errors += 1
            if error.error_code == ConfirmationError.default_code:
                counts.steps += 1
            self.errors.labels(workspace, agent, tool, error.error_class, error.error_code).inc()
            extra = {**labels, "tool": tool, "request_id": request_id, "error_class": error.error_class,
                     "error_code": error.error_code, "duration_ms": round(seconds * 1000, 2),
                     **(error.log_context or {})}  # fmt: skip
            if isinstance(error, OutputValidationError):
                self.mismatches.labels(workspace, agent, tool).inc()
                paths = [violation["path"] for violation in error.details["violations"]]
                logger.warning(
                    "tool %s answered outside its output schema at %s (request_id=%s)", tool, ", ".join(paths),
                    request_id, extra={**extra, "paths": paths},
                )  # fmt: skip
                return
            logger.info("tool %s failed: %s%s (request_id=%s)", tool, error.error_code, error.log_note(), request_id,
                        extra=extra)  # fmt: skip

        return observe

    def agent_calls(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Every agent's tool calls and failed calls in this process since it started: (workspace, agent) ->
        (calls, errors), read from the counters `crank_tool_calls_total` exposes. The first step of a confirmation
        (a destructive call answered `confirmation_required`, to be repeated with its token) is a call, not a
        failure (Prometheus counts it under `outcome="error"`, with its code in `crank_tool_errors_total`)."""
        totals: dict[tuple[str, str], tuple[int, int]] = {}
        for (workspace, agent, _), tool in list(self._calls.tools.items()):
            calls, errors = totals.get((workspace, agent), (0, 0))
            totals[(workspace, agent)] = (calls + tool.ok + tool.errors, errors + tool.errors - tool.steps)
        return totals

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)


# uvicorn passes each message again as a `color_message` extra, with terminal colour codes, for its own
# formatter: a JSON line is for machines, so that copy stays out.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


class JSONLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and every `extra` label; with traces on, the
    `trace_id` and `span_id` of the span it was written in (crank.tracing)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_extra(record.__dict__))
        if tracing.tracer() is not None:  # traces on: the line names the trace and span it was written in
            entry.update(tracing.current_ids())
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _json.dumps(entry).decode()


def _extra(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items() if key not in _STANDARD and not key.startswith("_")}


def configure_logging(log_format: str = "json", level: str = "info") -> None:
    """Route Crank's (and uvicorn's) logs to stderr, as JSON lines or plain text."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JSONLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("crank", "uvicorn", "uvicorn.error"):
        target = logging.getLogger(name)
        target.handlers[:] = [handler]
        target.setLevel(level.upper())
        target.propagate = False


class Probe:
    """Whether one dependency answers: `check` is awaited (it raises when the dependency fails), at most
    once per `cache_for` seconds, and its answer is awaited at most `timeout` seconds.

    One check is in flight at a time: a dependency that never answers (a network black hole) holds one
    check, not one per request; until that check ends, every verdict is "no answer". `describe` turns a
    failure into the one line `problem` returns (never a secret: the callers' exceptions name none)."""

    def __init__(
        self,
        name: str,
        check: Callable[[], Awaitable[object]],
        *,
        describe: Callable[[Exception], str] = str,
        timeout: float = DEFAULT_PROBE_TIMEOUT,
        cache_for: float = DEFAULT_PROBE_CACHE,
    ) -> None:
        self.name = name
        self.timeout = timeout
        self.cache_for = cache_for
        self._check = check
        self._describe = describe
        self._task: asyncio.Task[str | None] | None = None
        self._started = 0.0
        self._verdict: str | None = None
        self._decided = -math.inf

    async def problem(self) -> str | None:
        """None when the dependency answered, else one line saying what is wrong."""
        now = time.monotonic()
        if now - self._decided < self.cache_for:
            return self._verdict
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._started = now
        left = self.timeout - (now - self._started)
        verdict: str | None = f"{self.name}: no answer within {self.timeout:g} s"
        if left > 0:
            try:  # shielded: a check that outlives its timeout goes on, and the next verdict reads it
                verdict = await asyncio.wait_for(asyncio.shield(self._task), left)
            except TimeoutError:
                pass
        if verdict != self._verdict:  # the log says what changed, once; the verdict itself names no host
            if verdict is None:
                health_logger.info("%s answers again", self.name)
            else:
                health_logger.warning("not ready: %s", verdict)
        self._verdict, self._decided = verdict, time.monotonic()
        return self._verdict

    async def _run(self) -> str | None:
        try:
            await self._check()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", said in one line
            lines = self._describe(exc).strip().splitlines() or [type(exc).__name__]
            return f"{self.name}: {lines[0]}"
        return None
