"""HTTP grammar, one owner for each rule: tokens, idempotent methods, bearer credentials, media types.

Every layer that reads or writes HTTP (the MCP and rpc endpoints, the admin API, the gateway's upstream
client and its mappings) imports these instead of keeping its own copy.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Final

__all__ = [
    "IDEMPOTENT_METHODS",
    "ONCE_ONLY_HEADERS",
    "repeated_header",
    "repeated_header_message",
    "retry_after_seconds",
    "accepts_json",
    "bearer_token",
    "is_json_media_type",
    "is_token",
]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 §5.6.2

IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
"""RFC 9110 §9.2.2: a repeat has the effect of one request, so a client may send it again."""


ONCE_ONLY_HEADERS: Final = (b"host", b"authorization", b"content-type")
"""Headers a request must not repeat (400): a proxy or firewall in front that reads another copy than Crank
does would judge another request (another key, another host, another body type). The MCP endpoint refuses
repeated `Mcp-Protocol-Version`, `Mcp-Method` and `Mcp-Name` too, with its own error (`HEADER_MISMATCH`);
llhttp refuses repeated `Content-Length` and `Transfer-Encoding` itself."""


def repeated_header(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The first header of `ONCE_ONLY_HEADERS` that appears more than once in raw ASGI headers, or None."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name in ONCE_ONLY_HEADERS:
            if name in seen:
                return name.decode()
            seen.add(name)
    return None


def repeated_header_message(name: str) -> str:
    """What a request that repeats `name` is told."""
    return f"Bad request: the {name.title()} header appears more than once; send it once"


def retry_after_seconds(wait: float) -> int:
    """`Retry-After` in whole seconds (RFC 9110 §10.2.3) for a wait of `wait` seconds: rounded up, at least 1
    (never "now", which a client would take as "retry at once")."""
    return max(1, math.ceil(wait))


def is_token(text: str) -> bool:
    """Whether `text` is an HTTP token (RFC 9110 §5.6.2), as a method or a header name must be."""
    return _TOKEN.fullmatch(text) is not None


def bearer_token(authorization: str | bytes | None) -> str | None:
    """The credentials of `Authorization: Bearer <token>` (RFC 6750 §2.1; the scheme is case-insensitive),
    or None when the header is missing, of another scheme, or empty."""
    if authorization is None:
        return None
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


@lru_cache(maxsize=256)
def accepts_json(accept: str | None) -> bool:
    """Whether an `Accept` header allows `application/json`; a missing one is taken as "anything"."""
    if accept is None:
        return True
    for item in accept.split(","):
        media = item.split(";", 1)[0].strip().lower()
        if media in ("application/json", "application/*", "*/*"):
            return True
    return False


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a `Content-Type` is `application/json` (parameters such as `charset` allowed)."""
    if content_type == "application/json":
        return True
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json"
