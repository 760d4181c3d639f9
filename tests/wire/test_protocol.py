"""Early answers of `crank.wire.protocol.CrankHTTPProtocol` (`crank.wire.asgi.EarlyAnswers`), over real sockets:
an answer the app gives from a request's head is written without calling the app, and the connection goes on
as after any answer. The gateway's own early answers (a tenant over its plan): tests/gateway/test_limits.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn

from crank.types import Receive, Scope, Send
from crank.wire import protocol
from crank.wire.asgi import EarlyAnswer, read_body, send_response
from crank.wire.connection_limits import ConnectionLimits
from crank.wire.protocol import protocol_for

EARLY: EarlyAnswer = (429, [(b"content-type", b"application/json"), (b"retry-after", b"7")], b'{"early":true}')


class App:
    """Answers every request with its body's length, and counts the requests it saw; `answer_early` answers
    the paths under /early/ itself."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.asked: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.seen.append(scope["path"])
        if scope["path"] == "/slow":  # still answering when the next request on the connection comes
            await asyncio.sleep(0.3)
        body = await read_body(receive)
        await send_response(send, 200, b'{"length":%d}' % len(body))

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        self.asked.append(dict(scope))
        if scope["path"] == "/early/fails":
            raise RuntimeError("a bug in the app's early answers")
        return EARLY if scope["path"].startswith("/early/") else None


@pytest.fixture
def app_and_port(serve: Callable[..., str]) -> tuple[App, int]:
    app = App()
    url = serve(app, http=protocol_for(ConnectionLimits(), app.answer_early))
    return app, int(url.rsplit(":", 1)[1])


