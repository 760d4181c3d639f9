"""OpenTelemetry traces: a server span per MCP request, a client span per upstream request, and the W3C trace
context carried from the MCP client through Crank to the upstream (docs/deployment.md, "Observability").

Off unless the standard variables ask for it: `OTEL_TRACES_EXPORTER=otlp`, or an OTLP endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and not `OTEL_SDK_DISABLED=true`. The
exporter is OTLP over HTTP (protobuf) and reads the rest of its `OTEL_EXPORTER_OTLP_*` variables itself;
`OTEL_SERVICE_NAME` names the service (`crank` by default). Spans leave in batches from the SDK's own thread.

When off, `tracer()` is None: nothing of OpenTelemetry's SDK is imported, no thread runs, and the request path
pays one test of a module global. When on, spans follow the MCP semantic conventions (OpenTelemetry
`semantic-conventions-genai`, `docs/gen-ai/mcp.md`) and the HTTP client conventions. A tool's arguments and
results are never span attributes, nor are credentials: an upstream request is recorded by its origin, since its
path and query hold arguments and may hold a key.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

__all__ = ["client_span", "current_ids", "inject", "mark_error", "server_span", "tracer"]

_configured = False
_tracer: Tracer | None = None
_lock = threading.RLock()  # the SDK may log while it starts, and a log line asks `tracer()`
_PROPAGATED = ("traceparent", "tracestate")  # W3C trace context only: baggage is neither read nor sent
_MAX_VALUE = 128
"""Characters of a name or id a client chose, in a span's name and attributes (a span is kept until exported)."""


def tracer() -> Tracer | None:
    """The process's tracer, configured from the `OTEL_*` variables on first use; None when tracing is off."""
    if not _configured:
        _configure(os.environ)
    return _tracer


def _configure(environ: Mapping[str, str]) -> None:
    global _configured, _tracer
    with _lock:
        if _configured:
            return
        if _enabled(environ):
            _tracer = _start(environ)
        _configured = True


def _enabled(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()}
    if exporters:
        return "otlp" in exporters
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _start(environ: Mapping[str, str]) -> Tracer:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "crank"})
    provider = TracerProvider(resource=resource, span_limits=SpanLimits(max_attribute_length=_MAX_VALUE * 2))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # the last batch leaves before the process does
    from crank import __version__

    return provider.get_tracer("crank", __version__)


def _parent(meta: Any, headers: Mapping[str, str]) -> Context | None:
    """The caller's context: `params._meta` (SEP-414), else the HTTP headers; None when neither carries one."""
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    for carrier in (meta if isinstance(meta, dict) else None, headers):
        if carrier and any(name in carrier for name in _PROPAGATED):
            given = {name: carrier[name][:512] for name in _PROPAGATED if isinstance(carrier.get(name), str)}
            context = TraceContextTextMapPropagator().extract(given)
            if get_current_span(context).get_span_context().is_valid:
                return context
    return None


@contextlib.contextmanager
def server_span(
    active: Tracer, message: Mapping[str, Any], headers: Mapping[str, str], protocol_version: str | None,
    *, known: bool = True,
) -> Iterator[Span]:  # fmt: skip
    """The server span of one MCP request: `{mcp.method.name} {target}` (`tools/call get_weather`), a child of the
    trace the request carries. `known`: whether the server answers the request's method; any other is `_OTHER`, as
    the conventions say of unknown methods. `error.type` is set by `mark_error` when the answer is an error."""
    from opentelemetry.trace import SpanKind

    method = message.get("method")
    method = method if known and isinstance(method, str) else "_OTHER"
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    target = params.get("name") if method in ("tools/call", "prompts/get") else None
    target = target[:_MAX_VALUE] if isinstance(target, str) else None
    attributes: dict[str, Any] = {"mcp.method.name": method}
    if isinstance(target, str):
        attributes["gen_ai.tool.name" if method == "tools/call" else "gen_ai.prompt.name"] = target
        if method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
    request_id = message.get("id")
    if isinstance(request_id, str | int) and not isinstance(request_id, bool):
        attributes["jsonrpc.request.id"] = str(request_id)[:_MAX_VALUE]
    if protocol_version:
        attributes["mcp.protocol.version"] = protocol_version
    session = headers.get("mcp-session-id")
    if session:
        attributes["mcp.session.id"] = session[:_MAX_VALUE]
    name = f"{method} {target}" if isinstance(target, str) else method
    with active.start_as_current_span(name, context=_parent(params.get("_meta"), headers), kind=SpanKind.SERVER,
                                      attributes=attributes) as span:  # fmt: skip
        yield span


def mark_error(span: Span, error_type: str) -> None:
    """An answer that is an error: its JSON-RPC code, or `tool_error` for a tool's `isError` result."""
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR)


@contextlib.contextmanager
def client_span(active: Tracer, method: str, scheme: str, host: str, port: int) -> Iterator[Span]:
    """The client span of one upstream HTTP request (`POST`), under the current span; `inject` then gives the
    headers that carry its context upstream. Its origin only: the path and query hold the call's arguments, and
    the query may hold a key."""
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {"http.request.method": method, "server.address": host, "server.port": port,
                                  "url.scheme": scheme}  # fmt: skip
    with active.start_as_current_span(method, kind=SpanKind.CLIENT, attributes=attributes, record_exception=False,
                                      set_status_on_exception=False) as span:  # fmt: skip
        yield span


def current_ids() -> dict[str, str]:
    """`trace_id` and `span_id` of the current span (hex, as OTLP and W3C write them); empty outside any span."""
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def inject() -> dict[str, str]:
    """`traceparent` (and `tracestate`) of the current span, for an outgoing request's headers."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier
