"""The gateway's HTTP/1.1 client against scripted upstreams on loopback: each test's server writes the
exact bytes of an answer (chunked, gzip, 1xx, cut short, never) and records what it received."""

from __future__ import annotations

import asyncio
import contextvars
import gzip
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import trustme

from crank.exceptions import UpstreamBusyError, UpstreamConnectionError, UpstreamTimeoutError, UpstreamTooLargeError
from crank.gateway.client import UpstreamClient, parse_upstream_url

pytestmark = pytest.mark.anyio

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'

# What the scripted server does with the n-th request (1-based) of a connection: bytes to answer, `Close`
# bytes to answer and then close, None to close without answering, or HANG to keep the connection open
# without answering.
HANG = b""


class Close(bytes):
    pass


CONNECTION: contextvars.ContextVar[int] = contextvars.ContextVar("CONNECTION")  # which connection a script serves


Script = Callable[[bytes, int], Awaitable[bytes | None] | bytes | None]


@dataclass
class Upstream:
    url: str
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    closed_by_client: int = 0


@pytest.fixture
async def upstream() -> AsyncIterator[Callable[..., Awaitable[Upstream]]]:
    servers: list[asyncio.Server] = []

    async def start(script: Script, *, tls: ssl.SSLContext | None = None) -> Upstream:
        record = Upstream("")

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            record.connections += 1
            CONNECTION.set(record.connections)
            record.open_now += 1
            record.most_open = max(record.most_open, record.open_now)
            try:
                for n in range(1, 100):
                    try:
                        request = await _read_request(reader)
                    except asyncio.IncompleteReadError:
                        record.closed_by_client += 1
                        return
                    record.requests.append(request)
                    answer = script(request, n)
                    if asyncio.iscoroutine(answer):
                        answer = await answer
                    if answer is None:
                        return
                    if answer == HANG:
                        if not await reader.read(1):
                            record.closed_by_client += 1
                        return
                    writer.write(answer)
                    await writer.drain()
                    if isinstance(answer, Close):
                        return
            finally:
                record.open_now -= 1
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
        servers.append(server)
        record.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return record

    yield start
    for server in servers:
        server.close()


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    return head + (await reader.readexactly(length) if length else b"")


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream_client = UpstreamClient(max_response_bytes=1000)
    yield upstream_client
    await upstream_client.aclose()


async def get(client: UpstreamClient, url: str, method: str = "GET", timeout: float = 5, **kw: Any) -> Any:
    options: dict[str, Any] = {"params": None, "headers": {}, "body": None, **kw}
    return await client.request(method, url, timeout=timeout, **options)


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status}\r\n{head}".encode() + b"\r\n" + body


async def test_the_request_goes_out_as_written(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: OK)
    params = [("q", "a b&c"), ("tag", "é")]
    url = server.url + "/items/a%2Fb?x=1#fragment"
    response = await get(client, url, method="POST", params=params, headers={"X-Tenant": "acme"}, body=b'{"a":1}')
    assert (response.status, response.json()) == (200, {"ok": True})
    assert response.headers["content-type"] == "application/json"
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /items/a%2Fb?x=1&q=a%20b%26c&tag=%C3%A9 HTTP/1.1"
    assert f"Host: {server.url.removeprefix('http://')}" in lines
    assert {"X-Tenant: acme", "Content-Length: 7", "Accept-Encoding: gzip, deflate"} <= set(lines)
    assert body == b'{"a":1}'


async def test_the_callers_headers_replace_the_defaults(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: OK)
    await get(client, server.url + "/", headers={"accept": "application/json", "User-Agent": "agent/1"})
    lines = server.requests[0].decode().lower().split("\r\n")
    assert [line.split(":")[0] for line in lines].count("accept") == 1
    assert [line.split(":")[0] for line in lines].count("user-agent") == 1
    assert {"accept: application/json", "user-agent: agent/1", "accept-encoding: gzip, deflate"} <= set(lines)


async def test_repeated_answer_headers_are_joined(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: answer(b"{}", "Vary: a", "Content-Length: 2", "Vary: b", "vary: c"))
    assert (await get(client, server.url + "/")).headers["vary"] == "a, b, c"


async def test_keep_alive_connections_are_reused(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: OK)
    for _ in range(3):
        assert (await get(client, server.url + "/")).status == 200
    assert (server.connections, len(server.requests)) == (1, 3)