def request(path: str, body: bytes = b"", *headers: str, version: str = "1.1", method: str = "POST") -> bytes:
    head = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def answers(port: int, data: bytes, count: int) -> tuple[list[tuple[int, dict[str, str], bytes]], bool]:
    """Send `data` on one connection and read `count` answers; also whether the server then closed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        buffer, read = b"", []
        while len(read) < count:
            head_end = buffer.find(b"\r\n\r\n")
            if head_end >= 0:
                lines = buffer[:head_end].decode("latin-1").split("\r\n")
                if lines[0].split()[1] == "100":  # a go-ahead for the body, not an answer
                    buffer = buffer[head_end + 4 :]
                    continue
                headers = dict(line.lower().split(": ", 1) for line in lines[1:])
                end = head_end + 4 + int(headers["content-length"])
                if len(buffer) >= end:
                    read.append((int(lines[0].split()[1]), headers, buffer[head_end + 4 : end]))
                    buffer = buffer[end:]
                    continue
            chunk = sock.recv(65536)
            assert chunk, f"the connection closed after {len(read)} answers"
            buffer += chunk
        sock.settimeout(0.5)
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False
    return read, closed


def test_an_early_answer_is_written_without_calling_the_app(app_and_port: tuple[App, int]) -> None:
    app, port = app_and_port
    (early, later), closed = answers(port, request("/early/x", b"{}") + request("/late", b"abc"), 2)
    assert early == (429, early[1], b'{"early":true}')
    assert early[1]["retry-after"] == "7" and early[1]["content-type"] == "application/json"
    assert early[1]["content-length"] == "14" and "date" in early[1] and "server" in early[1]
    assert later[:1] == (200,) and later[2] == b'{"length":3}'
    assert app.seen == ["/late"] and not closed  # the app saw only the second; the connection stays open
    assert [scope["path"] for scope in app.asked] == ["/early/x", "/late"]
    assert app.asked[0]["method"] == "POST" and app.asked[0]["query_string"] == b""


def test_the_body_of_an_early_answered_request_is_dropped_and_the_connection_closed(
    app_and_port: tuple[App, int],
) -> None:
    # A large body after the early answer: the answer says the connection closes, the body is dropped (at most
    # 64 KiB of it read), and the request after it is never read (tests/wire/test_slow_clients.py has the rest).
    app, port = app_and_port
    body = b"x" * 300_000
    (early,), closed = answers(port, request("/early/big", body) + request("/late", b"12345"), 1)
    assert early[0] == 429 and early[1]["connection"] == "close" and closed
    assert app.seen == []


@pytest.mark.parametrize(
    ("headers", "version"), [(("Connection: close",), "1.1"), ((), "1.0")], ids=["connection-close", "http-1.0"]
)
def test_an_early_answer_closes_the_connection_its_client_asked_to_close(
    app_and_port: tuple[App, int], headers: tuple[str, ...], version: str
) -> None:
    _, port = app_and_port
    (early,), closed = answers(port, request("/early/x", b"{}", *headers, version=version), 1)
    assert early[0] == 429 and early[1]["connection"] == "close" and closed


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/early/%41", ()), ("/early/x", ("Expect: 100-continue",))],
    ids=["percent-encoded-path", "expect-100-continue"],
)
def test_requests_the_protocol_does_not_answer_early_go_to_the_app(
    app_and_port: tuple[App, int], path: str, headers: tuple[str, ...]
) -> None:
    app, port = app_and_port
    (answer,), _ = answers(port, request(path, b"{}", *headers), 1)
    assert answer[0] == 200 and len(app.seen) == 1
    assert not app.asked  # not even asked: uvicorn decodes such a path its own way; 100-continue waits for a go


def test_a_pipelined_request_behind_an_unanswered_one_goes_to_the_app_in_its_turn(
    app_and_port: tuple[App, int],
) -> None:
    # While the app answers the first request, an early answer to the second would overtake it.
    app, port = app_and_port
    (first, second), _ = answers(port, request("/slow", b"a" * 10) + request("/early/x", b"{}"), 2)
    assert (first[0], first[2], second[0], second[2]) == (200, b'{"length":10}', 200, b'{"length":2}')
    assert app.seen == ["/slow", "/early/x"]


def test_without_early_answers_the_protocol_calls_the_app_for_everything(serve: Callable[..., Any]) -> None:
    app = App()
    url = serve(app, http=protocol_for(ConnectionLimits()))
    (answer,), _ = answers(int(url.rsplit(":", 1)[1]), request("/early/x", b"{}"), 1)
    assert answer[0] == 200 and app.seen == ["/early/x"] and not app.asked


def test_a_head_request_is_never_answered_early(app_and_port: tuple[App, int]) -> None:
    # Its answer has no body: the app's path (uvicorn) writes it so.
    app, port = app_and_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request("/early/x", method="HEAD"))
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")  # no body follows
    assert app.seen == ["/early/x"] and not app.asked


def test_an_early_answer_that_fails_leaves_the_request_to_the_app(
    app_and_port: tuple[App, int], caplog: pytest.LogCaptureFixture
) -> None:
    app, port = app_and_port
    (answer,), _ = answers(port, request("/early/fails", b"{}"), 1)
    assert answer[0] == 200 and app.seen == ["/early/fails"]
    assert any("an early answer failed" in record.getMessage() for record in caplog.records)


def test_a_client_that_never_reads_its_early_answers_cannot_make_them_pile_up(
    app_and_port: tuple[App, int],
) -> None:
    # Once the answers fill what the client's side holds, the server stops answering early, the app's path
    # queues the next request and stops reading: the client cannot send much more than the buffers hold.
    _, port = app_and_port
    chunk = request("/early/x", b"{}") * 1000
    sent = 0
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.connect(("127.0.0.1", port))
        sock.settimeout(2)
        with contextlib.suppress(TimeoutError):
            while sent < 64 * 1024 * 1024:
                sent += sock.send(chunk)
    assert sent < 16 * 1024 * 1024, f"{sent:,} bytes of requests were taken from a client that reads nothing"


def test_a_connection_whose_body_comes_after_its_early_answer_is_closed(serve: Callable[..., str]) -> None:
    # Answered early before the body came: the answer says the connection closes, and it does, the body dropped.
    app = App()
    url = serve(app, http=protocol_for(ConnectionLimits(), app.answer_early), timeout_keep_alive=1)
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(request("/early/x", b"12345")[:-5])  # the head alone
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 429 ") and b"\r\nconnection: close\r\n" in answer
        sock.sendall(b"12345")  # the body, after its answer
        assert sock.recv(65536) == b""  # closed, not left open for ever


def test_an_app_that_answers_nothing_early_now_is_not_asked(serve: Callable[..., Any]) -> None:
    # `answers_now` (crank.wire.asgi.EarlyAnswersNow) says no: no scope is built to ask, the app answers.
    app, now = App(), [False]
    url = serve(app, http=protocol_for(ConnectionLimits(), app.answer_early, lambda: now[0]))
    port = int(url.rsplit(":", 1)[1])
    (answer,), _ = answers(port, request("/early/x", b"{}"), 1)
    assert answer[0] == 200 and app.seen == ["/early/x"] and not app.asked
    now[0] = True
    (answer,), _ = answers(port, request("/early/x", b"{}"), 1)
    assert answer[0] == 429 and len(app.asked) == 1


# The app's answers: `_Cycle` writes the common one itself (a head with a content-length, then the whole body) and
# leaves every other shape to uvicorn. Each case is served by Crank's protocol and by uvicorn's own, and the bytes
# on the wire must be the same but for the date.

LENGTH_2 = (b"content-length", b"2")
ANSWERS: dict[str, list[dict[str, Any]]] = {
    "content-length": [
        {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json"), (b"Content-Length", b"2"), (b"vary", b"Accept")]},
        {"type": "http.response.body", "body": b"{}"},
    ],
    "content-length-in-parts": [
        {"type": "http.response.start", "status": 201, "headers": [(b"content-length", b"6")]},
        {"type": "http.response.body", "body": b"abc", "more_body": True},
        {"type": "http.response.body", "body": b"def"},
    ],
    "chunked": [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]},
        {"type": "http.response.body", "body": b"abc", "more_body": True},
        {"type": "http.response.body", "body": b"def"},
    ],
    "app-closes": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, (b"connection", b"close")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "invalid-header-value": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, (b"x-a", b"1\r\nx-b: 2")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "invalid-header-name": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, (b"x a", b"1")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "body-longer-than-its-length": [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]},
        {"type": "http.response.body", "body": b"toolong"},
    ],
    "body-shorter-than-its-length": [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"9")]},
        {"type": "http.response.body", "body": b"short"},
    ],
    "chunked-ending-empty": [  # an event stream's shape: its last message has no body
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]},
        {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ],
    "no-content": [
        {"type": "http.response.start", "status": 204, "headers": []},
        {"type": "http.response.body", "body": b""},
    ],
    "invalid-header-value-of-two-lines": [
        {"type": "http.response.start", "status": 200,
         "headers": [LENGTH_2, (b"x-a", b"1\r\ntransfer-encoding: chunked")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "invalid-header-name-of-two-lines": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, (b"x-a: 1\r\nset-cookie", b"s=1")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "invalid-header-name-with-a-colon": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, (b"transfer-encoding: chunked", b"x")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "invalid-header-of-str": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, ("x-a", "1")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "iterated-headers": [  # (`Scripted` sends them as an iterator): chunked, so uvicorn's `send` reads them
        {"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "invalid-status": [
        {"type": "http.response.start", "status": 999, "headers": [LENGTH_2]},
        {"type": "http.response.body", "body": b"ok"},
    ],
    "two-lengths": [
        {"type": "http.response.start", "status": 200, "headers": [LENGTH_2, LENGTH_2]},
        {"type": "http.response.body", "body": b"ok"},
    ],
}  # fmt: skip


class Scripted:
    """Answers a request for /NAME with the messages of ANSWERS[NAME]; records each request's scope."""

    def __init__(self) -> None:
        self.headers: list[list[tuple[bytes, bytes]]] = []
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.headers.append(list(scope["headers"]))
        self.scopes.append({key: scope[key] for key in ("method", "path", "raw_path", "query_string", "http_version")})
        await read_body(receive)
        name = scope["path"].strip("/")
        for message in ANSWERS[name]:
            if name.startswith("iterated-") and "headers" in message:
                message = {**message, "headers": iter(message["headers"])}
            await send(message)


