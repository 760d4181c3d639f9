"""The checks a request's head passes before any app reads its body: their order and their rules, written once.

`check_request` is the one owner. The ASGI wrappers (`crank.wire.middleware`), `crank serve`'s early answers and
routes of its own, and the MCP endpoint all call it, and each answers a `Refused` in its own error shape. In order:

1. a header that must come once (`ONCE_ONLY_HEADERS`) repeated: 400;
2. `Content-Length` beside `Transfer-Encoding` (a smuggling attempt, RFC 9112 §6.1): 400, and the connection closes;
3. `Host` and `Origin` (DNS-rebinding protection, `HostOriginPolicy`): 421 or 403;
4. a body whose framed length is over the limit: 413, before anything reads it (a streamed body is counted as it
   is read: `count_body`).

What passes is a `Passed`: the headers decoded once (the one decoding the app uses), the framed length and the
`Authorization` value, which the caller's authentication reads by its own grammar (`crank.wire.http.bearer_token`).
`json_exchange_refusal` holds the media-type rules of a JSON request and answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from crank.exceptions import RequestTooLargeError
from crank.types import Message, Receive, Scope
from crank.wire.asgi import unique_headers
from crank.wire.http import accepts_json, is_json_media_type, repeated_header, repeated_header_message
from crank.wire.security import HostOriginPolicy

__all__ = [
    "AMBIGUOUS_FRAMING_MESSAGE",
    "Passed",
    "Refused",
    "body_too_large_message",
    "check_request",
    "count_body",
    "json_exchange_refusal",
]

AMBIGUOUS_FRAMING_MESSAGE: Final = "Bad request: Content-Length and Transfer-Encoding together (RFC 9112 §6.1)"
HOST_ORIGIN_MESSAGES: Final = {
    421: "Misdirected request: this Host is not served here",
    403: "Forbidden: this Origin is not allowed",
}
_NOTHING_REPEATED: Final[frozenset[str]] = frozenset()


@dataclass(slots=True)
class Passed:
    """A request whose head passed the checks.

    `headers`: every header decoded once (names in lower case; a repeated one's values joined with ", ", as HTTP
    allows for list-valued fields). `repeated`: the names that came more than once (empty for the common request).
    `length`: the length the body is framed by, or None when it is streamed (count it: `count_body`).
    `authorization`: the `Authorization` value, or None."""

    headers: dict[str, str]
    length: int | None
    authorization: str | None
    repeated: frozenset[str] = _NOTHING_REPEATED


@dataclass(frozen=True, slots=True)
class Refused:
    """A request the checks refuse: its status and what it is told. `close`: the connection must end with the
    answer (what the other framing would make of the body is never read as a request of its own)."""

    status: int
    message: str
    close: bool = False

    @property
    def headers(self) -> list[tuple[bytes, bytes]]:
        """The answer's headers besides its length and type."""
        return [(b"connection", b"close")] if self.close else []


def body_too_large_message(max_body_size: int) -> str:
    return f"Request body exceeds {max_body_size} bytes"


def check_request(scope: Scope, policy: HostOriginPolicy | None, max_body_size: int | None) -> Passed | Refused:
    """The checks of a request's head, in their order (see the module): `policy` None checks no Host or Origin,
    `max_body_size` None no framed length."""
    headers = unique_headers(scope)
    if headers is None:  # some header came twice: rare, read its own way
        read = _read_repeated(scope)
        if isinstance(read, Refused):
            return read
        headers, origin, declared, repeated = read
    else:
        origin, declared, repeated = headers.get("origin"), headers.get("content-length"), _NOTHING_REPEATED
    # A Transfer-Encoding frames the body, whatever Content-Length says (RFC 9112 §6.3), and h11 hands an app both:
    # both together are refused, as a small declared length must not let a longer chunked body past the limit.
    chunked = "transfer-encoding" in headers
    if chunked and declared is not None:
        return Refused(400, AMBIGUOUS_FRAMING_MESSAGE, close=True)
    if policy is not None:
        refused = policy.check(scope.get("server"), headers.get("host"), origin)
        if refused is not None:
            return Refused(refused, HOST_ORIGIN_MESSAGES[refused])
    length = None if chunked else _declared_length(declared)
    if max_body_size is not None and length is not None and length > max_body_size:
        return Refused(413, body_too_large_message(max_body_size))
    return Passed(headers, length, headers.get("authorization"), repeated)


def _read_repeated(scope: Scope) -> Refused | tuple[dict[str, str], str | None, str | None, frozenset[str]]:
    """The head of a request that repeats a header: refused when it is one that must come once; else its headers
    joined, its last Origin and first Content-Length (the ones judged), and the names that came more than once."""
    raw = scope["headers"]
    once_only = repeated_header(raw)
    if once_only is not None:
        return Refused(400, repeated_header_message(once_only))
    headers: dict[str, str] = {}
    repeated: set[str] = set()
    origin = declared = None
    for raw_name, raw_value in raw:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name in headers:
            repeated.add(name)
            headers[name] = headers[name] + ", " + value
        else:
            headers[name] = value
        if name == "origin":
            origin = value
        elif name == "content-length" and declared is None:
            declared = value
    return headers, origin, declared, frozenset(repeated)


def count_body(receive: Receive, max_body_size: int) -> Receive:
    """`receive` for a body that is streamed (no length frames it): it raises `RequestTooLargeError` as soon as
    the body read passes `max_body_size`."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        size += len(message.get("body", b""))
        if size > max_body_size:
            raise RequestTooLargeError(max_body_size)
        return message

    return counted


def json_exchange_refusal(headers: Mapping[str, str]) -> Refused | None:
    """A POST that must carry JSON and take JSON back: 406 unless `Accept` allows `application/json`, 415 unless
    its `Content-Type` is it."""
    if not accepts_json(headers.get("accept")):
        return Refused(406, "Accept must allow application/json")
    if not is_json_media_type(headers.get("content-type")):
        return Refused(415, "Content-Type must be application/json")
    return None


def _declared_length(declared: str | None) -> int | None:
    """A `Content-Length` value as a number; None when there is none or it is not one (the server refuses it)."""
    return int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None
