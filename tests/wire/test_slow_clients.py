"""What `crank.wire.protocol.CrankHTTPProtocol` does with clients that do not take their answers, send bodies
after a refusal, or ask for an upgrade, over real sockets (the same limits through a whole `crank serve`:
tests/wire/test_listen.py)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from crank.types import Receive, Scope, Send
from crank.wire.asgi import EarlyAnswer, read_body, send_response
from crank.wire.connection_limits import ConnectionLimits
from crank.wire.middleware import BodyLimitMiddleware
from crank.wire.protocol import protocol_for

ANSWER = 16 * 1024 * 1024  # bytes of the large answer: far more than the kernel's buffers take
REFUSED: EarlyAnswer = (401, [(b"content-type", b"application/json")], b'{"refused":true}')


class App:
    """`/large` answers `ANSWER` bytes; `/refuse` answers 401 without reading the body; `/early/...` is answered
    from the head (`answer_early`); everything else answers its body's length. Counts the requests it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.seen.append(scope["path"])
        if scope["path"] == "/large":
            await send_response(send, 200, b"x" * ANSWER)
        elif scope["path"] == "/refuse":
            await send_response(send, *REFUSED[::2], REFUSED[1][1:])
        else:
            body = await read_body(receive)
            await send_response(send, 200, b'{"length":%d}' % len(body))

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        return REFUSED if scope["path"].startswith("/early/") else None


LIMITS = ConnectionLimits(send_timeout=1.0, max_connections=4, body_timeout=30.0)


@pytest.fixture
def served(serve: Callable[..., str]) -> Iterator[tuple[App, int]]:
    app = App()
    url = serve(BodyLimitMiddleware(app, 1000), http=protocol_for(LIMITS, app.answer_early))
    app_port = int(url.rsplit(":", 1)[1])
    yield app, app_port


def get(path: str, *headers: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]).encode()