def wire(port: int, data: bytes) -> bytes:
    """All the server writes for `data` until it closes the connection or pauses for half a second; its date
    line taken out."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.settimeout(0.5)
        with contextlib.suppress(TimeoutError):
            while chunk := sock.recv(65536):
                received += chunk
    return b"".join(line for line in received.splitlines(keepends=True) if not line.startswith(b"date: "))


@pytest.fixture
def crank_and_uvicorn(serve: Callable[..., str]) -> tuple[int, int, Scripted, Scripted]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    crank, uvicorn = Scripted(), Scripted()
    crank_url = serve(crank, http=protocol_for(ConnectionLimits()))
    uvicorn_url = serve(uvicorn, http=HttpToolsProtocol)
    return int(crank_url.rsplit(":", 1)[1]), int(uvicorn_url.rsplit(":", 1)[1]), crank, uvicorn


@pytest.mark.parametrize("name", list(ANSWERS))
@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_an_apps_answer_is_written_as_uvicorn_writes_it(
    crank_and_uvicorn: tuple[int, int, Scripted, Scripted], name: str, version: str
) -> None:
    # A second request follows on the same connection: whether it is answered shows that the connection was kept.
    crank_port, uvicorn_port, _, _ = crank_and_uvicorn
    data = request(f"/{name}", b"{}", version=version) + request("/content-length", b"", version=version)
    written = wire(crank_port, data)
    assert written == wire(uvicorn_port, data)
    # uvicorn closes without a word when a header or the status is not valid: its head was started, no 500 follows
    assert written.startswith(b"HTTP/1.1 ") != name.startswith("invalid-")


def test_the_common_answer_is_one_head_and_its_body_and_the_connection_is_kept(
    crank_and_uvicorn: tuple[int, int, Scripted, Scripted],
) -> None:
    crank_port = crank_and_uvicorn[0]
    (first, second), closed = answers(crank_port, request("/content-length") + request("/content-length"), 2)
    assert first == second and first[0] == 200 and first[2] == b"{}" and not closed
    # (`answers` lowers each line)
    assert first[1]["content-type"] == "application/json" and first[1]["vary"] == "accept"
    assert "transfer-encoding" not in first[1] and "connection" not in first[1]


def test_trailing_whitespace_of_a_header_value_is_not_part_of_it(
    crank_and_uvicorn: tuple[int, int, Scripted, Scripted],
) -> None:
    # RFC 9110 §5.5: the parser keeps it; a token or a protocol version compared as sent would then not match.
    crank_port, uvicorn_port, crank, uvicorn = crank_and_uvicorn
    data = request("/content-length", b"", "Authorization: Bearer key \t", "Mcp-Protocol-Version:  2025-11-25  ")
    wire(crank_port, data)
    wire(uvicorn_port, data)
    assert (b"authorization", b"Bearer key") in crank.headers[0]
    assert (b"mcp-protocol-version", b"2025-11-25") in crank.headers[0]
    assert crank.headers == uvicorn.headers


@pytest.mark.parametrize(
    ("method", "target", "version"),
    [("POST", "/content%2Dlength?x=1", "1.1"), ("HEAD", "/content-length", "1.1"), ("GET", "/chunked", "1.0")],
    ids=["percent-encoded-path", "head", "http-1.0"],
)
def test_a_requests_scope_and_answer_are_uvicorns(
    crank_and_uvicorn: tuple[int, int, Scripted, Scripted], method: str, target: str, version: str
) -> None:
    crank_port, uvicorn_port, crank, uvicorn = crank_and_uvicorn
    data = request(target, b"", version=version, method=method)
    assert wire(crank_port, data) == wire(uvicorn_port, data)
    assert crank.scopes == uvicorn.scopes and len(crank.scopes) == 1


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_answers_are_not_logged_when_the_configuration_turns_the_access_log_off(
    crank_and_uvicorn: tuple[int, int, Scripted, Scripted],
) -> None:
    # A handler on uvicorn's access logger (an operator's logging setup, or a test's) does not turn the access
    # log on for Crank's protocol when the configuration turns it off (`crank serve` does); uvicorn's own logs.
    access, kept = logging.getLogger("uvicorn.access"), Kept()
    level = access.level
    access.addHandler(kept)
    access.setLevel(logging.INFO)
    try:
        answers(crank_and_uvicorn[0], request("/content-length"), 1)
        assert not kept.records
        answers(crank_and_uvicorn[1], request("/content-length"), 1)
        assert len(kept.records) == 1  # uvicorn's protocol, served alike, logs its answer
    finally:
        access.removeHandler(kept)
        access.setLevel(level)


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # in a thread: the test stops it
        pass


def test_a_request_whose_body_comes_during_shutdown_is_answered_and_its_connection_closed() -> None:
    # uvicorn's graceful shutdown asks each connection to close after its answer; a request whose body was still
    # coming then must not be given its keep-alive back when the body comes whole.
    app = App()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                            http=protocol_for(ConnectionLimits()))  # fmt: skip
    server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    until(lambda: server.started, "the server to start")
    try:
        with socket.create_connection(listener.getsockname(), timeout=10) as sock:
            sock.sendall(request("/x", b"12345")[:-3])  # the head and part of the body
            until(lambda: app.seen == ["/x"], "the app to wait for the body")
            server.should_exit = True
            until(lambda: not server.servers or all(not s.is_serving() for s in server.servers), "the shutdown")
            until(lambda: all(not c.cycle.keep_alive for c in server.server_state.connections), "the close asked")
            sock.sendall(b"345")
            answer = _read_to_close(sock)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"length":5}')
        assert b"\r\nconnection: close\r\n" in answer
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.01)


def _read_to_close(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


@pytest.mark.parametrize(
    ("name", "value"),
    [("x-served-by", "crank"), ("x-served-by", "a\x01b"), ("connection", "close")],
    ids=["valid", "not-valid", "connection-close"],
)
def test_headers_of_the_configuration_are_written_and_checked_as_uvicorn_does(
    serve: Callable[..., str], name: str, value: str
) -> None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    headers = [(name, value)]
    crank = int(serve(Scripted(), http=protocol_for(ConnectionLimits()), headers=headers).rsplit(":", 1)[1])
    uvicorn_port = int(serve(Scripted(), http=HttpToolsProtocol, headers=headers).rsplit(":", 1)[1])
    data = request("/content-length") + request("/content-length")
    written = wire(crank, data)
    assert written == wire(uvicorn_port, data)
    assert (b"\r\nx-served-by: crank\r\n" in written) == (value == "crank")
    assert written.count(b"HTTP/1.1 200") == (2 if value == "crank" else 1 if name == "connection" else 0)


def test_the_common_answer_takes_the_short_path_and_the_others_uvicorns(
    crank_and_uvicorn: tuple[int, int, Scripted, Scripted], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What uvicorn's `send` was given, for Crank's protocol: nothing for the common answer, every message of
    # a chunked one. (The tests above show the bytes are the same either way.)
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    seen: list[str] = []
    uvicorns = RequestResponseCycle.send

    async def send(cycle: RequestResponseCycle, message: Any) -> None:
        seen.append(message["type"])
        await uvicorns(cycle, message)

    monkeypatch.setattr(RequestResponseCycle, "send", send)
    answers(crank_and_uvicorn[0], request("/content-length") + request("/content-length"), 2)
    assert seen == []
    wire(crank_and_uvicorn[0], request("/chunked"))
    assert seen == ["http.response.start", "http.response.body", "http.response.body"]


# The header lines of an app's answers, kept once checked (`_LINES`): bounded, and never a way around the check.


@pytest.fixture
def no_kept_lines(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[bytes, bytes], bytes]:
    kept: dict[tuple[bytes, bytes], bytes] = {}
    monkeypatch.setattr(protocol, "_LINES", kept)
    return kept


def test_header_lines_are_kept_up_to_a_bound_and_still_written_beyond_it(
    no_kept_lines: dict[tuple[bytes, bytes], bytes],
) -> None:
    for number in range(protocol._LINES_MAX * 2):
        head, length = protocol._fields([(b"Content-Length", b"2"), (b"X-Number", b"%d" % number)], True)
        assert head == b"content-length: 2\r\nx-number: %d\r\n" % number and length == 2
    assert len(no_kept_lines) == protocol._LINES_MAX
    assert all(name == b"X-Number" for name, _ in no_kept_lines)  # a length is never kept: it changes each answer
    assert protocol._fields([(b"X-Number", b"1")], False) == (b"x-number: 1\r\nconnection: close\r\n", -1)


def test_a_long_header_line_is_written_and_not_kept(no_kept_lines: dict[tuple[bytes, bytes], bytes]) -> None:
    value = b"v" * protocol._LINE_MAX_BYTES
    assert protocol._fields([(b"x-long", value), (b"content-length", b"0")], True)[0] == b"x-long: %s\r\n" % value + (
        b"content-length: 0\r\n"
    )
    assert not no_kept_lines


@pytest.mark.parametrize(
    "pair",
    [(b"x-a", b"1\r\nx-b: 2"), (b"x a", b"1"), (b"x-a: 1\r\nset-cookie", b"s"), (b"Connection", b"close"),
     (b"transfer-encoding", b"chunked"), (b"x-a", b"\x00")],
    ids=["two-lines", "space-in-name", "colon-in-name", "connection", "transfer-encoding", "control-byte"],
)  # fmt: skip
def test_a_header_line_uvicorn_must_write_is_never_kept(
    no_kept_lines: dict[tuple[bytes, bytes], bytes], pair: tuple[bytes, bytes]
) -> None:
    for _ in range(2):  # asked again, it is still left to uvicorn's `send`
        assert protocol._fields([pair, (b"content-length", b"0")], True) == (b"", -1)
    assert not no_kept_lines


def test_header_lines_not_of_bytes_are_not_kept(no_kept_lines: dict[tuple[bytes, bytes], bytes]) -> None:
    class Name(bytes):
        pass

    assert protocol._fields([(Name(b"x-a"), b"1"), (b"content-length", b"0")], True)[1] == 0
    with pytest.raises(TypeError):  # `_Cycle._start` leaves these to uvicorn's `send`
        protocol._fields([("x-a", "1")], True)  # type: ignore[list-item]
    with pytest.raises(TypeError):
        protocol._fields([[b"x-a", b"1"]], True)  # type: ignore[list-item]
    assert not no_kept_lines


# Each request's task (`CrankHTTPProtocol._start_asgi_task`): its own, counted by the server while it runs.


class Tasks:
    """Answers whether the server counts the request's task; keeps each task. /fails raises after a timeout
    and `asyncio.current_task` were used (both need a task)."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[Any]] = []
        self.server: uvicorn.Server | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        task = asyncio.current_task()
        assert task is not None and self.server is not None
        self.tasks.append(task)
        async with asyncio.timeout(10):
            await read_body(receive)
        if scope["path"] == "/fails":
            raise RuntimeError("a bug in the app")
        if scope["path"] == "/factory":  # the next task comes from a task factory
            asyncio.get_running_loop().set_task_factory(_factory)
        counted = task in self.server.server_state.tasks
        await send_response(send, 200, b'{"counted":%s}' % (b"true" if counted else b"false"))


