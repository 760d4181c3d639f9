"""`UpstreamClient`: the gateway's one pooled HTTP client for every upstream, on aiohttp.

Why aiohttp and not httpx (which the rest of Crank's tests and the admin layer use): on the gateway's
hot path the client is most of the cost of a call. Measured in-process against nginx (bench/
profile_gateway.py, docs/benchmarks.md), one call through httpx 0.28 cost about 1,300 to 1,800 µs of
CPU, because httpcore's pool polls every idle connection's socket on each request, against about
100 µs through aiohttp's C-accelerated client.

The aiohttp session is made on first use, inside the event loop that serves requests (aiohttp wants
that), with connections pooled per host. TLS certificates are verified (aiohttp's default). Failures
reach the adapters as `UpstreamTimeoutError` or `UpstreamConnectionError`, so that no adapter knows
the library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from crank import _json

__all__ = [
    "MAX_RESPONSE_BYTES",
    "UpstreamClient",
    "UpstreamConnectionError",
    "UpstreamResponse",
    "UpstreamTimeoutError",
    "UpstreamTooLargeError",
]

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The largest upstream answer read (a model cannot use more; a compressed bomb cannot fill memory)."""


class UpstreamTimeoutError(Exception):
    """No answer within the operation's timeout."""


class UpstreamConnectionError(Exception):
    """The upstream could not be reached (`sent` False: nothing left this process), or dropped the
    connection after the request was sent (`sent` True: it may have acted on it)."""

    def __init__(self, reason: str, *, sent: bool) -> None:
        super().__init__(reason)
        self.sent = sent


class UpstreamTooLargeError(Exception):
    """The answer is larger than the client accepts."""


@dataclass(frozen=True)
class UpstreamResponse:
    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes

    def json(self) -> Any:
        """The body as JSON; raises `ValueError` when it is not."""
        return _json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class UpstreamClient:
    def __init__(
        self,
        *,
        limit_per_host: int = 100,
        keepalive_timeout: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self._max_response_bytes = max_response_bytes
        self._limit_per_host = limit_per_host
        self._keepalive_timeout = keepalive_timeout
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # one per distinct operation timeout

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=0, limit_per_host=self._limit_per_host, keepalive_timeout=self._keepalive_timeout
            )
            # No cookie jar: the session is shared by every workspace and caller, and a cookie one upstream
            # set for one caller must never go out with another's request.
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=True, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: list[tuple[str, str]] | None,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> UpstreamResponse:
        """One request; `url` is already percent-encoded (path parameters), `params` are encoded here."""
        session = self._open()
        try:
            async with session.request(
                method,
                URL(url, encoded=True),
                params=params or None,
                headers=headers or None,
                data=body,
                timeout=self._timeout(timeout),
                allow_redirects=False,
            ) as response:
                return UpstreamResponse(response.status, response.headers, await self._body(response))
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeoutError from None
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamConnectionError(type(exc).__name__, sent=False) from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectionError(type(exc).__name__, sent=True) from None

    async def _body(self, response: aiohttp.ClientResponse) -> bytes:
        limit = self._max_response_bytes
        length = response.content_length
        if length is not None:
            if length > limit:
                raise UpstreamTooLargeError
            return await response.read()
        chunks, size = [], 0  # no Content-Length (chunked, or until close): read with a running total
        async for chunk in response.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise UpstreamTooLargeError
            chunks.append(chunk)
        return b"".join(chunks)

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