def slow_socket(port: int, request: bytes, *, buffer: int = 4096) -> socket.socket:
    """A connection with a receive buffer of `buffer` bytes that has sent `request` and reads nothing yet."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def read_until_closed(sock: socket.socket, *, pace: float = 0.0, size: int = 65536, within: float = 30) -> int:
    """Read until the server closes (a reset counts); `size` bytes at a time every `pace` seconds: bytes read."""
    total, deadline = 0, time.monotonic() + within
    sock.settimeout(within)
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(size):
            total += len(chunk)
            assert time.monotonic() < deadline, "the server kept a stalled connection open"
            time.sleep(pace)
    return total


def test_a_client_that_reads_nothing_of_its_answer_is_closed_after_the_send_timeout(
    served: tuple[App, int], caplog: pytest.LogCaptureFixture
) -> None:
    _, port = served
    with slow_socket(port, get("/large")) as sock:
        time.sleep(3)  # the send timeout (1 s) and a sweep: the connection is closed meanwhile
        started = time.monotonic()
        taken = read_until_closed(sock, size=1 << 20)
    assert taken < ANSWER // 2 and time.monotonic() - started < 5  # what the buffers held, then the close
    assert any("CRANK_SEND_TIMEOUT" in record.getMessage() for record in caplog.records)


def test_a_client_that_reads_a_byte_a_second_is_closed_after_the_send_timeout(served: tuple[App, int]) -> None:
    _, port = served
    with slow_socket(port, get("/large")) as sock:
        for _ in range(4):  # a byte a second, for longer than the send timeout (1 s) and a sweep
            assert sock.recv(1)
            time.sleep(1)
        assert read_until_closed(sock, size=1 << 20) < ANSWER // 2  # what the buffers held, then the close


def test_a_steady_reader_of_a_large_answer_gets_all_of_it(served: tuple[App, int]) -> None:
    # At most 64 KiB every 0.05 s: far slower than the loopback, but more than 64 KiB within each send timeout.
    _, port = served
    with slow_socket(port, get("/large", "Connection: close"), buffer=65536) as sock:
        taken = read_until_closed(sock, pace=0.05, size=65536, within=120)
    assert taken > ANSWER  # the head and the whole answer


def test_a_large_answer_reaches_a_fast_client_whole(served: tuple[App, int]) -> None:
    _, port = served
    answer = httpx.get(f"http://127.0.0.1:{port}/large", timeout=30)
    assert answer.status_code == 200 and len(answer.content) == ANSWER
    assert httpx.get(f"http://127.0.0.1:{port}/small", timeout=30).json() == {"length": 0}


def test_a_stalled_connection_gives_way_at_the_cap_and_another_client_is_served_at_once(
    serve: Callable[..., str],
) -> None:
    # The cap is 4 connections: 4 stalled readers hold them all; a fifth client closes the one stalled longest.
    app = App()
    url = serve(app, http=protocol_for(ConnectionLimits(send_timeout=30, max_connections=4)))
    port = int(url.rsplit(":", 1)[1])
    with contextlib.ExitStack() as stack:
        stalled = [stack.enter_context(slow_socket(port, get("/large"))) for _ in range(4)]
        deadline = time.monotonic() + 10
        while app.seen.count("/large") < 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.5)  # stalled for the grace (1 s) by now, far from the send timeout (30 s)
        started = time.monotonic()
        answer = httpx.get(f"http://127.0.0.1:{port}/small", timeout=5)
        assert answer.json() == {"length": 0} and time.monotonic() - started < 1
        assert read_until_closed(stalled[0], size=1 << 20) < ANSWER  # the oldest one gave way


def chunked_ones(sock: socket.socket, limit: int = 64 * 1024 * 1024) -> int:
    """Send 1-byte chunks until the server closes the connection, or `limit` bytes: what was sent."""
    chunk = b"1\r\nx\r\n" * 10_000
    sent = 0
    sock.settimeout(10)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
        while sent < limit:
            sent += sock.send(chunk)
    return sent


@pytest.mark.parametrize("path", ["/refuse", "/early/x", "/length"], ids=["app-401", "early-401", "413"])
def test_an_endless_body_of_one_byte_chunks_after_a_refusal_is_cut_off(served: tuple[App, int], path: str) -> None:
    app, port = served
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head)
        sent = chunked_ones(sock)
        sock.settimeout(5)
        answer = b""
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := sock.recv(65536):
                answer += chunk
    # What the kernels' buffers take, and the 64 KiB drained: never the 64 MiB offered.
    assert sent < 16 * 1024 * 1024, f"{sent:,} bytes of a refused body were taken"
    if answer:  # a client that sends on may miss its answer, as from any server that stops reading
        assert b"\r\nconnection: close\r\n" in answer
        assert answer.split(b" ", 2)[1] in (b"401", b"413")


def test_a_refused_client_that_stops_sending_reads_its_answer_and_the_close(served: tuple[App, int]) -> None:
    _, port = served
    head = b"POST /refuse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 900\r\n\r\n" + b"x" * 100
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ") and b"\r\nconnection: close\r\n" in answer
    assert answer.endswith(b'{"refused":true}')


def test_a_refusal_of_a_body_that_came_whole_keeps_the_connection(served: tuple[App, int]) -> None:
    # The body came with the head: the connection goes on, after an answer of the app's and an early one alike.
    app, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        answers = []
        for path, last in (("/refuse", b'{"refused":true}'), ("/early/x", b'{"refused":true}'), ("/after", b"2}")):
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{{}}".encode())
            answer = b""
            while not answer.endswith(last):
                answer += sock.recv(65536)
            answers.append(answer)
    assert [answer.split(b" ", 2)[1] for answer in answers] == [b"401", b"401", b"200"]
    assert not any(b"connection: close" in answer for answer in answers)
    assert app.seen == ["/refuse", "/after"]


def test_an_upgrade_to_websocket_is_refused_and_reaches_no_app(
    served: tuple[App, int], caplog: pytest.LogCaptureFixture
) -> None:
    app, port = served
    upgrade = get("/mcp", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")  # fmt: skip
    for _ in range(200):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(upgrade)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 ") and b'"upgrade_not_supported"' in answer
    assert app.seen == []
    lines = [record for record in caplog.records if "WebSocket" in record.getMessage()]
    assert len(lines) <= 2 and not [record for record in caplog.records if record.levelname == "ERROR"]


def test_another_upgrade_is_served_as_a_plain_request_and_closed_after(served: tuple[App, int]) -> None:
    app, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(get("/h2c", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQ")
                     + get("/next"))  # fmt: skip
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b'{"length":0}')
    assert app.seen == ["/h2c"]


def test_a_connection_silent_after_its_answer_is_closed_by_the_keep_alive_deadline(serve: Callable[..., str]) -> None:
    # The keep-alive wait is a deadline of the sweep (no timer per answer): still kept, and still closed.
    app = App()
    url = serve(app, http=protocol_for(ConnectionLimits()), timeout_keep_alive=1)
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        for _ in range(2):  # kept between the two, each answered whole
            sock.sendall(get("/small"))
            answer = b""
            while not answer.endswith(b'{"length":0}'):
                answer += sock.recv(65536)
        started = time.monotonic()
        assert sock.recv(65536) == b""  # then closed, about a second (and a sweep) later
        assert time.monotonic() - started < 5