FACTORY_MADE: list[asyncio.Task[Any]] = []


def _factory(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
    loop.set_task_factory(None)
    task = asyncio.Task(coro, loop=loop, **options)
    FACTORY_MADE.append(task)
    return task


@contextlib.contextmanager
def served_tasks(**options: Any) -> Any:
    app = Tasks()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False,
                            http=protocol_for(ConnectionLimits()), **options)  # fmt: skip
    server = app.server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    until(lambda: server.started, "the server to start")
    try:
        yield app, server, listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_each_request_has_a_task_of_its_own_that_leaves_the_servers_tasks_as_it_ends() -> None:
    with served_tasks() as (app, server, port):
        data = request("/a") + request("/fails") + request("/b")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(data)
            received = _read_to_close(sock)  # uvicorn closes the connection after the 500
        assert received.count(b'{"counted":true}') == 1 and b" 500 Internal Server Error\r\n" in received
        (answered,), _ = answers(port, request("/c"), 1)
        assert answered[2] == b'{"counted":true}'
        until(lambda: not server.server_state.tasks, "the tasks to leave the server's set")
        assert len(set(app.tasks)) == len(app.tasks) == 3
        assert all(task.done() and task.get_name() == protocol._TASK_NAME for task in app.tasks)


@pytest.mark.parametrize("options", [{"reset_contextvars": True}, {}], ids=["contexts-reset", "task-factory"])
def test_uvicorns_tasks_are_made_where_the_loop_or_the_configuration_asks_for_them(options: dict[str, Any]) -> None:
    FACTORY_MADE.clear()
    with served_tasks(**options) as (app, server, port):
        if not options:
            answers(port, request("/factory"), 1)
        (answered,), _ = answers(port, request("/x"), 1)
        assert answered[2] == b'{"counted":true}'
        until(lambda: not server.server_state.tasks, "the tasks to leave the server's set")
        made = app.tasks[-1]
        assert made.get_name() != protocol._TASK_NAME  # uvicorn's `loop.create_task`
        assert FACTORY_MADE == ([] if options else [made])


