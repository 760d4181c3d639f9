"""At most one effect per idempotency key when things break between the upstream's effect and its record
(issue 12): a replica killed with SIGKILL after the upstream acted, and a state store that cannot be reached
when the outcome is to be written. Real processes, a real Redis (through a TCP proxy the test cuts), an
upstream on loopback that counts its effects, and the official MCP client for the repeats."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.actions import check_runtime
from crank.gateway.safety import IDEMPOTENCY_LEASE
from crank.registry import Registry, migrate, open_engine
from crank.server import GatewayService
from crank.state import RedisStore
from mcp import Client
from tests.services import HOST, free_port

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
OLD_CLAIM_MARGIN = 10  # before issue 12, a claim expired this long past the operation's timeout
PATIENCE = 60  # seconds a test repeats a call that is in progress before it gives up


class CountingUpstream:
    """POST /effects: counts the effect at once, then takes `acting_time` seconds to answer."""

    def __init__(self, acting_time: float) -> None:
        self.acting_time = acting_time
        self.effects: list[dict[str, Any]] = []
        self.acted = threading.Event()
        self.app = Starlette(routes=[Route("/effects", self.create, methods=["POST"])])

    async def create(self, request: Request) -> Response:
        self.effects.append({"body": await request.json(), "key": request.headers.get("idempotency-key")})
        self.acted.set()
        await asyncio.sleep(self.acting_time)
        return JSONResponse({"effect": len(self.effects)}, status_code=201)


def publish(registry: Registry, upstream: str, timeout: float) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "request_id": {"type": "string", "description": "Unique per effect."},
        },
        "required": ["name", "request_id"],
    }
    registry.create_workspace("acme", "Acme")
    registry.put_operation("acme", "create_effect", {
        "protocol": "http", "target": {"method": "POST", "url": upstream + "/effects"},
        "description": "Creates an effect.", "input_schema": schema,
        "execution_config": {"idempotency": {"argument": "request_id"}, "timeout": timeout},
    })  # fmt: skip
    registry.put_agent("acme", "desk", {"bindings": [{"operation": "create_effect"}]})
    registry.publish("acme", "desk", check=check_runtime)


@pytest.fixture
def registry_url(tmp_path: Path) -> Iterator[str]:
    """A SQLite registry file that the test and its `crank serve` processes share."""
    url = f"sqlite:///{tmp_path / 'registry.sqlite3'}"
    engine = open_engine(url, pooled=False)
    migrate(engine)
    yield url
    engine.dispose()


@contextmanager
def replicas(
    registry_url: str, redis_url: str, logs: list[Path]
) -> Iterator[list[tuple[subprocess.Popen[bytes], str]]]:
    """`crank serve --role mcp` processes on one registry and one Redis, one per log file, started together;
    yields each with its base URL once all are ready."""
    started: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for log in logs:
            port = free_port()
            env = {
                **os.environ, "PYTHONPATH": str(ROOT / "src"), "CRANK_LISTEN": f"{HOST}:{port}",
                "CRANK_DATABASE_URL": registry_url, "CRANK_REDIS_URL": redis_url, "CRANK_REQUIRE_API_KEYS": "false",
                "CRANK_DATA_DIR": str(log.parent), "CRANK_POLL_INTERVAL": "0.2",
            }  # fmt: skip
            with log.open("ab") as stderr:
                process = subprocess.Popen(
                    [sys.executable, "-m", "crank.cli", "serve", "--role", "mcp"], cwd=ROOT, env=env,
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                )  # fmt: skip
            started.append((process, f"http://{HOST}:{port}", log))
        for process, base, log in started:
            wait_until_serving(process, base, log)
        yield [(process, base) for process, base, _ in started]
    finally:
        for process, _, _ in started:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)


def wait_until_serving(process: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(base + "/mcp/v1/acme/desk/tools", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, f"crank exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"crank did not answer:\n{log.read_text()}"
        time.sleep(0.1)


async def call(client: Client, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call: {"value": ...} or {"error": the structured error}."""
    result = await client.call_tool("create_effect", arguments)
    if result.is_error:
        return {"error": json.loads(result.content[0].text)}
    return {"value": result.structured_content}


async def repeat_while_in_progress(client: Client, arguments: dict[str, Any]) -> dict[str, Any]:
    """Follow `idempotency_in_progress`'s advice (repeat the same call a little later) until the answer is
    something else; each repeat is a real call."""
    deadline = time.monotonic() + PATIENCE
    while True:
        answer = await call(client, arguments)
        if answer.get("error", {}).get("error_code") != "idempotency_in_progress" or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(1)


def assert_in_progress_advises_the_same_key(answer: dict[str, Any]) -> None:
    error = answer["error"]
    assert error["error_code"] == "idempotency_in_progress", error
    assert "same request_id" in error["suggested_action"] and "never run twice" in error["message"]


