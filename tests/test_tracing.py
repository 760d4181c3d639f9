"""OpenTelemetry traces (crank.tracing) as an operator sees them: `crank serve --openapi` exports to an OTLP/HTTP
receiver the test runs (its spans decoded with the `opentelemetry-proto` messages), an official SDK client with its
own OpenTelemetry SDK calls a tool, and one trace holds the client's span, Crank's server span and its upstream
span; the upstream got that trace in `traceparent`. Off, nothing of it runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.services import free_port, wait_until_answers
from tests.test_instant import crank_serving

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = """
openapi: 3.0.3
info: {title: Things, version: "1"}
servers: [{url: "http://127.0.0.1:1"}]
paths:
  /things/{id}:
    get:
      operationId: getThing
      parameters: [{name: id, in: path, required: true, schema: {type: integer}}]
      responses:
        "200":
          description: A thing.
          content: {application/json: {schema: {type: object, properties: {id: {type: integer}}}}}
"""

# The official SDK as a traced client: its own tracer provider, exporting to the same receiver.
CLIENT = textwrap.dedent("""
    import asyncio, sys
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "the-client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)

    async def main(url, key, mode):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                for thing in (424242, 500):  # the second fails upstream: Crank logs it
                    result = await client.call_tool("get_thing", {"id": thing})
                    print(result.is_error)

    asyncio.run(main(*sys.argv[1:]))
    provider.shutdown()
""")


class Receiver:
    """An OTLP/HTTP trace receiver: `POST /v1/traces`, protobuf `ExportTraceServiceRequest`; keeps every span."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    async def traces(self, request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        with self.lock:
            for resource_spans in export.resource_spans:
                service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append({
                            "service": service, "name": span.name, "kind": span.kind, "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "status": span.status.code,
                        })  # fmt: skip
        return Response(b"", media_type="application/x-protobuf")

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/traces", self.traces, methods=["POST"])])

    def wait_for(self, found: Callable[[list[dict[str, Any]]], bool], timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if found(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.05)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_one_trace_holds_the_clients_span_cranks_server_span_and_its_upstream_span(
    mode: str, tmp_path: Path, serve: Callable[..., str]
) -> None:
    receiver = Receiver()
    collector = serve(receiver.app())
    seen: list[dict[str, str]] = []

    async def thing(request: Request) -> JSONResponse:
        seen.append({name: request.headers.get(name, "") for name in ("traceparent", "tracestate")})
        thing = int(request.path_params["id"])
        return JSONResponse({"id": thing}, status_code=500 if thing == 500 else 200)

    upstream = serve(Starlette(routes=[Route("/things/{id}", thing)]))
    document = tmp_path / "things.yaml"
    document.write_text(DOCUMENT)
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    log = tmp_path / "crank.log"
    environment = {**otel, "OTEL_SERVICE_NAME": "crank-test", "CRANK_LOG_FORMAT": "json"}
    with crank_serving(free_port(), tmp_path / "data", upstream, document, (), environment, log) as banner:
        url = re.search(r"^MCP endpoint: +(\S+)$", banner, re.MULTILINE)
        key = re.search(r"^API key: +(crk_\S+)$", banner, re.MULTILINE)
        assert url is not None and key is not None, banner
        client = subprocess.run([sys.executable, "-c", CLIENT, url[1], key[1], mode], cwd=ROOT, capture_output=True,
                                text=True, timeout=60, env={**os.environ, **otel})  # fmt: skip
        assert client.returncode == 0 and client.stdout.split() == ["False", "True"], client.stderr

        def complete(spans: list[dict[str, Any]]) -> bool:  # both upstream spans
            return len([span for span in spans if span["service"] == "crank-test" and span["kind"] == 3]) == 2

        spans = receiver.wait_for(complete)
    server, failed = (s for s in spans if s["service"] == "crank-test" and s["name"] == "tools/call get_thing")
    calling = next(s for s in spans if s["service"] == "the-client" and s["id"] == server["parent"])
    outgoing = next(s for s in spans if s["service"] == "crank-test" and s["parent"] == server["id"])
    assert calling["trace"] == server["trace"] == outgoing["trace"]
    assert calling["name"] == "MCP send tools/call get_thing" and calling["kind"] == 3  # SPAN_KIND_CLIENT
    assert server["kind"] == 2  # SPAN_KIND_SERVER
    attributes = server["attributes"]
    assert attributes["mcp.method.name"] == "tools/call" and attributes["gen_ai.tool.name"] == "get_thing"
    assert attributes["gen_ai.operation.name"] == "execute_tool" and "jsonrpc.request.id" in attributes
    assert attributes["mcp.protocol.version"] in ("2025-11-25", "2026-07-28")
    assert all("424242" not in str(span["attributes"]) for span in spans)  # never the arguments
    assert outgoing["name"] == "GET" and outgoing["kind"] == 3
    assert outgoing["attributes"]["http.response.status_code"] == 200
    assert outgoing["attributes"]["server.address"] == "127.0.0.1" and "url.path" not in outgoing["attributes"]
    version, trace_id, parent_id, flags = seen[0]["traceparent"].split("-")
    assert (trace_id, parent_id) == (server["trace"], outgoing["id"])  # the upstream's trace joins the client's
    # The failed call: its span says so, and Crank's log line about it names its trace and span.
    assert failed["attributes"]["error.type"] == "tool_error" and failed["trace"] != server["trace"]
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    (failure,) = [line for line in lines if "request_id" in line and "get_thing" in line["message"]]
    assert (failure["trace_id"], failure["span_id"]) == (failed["trace"], failed["id"])


def test_tracing_is_off_without_the_otel_variables_and_costs_no_thread() -> None:
    """Without `OTEL_*`, the tracer is None in a fresh process: no tracer provider set, no exporter thread."""
    probe = textwrap.dedent("""
        import tempfile, threading
        from crank import tracing
        from crank.server import GatewayService
        from crank.registry import Registry, migrate, open_engine
        engine = open_engine(f"sqlite:///{tempfile.mkdtemp()}/r.db", pooled=False); migrate(engine)
        GatewayService(Registry(engine), require_api_keys=False)
        from opentelemetry import trace
        print(tracing.tracer() is None, type(trace.get_tracer_provider()).__name__,
              sorted(thread.name for thread in threading.enumerate() if "Span" in thread.name or "Otel" in thread.name))
    """)
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=clean)
    assert ran.stdout.split() == ["True", "ProxyTracerProvider", "[]"], ran.stderr
    on = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                        env={**clean, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})  # fmt: skip
    assert on.stdout.split()[:2] == ["False", "TracerProvider"], on.stderr