# The common answer's head and body go out together (`_Writer.write_answer`): one system call, where written
# apart each was a send and a TCP segment of its own. Served over a transport that records each call the
# protocol makes, as a socket's would be made (`writelines` is one `writev`).


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[bytes]] = []
        self.closing = False

    def write(self, data: Any) -> None:
        self.calls.append([bytes(data)])

    def writelines(self, data: Any) -> None:
        self.calls.append([bytes(piece) for piece in data])

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)


def calls_for(app: Any, data: bytes) -> list[list[bytes]]:
    """The transport calls of Crank's protocol serving `data` (requests on one connection) with `app`."""
    from uvicorn.server import ServerState

    loop = asyncio.new_event_loop()
    config = uvicorn.Config(app, log_config=None, access_log=False, http=protocol_for(ConnectionLimits()), ws="none")
    config.load()
    state = ServerState()
    connection = config.http_protocol_class(config=config, server_state=state, app_state={}, _loop=loop)
    transport = RecordingTransport()
    connection.connection_made(transport)

    async def served() -> None:
        connection.data_received(data)
        while state.tasks or state.total_requests < data.count(b" HTTP/1.1\r\n"):
            await asyncio.sleep(0)

    try:
        loop.run_until_complete(asyncio.wait_for(served(), 10))
        connection.connection_lost(None)
    finally:
        loop.close()
    return transport.calls


