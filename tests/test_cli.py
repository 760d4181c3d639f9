"""`crank` on the command line: the version, and `crank serve` answering MCP over real HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from crank import __version__
from crank.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_serve_runs_the_quickstart() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "crank.cli", "serve", "examples.quickstart:app", "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "books.get", "arguments": {"id": 1}}}  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.post(f"http://127.0.0.1:{port}/mcp", json=body, timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, "crank serve exited"
                assert time.monotonic() < deadline, "crank serve did not answer"
                time.sleep(0.1)
        assert response.json()["result"]["structuredContent"]["title"] == "Kobzar"
    finally:
        server.terminate()
        server.wait(timeout=10)