async def test_connection_close_is_honoured(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: answer(b"{}", "Content-Length: 2", "Connection: close"))
    for _ in range(2):
        assert (await get(client, server.url + "/")).json() == {}
    assert server.connections == 2


@pytest.mark.parametrize(
    "raw, body",
    [
        (answer(b'5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n', "Transfer-Encoding: chunked"), b'{"a": 1}'),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + OK, b'{"ok":true}'),
        (answer(b"", "Content-Length: 0", status="204 No Content"), b""),
    ],
    ids=["chunked", "after a 100 Continue", "204"],
)
async def test_answers_are_read_whole(upstream: Any, client: UpstreamClient, raw: bytes, body: bytes) -> None:
    server = await upstream(lambda request, n: raw)
    assert (await get(client, server.url + "/")).body == body
    assert (await get(client, server.url + "/")).body == body  # and the connection still carries the next
    assert server.connections == 1


async def test_bytes_after_the_answer_never_reach_the_next_request(upstream: Any, client: UpstreamClient) -> None:
    # A desynchronized upstream sends a second answer nobody asked for, in the same write as the first.
    injected = b"HTTP/1.1 200 OK\r\nX-Injected: yes\r\nContent-Length: 11\r\n\r\n" + b'{"ok":"no"}'
    server = await upstream(lambda request, n: OK + injected if n == 1 else OK)
    first = await get(client, server.url + "/")
    assert (first.json(), "x-injected" in first.headers, first.headers["content-length"]) == ({"ok": True}, False, "11")
    second = await get(client, server.url + "/", method="POST", body=b"{}")
    assert second.json() == {"ok": True}
    assert server.connections == 2  # the first connection was dropped, not reused


