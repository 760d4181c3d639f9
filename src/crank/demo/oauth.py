"""The local authorization server of `crank demo --oauth` (and of the tests): `oauth_server.mjs`, npm
`oidc-provider` on Node 22, both installed into the project's `node_modules` by `scripts/install --node`.

It listens on 127.0.0.1 on a port of its own choosing and says which once it answers; any login is accepted
(its subject is the login) and it grants `tools:read`, `tools:write` and `tools:delete` to any MCP resource a
client names. Everything it knows is in memory: registrations and tokens end with it.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from crank.exceptions import ConfigurationError

__all__ = ["SCRIPT", "authorization_server", "node_modules"]

SCRIPT = Path(__file__).with_name("oauth_server.mjs")
_INSTALL = "run scripts/install --node in a clone of Crank, then start the demo from there"


def node_modules() -> Path:
    """The `node_modules` that `oauth_server.mjs` imports from: the nearest one above it (Node's own lookup)."""
    for folder in SCRIPT.parents:
        if (folder / "node_modules" / "oidc-provider").is_dir():
            return folder / "node_modules"
    raise ConfigurationError(f"the local authorization server needs npm's oidc-provider, which is missing: {_INSTALL}")


def _node(modules: Path) -> str:
    pinned = modules / ".bin" / "node"  # the project's Node 22 (npm node-linux-*): the machine's may be older
    found = str(pinned) if pinned.exists() else shutil.which("node")
    if found is None:
        raise ConfigurationError(f"the local authorization server needs Node 22, which is missing: {_INSTALL}")
    return found


@contextlib.contextmanager
def authorization_server(*, timeout: float = 30) -> Iterator[str]:
    """Run the authorization server until the block ends; yields its issuer (`http://127.0.0.1:<port>`).
    `ConfigurationError` when Node or oidc-provider is missing, `RuntimeError` (with what it printed) when it does
    not start within `timeout` seconds."""
    modules = node_modules()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen([_node(modules), str(SCRIPT), "0"], cwd=modules.parent, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=errors)  # fmt: skip
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=_read, args=(process.stdout, lines), daemon=True)
        reader.start()
        try:
            yield _issuer(process, lines, errors, timeout)
        finally:
            _stop(process, reader)


def _read(stdout: IO[bytes] | None, lines: queue.Queue[str | None]) -> None:
    assert stdout is not None
    for line in iter(stdout.readline, b""):
        lines.put(line.decode(errors="replace").strip())
    lines.put(None)


def _issuer(process: subprocess.Popen[bytes], lines: queue.Queue[str | None], errors: IO[bytes], timeout: float) -> str:
    try:
        while (line := lines.get(timeout=timeout)) is not None:
            if line.startswith("listening "):
                return f"http://127.0.0.1:{int(line.split()[1])}"
    except queue.Empty:
        pass
    process.kill()
    process.wait(timeout=10)
    errors.seek(0)
    detail = errors.read().decode(errors="replace")[-4000:]
    raise RuntimeError(f"the authorization server did not start (exit {process.returncode}):\n{detail}")


def _stop(process: subprocess.Popen[bytes], reader: threading.Thread) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()  # the server ends when its stdin closes; terminate in case it does not
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    reader.join(timeout=10)  # it reads to the end of the output the process left
    process.stdout.close()