def test_the_common_answers_head_and_body_are_written_in_one_call() -> None:
    calls = calls_for(Scripted(), request("/content-length") + request("/no-content"))
    assert len(calls) == 3, calls
    (head, body), (no_content_head,), _ = calls[0], calls[1], calls[2]
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n") and body == b"{}"
    assert no_content_head.startswith(b"HTTP/1.1 204 No Content\r\n")  # no body: the head alone


def test_an_answer_in_parts_writes_its_head_before_its_first_part() -> None:
    calls = calls_for(Scripted(), request("/content-length-in-parts"))
    assert [len(call) for call in calls] == [1, 1, 1]
    assert calls[0][0].startswith(b"HTTP/1.1 201 Created\r\n") and calls[1:] == [[b"abc"], [b"def"]]


async def large(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "http":
        await read_body(receive)
        await send_response(send, 200, b"x" * (protocol._PIECE + 1))


def test_a_large_answer_writes_its_head_then_its_body_in_pieces() -> None:
    calls = calls_for(large, request("/"))
    assert [len(call) for call in calls] == [1, 1, 1]
    assert calls[0][0].startswith(b"HTTP/1.1 200 OK\r\n") and calls[0][0].endswith(b"\r\n\r\n")
    assert len(calls[1][0]) == protocol._PIECE and calls[2] == [b"x"]