def test_the_in_process_endpoint_traces_a_call_under_the_traceparent_header(
    tmp_path: Path, serve: Callable[..., str]
) -> None:
    """`crank serve examples.rpc_app:app` (the README's RPCService) with traces on: a request that carries its trace
    in the HTTP `traceparent` header (and none in `_meta`) gets a server span in that trace, under that span. What a
    hostile client chooses stays bounded: a long tool name is cut, an unknown method is `_OTHER`, and baggage is never
    read (the propagator would log its bad entries as they are)."""
    import httpx

    receiver = Receiver()
    collector = serve(receiver.app())
    port = free_port()
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("CRANK_", "OTEL_"))}
    environment = {**clean, "OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_BSP_SCHEDULE_DELAY": "50",
                   "CRANK_LISTEN": f"127.0.0.1:{port}", "CRANK_DATA_DIR": str(tmp_path)}  # fmt: skip
    log = tmp_path / "crank.log"
    with log.open("w") as errors:
        process = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve", "examples.rpc_app:app"], cwd=ROOT,
                                   env=environment, stdout=subprocess.DEVNULL, stderr=errors)  # fmt: skip
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    hostile, other = "5bf92f3577b34da6a3ce929d0e0e4736", "6bf92f3577b34da6a3ce929d0e0e4736"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    try:
        wait_until_answers(f"http://127.0.0.1:{port}/mcp/tools", process, note="crank serve did not answer")

        def post(method: str, params: dict[str, Any], traceparent: str) -> httpx.Response:
            headers = {"traceparent": traceparent, "mcp-protocol-version": "2026-07-28", "mcp-method": method,
                       "accept": "application/json, text/event-stream"}  # fmt: skip
            if method == "tools/call":
                headers["mcp-name"] = params["name"]
            call = {"jsonrpc": "2.0", "id": 9, "method": method, "params": {"_meta": meta, **params}}
            return httpx.post(f"http://127.0.0.1:{port}/mcp", json=call, headers=headers, timeout=10)

        assert post("tools/list", {}, f"00-{trace_id}-{parent_id}-01").status_code == 200
        baggage = {**meta, "traceparent": f"00-{hostile}-{parent_id}-01", "baggage": 'a=b\n{"level": "forged"}'}
        post("tools/call", {"name": "x" * 1000, "_meta": baggage, "arguments": {}}, f"00-{other}-{parent_id}-01")
        post("no/such/method", {}, f"00-{other}-{parent_id}-01")
        spans = receiver.wait_for(lambda found: len({span["trace"] for span in found}) >= 3)
    finally:
        process.terminate()
        process.wait(timeout=20)
    (span,) = [span for span in spans if span["trace"] == trace_id]
    assert (span["name"], span["parent"], span["kind"]) == ("tools/list", parent_id, 2)
    assert span["attributes"]["mcp.protocol.version"] == "2026-07-28"
    assert span["attributes"]["jsonrpc.request.id"] == "9"
    (called,) = [span for span in spans if span["trace"] == hostile]  # `_meta` wins over the header
    assert called["name"] == "tools/call " + "x" * 128 and "error.type" in called["attributes"]
    assert [span["name"] for span in spans if span["trace"] == other] == ["_OTHER"]
    assert "forged" not in log.read_text() and "baggage" not in log.read_text().lower()