async def test_the_answer_to_head_after_a_1xx_still_has_no_body(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(
        lambda request, n: b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + answer(b"", "Content-Length: 50")
    )
    response = await get(client, server.url + "/", method="HEAD", timeout=2)
    assert (response.status, response.body) == (200, b"")


@pytest.mark.parametrize("method, status", [("HEAD", "200 OK"), ("GET", "304 Not Modified")])
async def test_answers_without_a_body_are_not_held_to_the_size_cap(
    upstream: Any, client: UpstreamClient, method: str, status: str
) -> None:
    server = await upstream(lambda request, n: answer(b"", "Content-Length: 5000", status=status))
    response = await get(client, server.url + "/", method=method)
    assert (response.status, response.body, response.headers["content-length"]) == (int(status[:3]), b"", "5000")


async def test_oversized_heads_are_refused(upstream: Any, client: UpstreamClient) -> None:
    head = [f"X-Filler: {'x' * 60}" for _ in range(1200)]  # ~80 KB of headers, over the 64 KB limit
    server = await upstream(lambda request, n: answer(b"{}", *head, "Content-Length: 2"))
    with pytest.raises(UpstreamTooLargeError):
        await get(client, server.url + "/")


async def test_an_answer_delimited_by_the_end_of_the_connection(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: Close(answer(b'{"long": "answer"}', "Connection: close")))
    assert (await get(client, server.url + "/")).json() == {"long": "answer"}


@pytest.mark.parametrize(
    "encoding, encode",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send it
    ],
    ids=["gzip", "deflate", "raw deflate"],
)
async def test_compressed_answers_are_decoded(
    upstream: Any, client: UpstreamClient, encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    data = encode(b'{"text": "' + b"a" * 900 + b'"}')
    server = await upstream(
        lambda request, n: answer(data, f"Content-Encoding: {encoding}", f"Content-Length: {len(data)}")
    )
    assert (await get(client, server.url + "/")).json() == {"text": "a" * 900}


async def test_gzip_members_are_all_read(upstream: Any, client: UpstreamClient) -> None:
    data = gzip.compress(b'{"a":') + gzip.compress(b" 1}")
    server = await upstream(lambda request, n: answer(data, "Content-Encoding: gzip", f"Content-Length: {len(data)}"))
    assert (await get(client, server.url + "/")).json() == {"a": 1}


@pytest.mark.parametrize(
    "data", [gzip.compress(b'{"a": 1}')[:-6], gzip.compress(b'{"a": 1}') + b"junk"], ids=["cut short", "trailing bytes"]
)
async def test_broken_gzip_is_an_error(upstream: Any, client: UpstreamClient, data: bytes) -> None:
    server = await upstream(lambda request, n: answer(data, "Content-Encoding: gzip", f"Content-Length: {len(data)}"))
    with pytest.raises(UpstreamConnectionError, match="gzip"):
        await get(client, server.url + "/")


@pytest.mark.parametrize(
    "raw",
    [
        answer(b"", "Content-Length: 1001"),  # refused from its head, before reading
        answer(b"3e9\r\n" + b"x" * 1001 + b"\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
        answer(
            gzip.compress(b"0" * 5000), "Content-Encoding: gzip", f"Content-Length: {len(gzip.compress(b'0' * 5000))}"
        ),
    ],
    ids=["declared", "chunked", "gzip bomb"],
)
async def test_answers_over_the_limit_are_refused(upstream: Any, client: UpstreamClient, raw: bytes) -> None:
    server = await upstream(lambda request, n: raw)
    with pytest.raises(UpstreamTooLargeError):
        await get(client, server.url + "/")


async def test_the_answer_to_head_ends_with_its_headers(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: answer(b"", "Content-Length: 50"))
    response = await get(client, server.url + "/", method="HEAD")
    assert (response.status, response.body, response.headers["content-length"]) == (200, b"", "50")


async def test_what_is_not_http_is_an_error_after_sending(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(UpstreamConnectionError) as caught:
        await get(client, server.url + "/")
    assert caught.value.sent


async def test_an_upstream_that_cannot_be_reached_was_not_sent_anything(client: UpstreamClient) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamConnectionError) as caught:
        await get(client, f"http://127.0.0.1:{port}/")
    assert not caught.value.sent


async def test_a_connection_dropped_after_the_request_may_have_acted(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: None)
    with pytest.raises(UpstreamConnectionError) as caught:
        await get(client, server.url + "/", method="POST", body=b"{}")
    assert caught.value.sent
    assert len(server.requests) == 1  # not retried: a POST may have acted


@pytest.mark.parametrize("method, retried", [("GET", True), ("PUT", True), ("POST", False)])
async def test_a_keep_alive_connection_the_upstream_dropped_is_retried_when_idempotent(
    upstream: Any, client: UpstreamClient, method: str, retried: bool
) -> None:
    # The first connection answers once, then drops the next request unanswered (an idle timeout racing
    # the request); later connections answer.
    server = await upstream(lambda request, n: OK if n == 1 or server.connections > 1 else None)
    assert (await get(client, server.url + "/", method=method)).status == 200
    if retried:
        assert (await get(client, server.url + "/", method=method)).status == 200
        assert (server.connections, len(server.requests)) == (2, 3)
    else:
        with pytest.raises(UpstreamConnectionError):
            await get(client, server.url + "/", method=method)
        assert (server.connections, len(server.requests)) == (1, 2)


async def test_the_retry_after_a_dropped_keep_alive_connection_takes_a_new_one(upstream: Any) -> None:
    # Two idle connections; then the upstream restarts: both are dead, which the client learns on use.
    async def script(request: bytes, n: int) -> bytes | None:
        if CONNECTION.get() > 2:
            return OK
        if n > 1:
            return None  # the connections from before the restart
        await asyncio.sleep(0.05)  # so that two requests in flight open two connections
        return OK

    server = await upstream(script)
    client = UpstreamClient()
    await asyncio.gather(get(client, server.url + "/"), get(client, server.url + "/"))
    assert server.connections == 2
    assert (await get(client, server.url + "/")).status == 200  # one dead connection, then a new one
    assert (await get(client, server.url + "/", method="POST", body=b"{}")).status == 200  # the other dead one is gone
    await client.aclose()
    assert server.connections == 3


async def test_a_connection_the_upstream_closed_while_idle_is_not_used(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: Close(OK))  # keep-alive in words, then closed as by an idle timeout
    assert (await get(client, server.url + "/", method="POST", body=b"{}")).status == 200
    await _until(lambda: server.open_now == 0)
    await asyncio.sleep(0.05)  # the client's side of the connection sees the end
    # A POST is never sent twice, so it only succeeds if the closed connection is left alone.
    assert (await get(client, server.url + "/", method="POST", body=b"{}")).status == 200
    assert server.connections == 2


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the upstream never got there")


async def test_a_timeout_closes_the_connection(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: HANG)
    with pytest.raises(UpstreamTimeoutError):
        await get(client, server.url + "/", timeout=0.2)
    await _until(lambda: server.closed_by_client == 1)


async def test_a_cancelled_request_closes_its_connection(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: HANG if server.connections == 1 else OK)
    task = asyncio.ensure_future(get(client, server.url + "/"))
    await _until(lambda: bool(server.requests))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await get(client, server.url + "/")).status == 200
    assert server.connections == 2


async def test_connections_per_host_are_limited(upstream: Any) -> None:
    async def slow(request: bytes, n: int) -> bytes:
        await asyncio.sleep(0.05)
        return OK

    server = await upstream(slow)
    client = UpstreamClient(limit_per_host=2, limit_per_tenant=2)  # one workspace may use the whole pool here
    answers = await asyncio.gather(*(get(client, server.url + "/") for _ in range(8)))
    await client.aclose()
    assert [a.status for a in answers] == [200] * 8
    assert (server.most_open, server.connections) == (2, 2)


async def test_waiting_for_a_connection_counts_against_the_deadline(upstream: Any) -> None:
    server = await upstream(lambda request, n: HANG)
    client = UpstreamClient(limit_per_host=1)
    first = asyncio.ensure_future(get(client, server.url + "/", timeout=5))
    await _until(lambda: bool(server.requests))
    with pytest.raises(UpstreamTimeoutError):
        await get(client, server.url + "/", timeout=0.1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await client.aclose()
    assert server.connections == 1


def held_until(gate: asyncio.Event) -> Callable[[bytes, int], Awaitable[bytes]]:
    """An upstream handler that holds requests for `/held` until `gate` is set and answers the rest at once."""

    async def held(request: bytes, n: int) -> bytes:
        if b"/held" in request:
            await gate.wait()
        return OK

    return held


async def test_a_workspace_holds_at_most_its_share_of_an_origin(upstream: Any) -> None:
    gate = asyncio.Event()
    server = await upstream(held_until(gate))
    client = UpstreamClient(limit_per_host=4, limit_per_tenant=2)
    flood = [asyncio.ensure_future(get(client, server.url + "/held", tenant="a")) for _ in range(6)]
    await _until(lambda: len(server.requests) == 2)
    answer = await get(client, server.url + "/other", tenant="b")  # while a's six calls are all still running
    assert answer.status == 200 and not any(call.done() for call in flood)
    gate.set()
    assert [call.status for call in await asyncio.gather(*flood)] == [200] * 6
    await client.aclose()
    assert server.most_open <= 3  # a's two, then b's one


async def test_a_workspace_holds_half_the_configured_pool_by_default(upstream: Any) -> None:
    gate = asyncio.Event()
    server = await upstream(held_until(gate))
    client = UpstreamClient(limit_per_host=4)  # a smaller pool than the default: the share follows it
    flood = [asyncio.ensure_future(get(client, server.url + "/held", tenant="a")) for _ in range(6)]
    await _until(lambda: len(server.requests) >= 2)
    await asyncio.sleep(0.05)  # room for a third of a's calls to go out, were its share more than half
    assert len(server.requests) == 2
    answer = await get(client, server.url + "/other", tenant="b")
    assert answer.status == 200 and not any(call.done() for call in flood)
    gate.set()
    await asyncio.gather(*flood)
    await client.aclose()
    with pytest.raises(ValueError, match=r"limit_per_tenant \(5\) may not exceed limit_per_host \(4\)"):
        UpstreamClient(limit_per_host=4, limit_per_tenant=5)


async def test_a_freed_connection_goes_to_the_workspace_holding_fewest(upstream: Any) -> None:
    gate = asyncio.Event()
    server = await upstream(held_until(gate))
    client = UpstreamClient(limit_per_host=2, limit_per_tenant=2)  # one workspace may fill the pool
    first = [asyncio.ensure_future(get(client, server.url + "/held", tenant="a")) for _ in range(2)]
    await _until(lambda: len(server.requests) == 2)
    queued = [asyncio.ensure_future(get(client, server.url + f"/a{i}", tenant="a")) for i in range(3)]
    await asyncio.sleep(0.05)  # a's three wait before b's one
    late = asyncio.ensure_future(get(client, server.url + "/b", tenant="b"))
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.gather(*first, *queued, late)
    await client.aclose()
    paths = [request.split(b" ")[1] for request in server.requests]
    assert paths.index(b"/b") < paths.index(b"/a1")  # first come first served would send all of a's first


async def test_a_call_that_found_no_connection_in_time_is_busy_and_was_not_sent(upstream: Any) -> None:
    server = await upstream(lambda request, n: HANG)
    client = UpstreamClient(limit_per_host=1)
    first = asyncio.ensure_future(get(client, server.url + "/", timeout=5, tenant="a"))
    await _until(lambda: bool(server.requests))
    with pytest.raises(UpstreamBusyError) as caught:
        await get(client, server.url + "/second", timeout=0.1, tenant="a")
    assert caught.value.sent is False
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await client.aclose()
    assert len(server.requests) == 1


async def test_idle_connections_are_closed_after_the_keepalive_timeout(upstream: Any) -> None:
    server = await upstream(lambda request, n: OK)
    client = UpstreamClient(keepalive_timeout=0.1)
    await asyncio.gather(get(client, server.url + "/"), get(client, server.url + "/"))
    await _until(lambda: server.closed_by_client == server.connections)  # with no further request to that origin
    assert (await get(client, server.url + "/")).status == 200  # and a new one is opened when needed
    await client.aclose()


async def test_aclose_closes_idle_connections(upstream: Any, client: UpstreamClient) -> None:
    server = await upstream(lambda request, n: OK)
    await get(client, server.url + "/")
    await client.aclose()
    await _until(lambda: server.closed_by_client == 1)


@pytest.mark.parametrize(
    "url, kw, message",
    [
        ("http://127.0.0.1:1/a b", {}, "spaces or control characters"),
        ("ftp://127.0.0.1/x", {}, "http:// or https://"),
        ("http://user:pw@127.0.0.1/x", {}, "credentials"),
        ("http://127.0.0.1:1/x", {"headers": {"Bad Name": "x"}}, "header name"),
        ("http://127.0.0.1:1/x", {"headers": {"Content-Length": "5"}}, "header name"),
        ("http://127.0.0.1:1/x", {"headers": {"X-A": "1\r\nX-B: 2"}}, "line breaks"),
        ("http://127.0.0.1:1/x", {"method": "GET /admin HTTP/1.1\r\nX-Evil: 1\r\nX-Pad:"}, "request method"),
    ],
)
async def test_requests_that_cannot_be_written_safely_are_refused(
    client: UpstreamClient, url: str, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await get(client, url, **kw)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _tls_server(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_tls_upstreams_are_verified(upstream: Any, ca: trustme.CA) -> None:
    server = await upstream(lambda request, n: OK, tls=_tls_server(ca, "127.0.0.1"))
    trusting = UpstreamClient(ssl_context=_trusting(ca))
    assert (await get(trusting, server.url + "/")).json() == {"ok": True}
    await trusting.aclose()
    default = UpstreamClient()  # the system's trust store does not know the test CA
    with pytest.raises(UpstreamConnectionError) as caught:
        await get(default, server.url + "/")
    assert not caught.value.sent
    await default.aclose()


async def test_a_certificate_for_another_host_is_refused(upstream: Any, ca: trustme.CA) -> None:
    server = await upstream(lambda request, n: OK, tls=_tls_server(ca, "other.example"))
    client = UpstreamClient(ssl_context=_trusting(ca))
    with pytest.raises(UpstreamConnectionError) as caught:
        await get(client, server.url + "/")
    assert not caught.value.sent
    await client.aclose()


@pytest.fixture
def plain_upstream(serve: Callable[..., str]) -> Iterator[str]:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    yield serve(app)


def test_one_client_serves_successive_event_loops(plain_upstream: str) -> None:
    """A client made at import time is used by whichever loop serves; a loop's connections stay with it
    (reused from another loop, they would fail) and are closed when another loop takes over."""
    client = UpstreamClient()
    loops = [asyncio.new_event_loop() for _ in range(2)]
    try:
        for loop in loops:
            assert loop.run_until_complete(get(client, plain_upstream + "/")).json() == {}
        loops[1].run_until_complete(client.aclose())
        loops[0].run_until_complete(asyncio.sleep(0.01))  # the first loop closes what the client closed of it
    finally:
        for loop in loops:
            loop.close()


@pytest.mark.parametrize(
    "url",
    ["http://{item_id}:8080/items", "{scheme}://api.example.com/x", "https://api.example.com:{port}/x",
     "https://{sub}.example.com/x", "https://api.example.com{path}"],
)  # fmt: skip
def test_a_placeholder_in_an_upstream_origin_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="placeholder in its scheme, host or port"):
        parse_upstream_url(url)


def test_a_placeholder_in_an_upstream_path_or_query_is_an_arguments_place() -> None:
    assert parse_upstream_url("https://api.example.com/items/{id}?q={q}").hostname == "api.example.com"
