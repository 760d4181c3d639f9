"""Fetching API descriptions by URL (crank.admin.documents): the egress policy, no redirects, a size cap, one
deadline and one message for every network failure, against real servers on loopback."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, RedirectResponse, StreamingResponse
from starlette.routing import Route

from crank.admin.api import AdminAPI
from crank.admin.documents import load_document
from crank.exceptions import SpecError
from crank.gateway.egress import ALLOW_VARIABLE, LOOPBACK, EgressPolicy
from crank.registry import Registry, migrate, open_engine

SPEC = Path(__file__).parent / "specs" / "petstore.yaml"
TOKEN = "admin-token-for-tests-0123456789"


async def endless() -> AsyncIterator[bytes]:
    yield b"openapi: 3.1.0\n"
    while True:  # a few bytes now and then, for ever: each read is quick, the whole never ends
        await asyncio.sleep(0.05)
        yield b"# more\n"


documents = Starlette(routes=[
    Route("/openapi.yaml", lambda request: PlainTextResponse(SPEC.read_text())),
    Route("/moved", lambda request: RedirectResponse("/openapi.yaml", status_code=302)),
    Route("/huge", lambda request: PlainTextResponse("# " + "x" * 5000)),
    Route("/endless", lambda request: StreamingResponse(endless(), media_type="text/yaml")),
])  # fmt: skip


@pytest.fixture
def base(serve: Callable[..., str]) -> str:
    return serve(documents)


def test_a_document_from_a_url(base: str) -> None:
    assert load_document(base + "/openapi.yaml")["info"]["title"] == "Petstore"
    with pytest.raises(SpecError, match=r"/nope: cannot fetch the document: HTTP 404$"):
        load_document(base + "/nope")


def test_a_redirect_is_not_followed(base: str) -> None:
    with pytest.raises(SpecError, match=r"/moved: cannot fetch the document: HTTP 302 \(redirects are not followed"):
        load_document(base + "/moved")


def test_an_oversized_document_is_refused(base: str) -> None:
    with pytest.raises(SpecError, match=r"/huge: cannot fetch the document: larger than 1,000 bytes$"):
        load_document(base + "/huge", max_bytes=1000)


def test_a_url_too_long_to_send_is_refused_as_such(base: str) -> None:
    with pytest.raises(SpecError, match=r"\.\.\.: cannot fetch the document: its URL is too long$"):
        load_document(base + "/openapi.yaml?" + "x" * 20_000)


def test_a_slow_endless_body_is_cut_by_the_deadline(base: str) -> None:
    with pytest.raises(SpecError, match=r"/endless: cannot fetch the document: no answer from that address"):
        load_document(base + "/endless", deadline=1)


def test_loopback_documents_need_an_allowance(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_VARIABLE)
    with pytest.raises(SpecError, match=r"cannot fetch the document: this server's egress policy does not allow"):
        load_document(base + "/openapi.yaml")
    assert load_document(base + "/openapi.yaml", egress=EgressPolicy(LOOPBACK))["info"]["title"] == "Petstore"


@pytest.fixture
def closing_port() -> Iterator[int]:
    """A port that accepts connections and closes them at once, without a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    thread.join(timeout=5)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port  # closed again: a connection to it is refused


def test_refused_and_closed_ports_give_the_same_answer(
    closing_port: int, tmp_path: Path, serve: Callable[..., str]
) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'registry.sqlite3'}")
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace("acme", "Acme")
    admin = serve(AdminAPI(registry, token=TOKEN, egress=EgressPolicy(LOOPBACK)))
    answers = []
    for port in (unused_port(), closing_port):
        response = httpx.post(admin + "/admin/v1/workspaces/acme/imports", headers={"Authorization": f"Bearer {TOKEN}"},
                              json={"format": "openapi", "url": f"http://127.0.0.1:{port}/openapi.json"})  # fmt: skip
        assert response.status_code == 422
        answers.append(re.sub(r"127\.0\.0\.1:\d+", "ADDRESS", response.text))
    assert answers[0] == answers[1]
    assert "no answer from that address" in answers[0]
    engine.dispose()


def test_the_admin_api_does_not_say_what_a_refused_name_resolves_to(
    base: str, sqlite_registry: Registry, serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_registry.create_workspace("acme", "Acme")
    admin = serve(AdminAPI(sqlite_registry, token=TOKEN, egress=EgressPolicy()))  # public addresses only
    url = base.replace("127.0.0.1", "localhost") + "/openapi.yaml"
    port = url.split(":")[2].split("/")[0]
    with caplog.at_level(logging.INFO, logger="crank"):
        response = httpx.post(admin + "/admin/v1/workspaces/acme/imports", headers={"Authorization": f"Bearer {TOKEN}"},
                              json={"format": "openapi", "url": url})  # fmt: skip
    assert response.status_code == 422
    assert "this server's egress policy does not allow that address" in response.text
    assert "127.0.0.1" not in response.text and "::1" not in response.text and "public" not in response.text
    assert f":{port} is not a public address" in caplog.text  # the operator's log names it
