"""`check_request`, the one owner of the request checks' order and rules: each check, and which one answers when a
request fails several."""

from __future__ import annotations

from typing import Any

import pytest

from crank.exceptions import RequestTooLargeError
from crank.types import Message
from crank.wire.checks import (
    AMBIGUOUS_FRAMING_MESSAGE,
    Passed,
    Refused,
    check_request,
    count_body,
    json_exchange_refusal,
)
from crank.wire.security import HostOriginPolicy

POLICY = HostOriginPolicy.build(None, (), ())  # on: the server below is loopback


def scope(*headers: tuple[str, str]) -> dict[str, Any]:
    raw = [(name.encode(), value.encode()) for name, value in headers]
    return {"type": "http", "headers": raw, "server": ("127.0.0.1", 8000)}


HOST = ("host", "127.0.0.1:8000")


def test_a_common_request_passes_with_its_headers_decoded_once() -> None:
    checked = check_request(scope(HOST, ("content-length", "12"), ("authorization", "Bearer k")), POLICY, 100)
    assert checked == Passed({"host": "127.0.0.1:8000", "content-length": "12", "authorization": "Bearer k"}, 12,
                             "Bearer k")  # fmt: skip
    assert checked.repeated == frozenset()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        # Every request below fails each later check too: the first in the order answers.
        ([("host", "evil.example"), ("host", "127.0.0.1"), ("content-length", "5"), ("transfer-encoding", "chunked")],
         400),
        ([("host", "evil.example"), ("content-length", "999"), ("transfer-encoding", "chunked")], 400),
        ([("host", "evil.example"), ("origin", "http://evil.example"), ("content-length", "999")], 421),
        ([HOST, ("origin", "http://evil.example"), ("content-length", "999")], 403),
        ([HOST, ("content-length", "999")], 413),
    ],
)  # fmt: skip
def test_the_first_check_in_the_order_answers(headers: list[tuple[str, str]], status: int) -> None:
    checked = check_request(scope(*headers), POLICY, 100)
    assert isinstance(checked, Refused) and checked.status == status


def test_both_framings_close_the_connection_whichever_headers_repeat() -> None:
    for extra in ([], [("x-a", "1"), ("x-a", "2")]):
        checked = check_request(scope(HOST, ("content-length", "5"), ("transfer-encoding", "chunked"), *extra),
                                POLICY, 100)  # fmt: skip
        assert checked == Refused(400, AMBIGUOUS_FRAMING_MESSAGE, close=True)
        assert checked.headers == [(b"connection", b"close")]


def test_a_repeated_header_that_may_repeat_is_joined_and_named() -> None:
    checked = check_request(scope(HOST, ("accept", "a/b"), ("accept", "c/d"), ("content-length", "3")), POLICY, 100)
    assert isinstance(checked, Passed)
    assert checked.headers["accept"] == "a/b, c/d" and checked.repeated == frozenset({"accept"})
    assert checked.length == 3


def test_a_chunked_body_has_no_length_and_none_to_check_without_a_limit_or_policy() -> None:
    checked = check_request(scope(("transfer-encoding", "chunked")), None, None)
    assert isinstance(checked, Passed) and checked.length is None
    assert isinstance(check_request(scope(("content-length", "10" * 20)), None, None), Passed)


@pytest.mark.anyio
async def test_a_streamed_body_is_counted_as_it_is_read() -> None:
    parts: list[Message] = [{"type": "http.request", "body": b"x" * 60, "more_body": True}] * 2

    async def receive() -> Message:
        return parts.pop()

    counted = count_body(receive, 100)
    assert (await counted())["body"] == b"x" * 60
    with pytest.raises(RequestTooLargeError):
        await counted()


def test_a_json_exchange_needs_json_both_ways() -> None:
    assert json_exchange_refusal({"accept": "text/html", "content-type": "application/json"}) == Refused(
        406, "Accept must allow application/json"
    )
    assert json_exchange_refusal({"content-type": "text/plain"}) == Refused(
        415, "Content-Type must be application/json"
    )
    assert (
        json_exchange_refusal({"accept": "application/json, text/event-stream", "content-type": "application/json"})
        is None
    )
