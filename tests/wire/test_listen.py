"""`crank serve`'s connection limits (crank/wire/listen.py, crank/wire/protocol.py), on a real `crank serve`
process with few file descriptors: connections that never send a request, half-sent heads, slow bodies and
huge heads are closed, a normal request is still answered, and the log says why."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from crank.wire.listen import ConnectionLimits
from tests.services import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
TOKEN = "a-long-enough-admin-token"
FILES = 256  # the process's file descriptors (ulimit -n): at most half of them for client connections


@contextmanager
def crank_serve(tmp_path: Path, **settings: str) -> Iterator[tuple[int, Path]]:
    """`crank serve` on a free port with `FILES` file descriptors; yields its port and its log file."""
    port = free_port()
    env = {**os.environ, "CRANK_LISTEN": f"127.0.0.1:{port}", "CRANK_DATA_DIR": str(tmp_path / "data"),
           "CRANK_ADMIN_TOKEN": TOKEN, "CRANK_LOG_FORMAT": "json", **settings}  # fmt: skip
    env.pop("CRANK_DATABASE_URL", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        server = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=stderr, preexec_fn=_few_files)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "crank serve did not answer"
                time.sleep(0.1)
        yield port, log
    finally:
        server.terminate()
        server.wait(timeout=10)


def _few_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


def _logged(log: Path) -> list[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [entry["message"] for entry in lines]


def _connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    if data:
        sock.sendall(data)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as a close)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def test_idle_and_half_sent_connections_cannot_stop_serve(tmp_path: Path) -> None:
    with crank_serve(tmp_path, CRANK_HEAD_TIMEOUT="2") as (port, log), ExitStack() as sockets:
        half_sent = [sockets.enter_context(_connect(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")) for _ in range(20)]
        idle = [sockets.enter_context(_connect(port)) for _ in range(FILES + 50)]  # more than its file descriptors
        answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=60)
        assert answer.json() == {"status": "ok", "role": "all"}
        for sock in half_sent:  # each answered 408 after the head timeout, then closed
            assert _read_all(sock).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert all(_read_all(sock) == b"" for sock in idle)  # closed: the oldest to make room, the rest timed out
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=60).status_code == 200
    messages = _logged(log)
    assert any("at most 128 client connections" in message for message in messages)  # half of ulimit -n
    assert any("CRANK_HEAD_TIMEOUT" in message for message in messages)
    assert any("closed the connection idle the longest" in message for message in messages)
    assert len(messages) < 30  # a line per kind and 10 s, with the count since: not one per connection


def test_a_body_that_does_not_arrive_in_time_is_408(tmp_path: Path) -> None:
    with crank_serve(tmp_path, CRANK_BODY_TIMEOUT="1") as (port, log):
        head = (f"PUT /admin/v1/workspaces/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")  # fmt: skip
        # Twice: with no connection left after the first, the sweep of deadlines stops, and the second starts it.
        # The second asks on a connection that was answered once before: its deadline is set again.
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        for before in (b"", health):
            with _connect(port, before + head.encode() + b'{"name": "Sl') as sock:  # the body's rest never comes
                answer = _read_all(sock).rpartition(b"HTTP/1.1 ")[1:]
            assert b"".join(answer).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
            assert json.loads(answer[1].partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
            time.sleep(1)  # no connection open for longer than a sweep's interval (0.25 s): the sweeping stops
    assert any("CRANK_BODY_TIMEOUT" in message for message in _logged(log))


def test_a_head_over_the_limit_is_431(tmp_path: Path) -> None:
    with crank_serve(tmp_path, CRANK_MAX_HEAD_BYTES="4096") as (port, log):
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n"
        with _connect(port, head) as sock:
            answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
        small = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"X-Small": "a" * 3000}, timeout=10)
        assert small.status_code == 200
    assert any("CRANK_MAX_HEAD_BYTES" in message for message in _logged(log))


@pytest.mark.parametrize(
    ("variable", "value"),
    [("CRANK_HEAD_TIMEOUT", "0"), ("CRANK_MAX_CONNECTIONS", "0"), ("CRANK_MAX_HEAD_BYTES", "10")],
)
def test_a_limit_out_of_range_is_refused_at_start(tmp_path: Path, variable: str, value: str) -> None:
    env = {**os.environ, "CRANK_DATA_DIR": str(tmp_path), variable: value}
    result = subprocess.run([sys.executable, "-m", "crank.cli", "serve"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 1 and variable in result.stderr and "Traceback" not in result.stderr


def test_the_defaults_are_those_documented() -> None:
    limits = ConnectionLimits()
    assert (limits.head_timeout, limits.body_timeout, limits.keepalive_timeout) == (10.0, 30.0, 5.0)
    assert (limits.max_connections, limits.max_head_bytes) == (1000, 65536)