async def test_a_replica_killed_after_the_upstream_acted_never_lets_its_key_run_again(
    tmp_path: Path, registry_url: str, redis_url: str, serve: Callable[..., str]
) -> None:
    upstream, timeout = CountingUpstream(acting_time=1.5), 3
    registry = Registry(open_engine(registry_url, pooled=False))
    publish(registry, serve(upstream.app), timeout)
    arguments = {"name": "invoice", "request_id": f"crash-{uuid.uuid4().hex}"}
    with replicas(registry_url, redis_url, [tmp_path / "a.log", tmp_path / "b.log"]) as [(a, a_root), (_, b_root)]:
        # The first call goes to replica A, which is killed once the upstream acted and before it answered.
        async with httpx.AsyncClient(timeout=30) as http:
            first = asyncio.create_task(http.post(f"{a_root}/mcp/v1/acme/desk/call",
                                                  json={"name": "create_effect", "arguments": arguments}))  # fmt: skip
            assert await asyncio.to_thread(upstream.acted.wait, 10)
            os.kill(a.pid, signal.SIGKILL)
            with pytest.raises(httpx.TransportError):
                await first
        async with Client(f"{b_root}/mcp/v1/acme/desk") as client:
            # At once: A's lease still runs, so the call is in progress, and the advice is to repeat it.
            assert_in_progress_advises_the_same_key(await call(client, arguments))
            # Following that advice: once A's lease lapsed, the answer is outcome_unknown, never a second run.
            started = time.monotonic()
            answer = await repeat_while_in_progress(client, arguments)
            assert answer["error"]["error_code"] == "idempotency_outcome_unknown", answer
            assert "interrupted" in answer["error"]["message"] and "read it back" in answer["error"]["suggested_action"]
            # Past the old claim's expiry too (the operation's timeout plus 10 s): still unknown, still one effect.
            await asyncio.sleep(max(0.0, timeout + OLD_CLAIM_MARGIN - (time.monotonic() - started)))
            again = await call(client, arguments)
            assert again["error"]["error_code"] == "idempotency_outcome_unknown", again
    assert upstream.effects == [{"body": {"name": "invoice"}, "key": arguments["request_id"]}]


class TCPProxy:
    """Forwards a loopback port to `target`. `cut()` drops every connection and refuses new ones (they are
    accepted and closed at once) until `restore()`: a network that fails between two requests."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server((HOST, 0))
        self.port: int = self.listener.getsockname()[1]
        self.open = True
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.open:
                client.close()
                continue
            server = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self.open = False
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[TCPProxy]:
    host, _, port = redis_url.removeprefix("redis://").partition("/")[0].rpartition(":")
    proxy = TCPProxy((host, int(port)))
    yield proxy
    proxy.close()


async def test_an_outcome_the_store_could_not_record_is_never_run_again(
    tmp_path: Path, registry_url: str, redis_proxy: TCPProxy, serve: Callable[..., str]
) -> None:
    # The upstream takes longer than a heartbeat: the owner's renewal fails too while Redis is cut off.
    upstream, timeout = CountingUpstream(acting_time=IDEMPOTENCY_LEASE / 3 + 1), IDEMPOTENCY_LEASE / 3 + 3
    registry = Registry(open_engine(registry_url, pooled=False))
    publish(registry, serve(upstream.app), timeout)
    store = RedisStore(f"redis://{HOST}:{redis_proxy.port}/0", prefix=f"t-{uuid.uuid4().hex}:")
    root = serve(GatewayService(registry, require_api_keys=False, state=store))
    arguments = {"name": "invoice", "request_id": f"lost-{uuid.uuid4().hex}"}
    async with Client(f"{root}/mcp/v1/acme/desk") as client:
        first = asyncio.create_task(call(client, arguments))
        assert await asyncio.to_thread(upstream.acted.wait, 10)
        redis_proxy.cut()  # claimed, acted upon: now the outcome cannot be written
        # The upstream acted, so its answer is the caller's, although the store could not keep it.
        assert await first == {"value": {"effect": 1}}
        redis_proxy.restore()
        async with Client(f"{root}/mcp/v1/acme/desk") as other:
            assert_in_progress_advises_the_same_key(await call(other, arguments))
            answer = await repeat_while_in_progress(other, arguments)
            assert answer["error"]["error_code"] == "idempotency_outcome_unknown", answer
            # Past the old claim's expiry (the operation's timeout plus 10 s after the call): never run again.
            await asyncio.sleep(timeout + OLD_CLAIM_MARGIN - IDEMPOTENCY_LEASE + 1)
            assert (await call(other, arguments))["error"]["error_code"] == "idempotency_outcome_unknown"
    assert len(upstream.effects) == 1
