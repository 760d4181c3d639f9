"""`UpstreamClient`: the gateway's one pooled HTTP/1.1 client for every upstream.

Why our own client and not a library: on the gateway's hot path the client is most of the cost of a
call. Measured in-process against nginx at 32 requests in flight (bench/profile_client.py,
docs/benchmarks.md): httpx 0.28 cost 1,300 to 1,800 µs of CPU per request (httpcore's pool polls every
idle connection's socket on each request), aiohttp about 70 µs, this client (an asyncio protocol per
connection and httptools' C parser, the one uvicorn uses) a fraction of that. What it leaves out is
what the gateway never needs: redirects (not followed: a tool's request goes only where its operation
says), cookies (the client is shared by every workspace and caller), proxies, HTTP/2, streaming.

Per origin (scheme, host, port): a pool of keep-alive connections, at most `limit_per_host` at once and
`limit_per_tenant` of them for one workspace, a freed connection going to the waiting workspace that
holds the fewest (so one workspace's slow or hanging calls cannot starve another's). The most recently used idle
connection goes first; an idle connection is closed after `keepalive_timeout` (one timer per pool
sweeps them) and never used once the upstream has closed it. TLS certificates and host names are
verified against the system's trust store (or the `ssl_context` given). Each request has one
deadline covering the wait for a connection, connecting and the answer. An idempotent request that
finds its reused connection closed before any answer is sent again once on a new connection (RFC
9110, 9.2.2): the upstream dropped an idle keep-alive connection as the request went out (and the
other idle ones, as old, are dropped too).
The request line and headers are checked so that no value can change the request's framing, and an
answer must end where its framing says: bytes after it close the connection, so that nothing an
upstream sends can be read as the answer to the next request on that connection.

Connections go only where its egress policy allows (crank.gateway.egress: public addresses unless
`CRANK_EGRESS_ALLOW` says more), to the address that was checked.

Failures reach the adapters as `UpstreamBusyError` (no connection free for the workspace before the
deadline: nothing was sent), `UpstreamTimeoutError`, `UpstreamConnectionError` (both with `sent`:
whether the upstream may have acted), `UpstreamTooLargeError`, `UpstreamRequestTooLargeError` (a request
head over `MAX_REQUEST_HEAD_BYTES`: nothing was sent) or `UpstreamRefusedError` (the egress policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urlencode, urlsplit

from crank import tracing
from crank.exceptions import (
    UpstreamBusyError,
    UpstreamConnectionError,
    UpstreamRequestTooLargeError,
    UpstreamTimeoutError,
)
from crank.gateway.connection import Connection, UpstreamResponse
from crank.gateway.egress import EgressPolicy
from crank.registry.runtime import DEFAULT_ACCEPT
from crank.wire.http import IDEMPOTENT_METHODS, is_token
from crank.wire.notices import ThrottledLog

__all__ = [
    "DEFAULT_LIMIT_PER_HOST",
    "MAX_REQUEST_HEAD_BYTES",
    "MAX_RESPONSE_BYTES",
    "UpstreamClient",
    "UpstreamResponse",
    "default_limit_per_tenant",
    "parse_upstream_url",
    "placeholder_in_origin",
]

MAX_REQUEST_HEAD_BYTES = 16 * 1024
"""The largest request head sent (request line and headers). Servers refuse longer ones anyway (nginx
answers 414 past 8 KiB of request line), and checking before the query is percent-encoded keeps a 1 MB
argument bound for the query from costing milliseconds of the event loop that every tenant shares."""

MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The largest upstream answer read, after decompression (a model cannot use more; a gzip bomb cannot
fill memory)."""

DEFAULT_LIMIT_PER_HOST = 100
"""Connections to one origin at once, all workspaces together."""


def default_limit_per_tenant(limit_per_host: int) -> int:
    """Connections to one origin that one workspace may hold at once, unless configured: half the pool (at
    least one), so that a workspace whose calls hang cannot take the connections every other workspace
    needs to reach the same origin."""
    return max(limit_per_host // 2, 1)


_notices = ThrottledLog(logging.getLogger("crank.gateway"))

# JSON unless the caller says otherwise: an upstream that offers XML first answers `*/*` in XML.
_DEFAULT_HEADERS = {"accept": f"Accept: {DEFAULT_ACCEPT}\r\n", "accept-encoding": "Accept-Encoding: gzip, deflate\r\n",
                    "user-agent": "User-Agent: crank\r\n"}  # fmt: skip
_ALL_DEFAULT_HEADERS = "".join(_DEFAULT_HEADERS.values())
_UNSAFE_TARGET = re.compile(r"[\x00-\x20\x7f]")  # a space or control character would end the request line


@dataclass(frozen=True, slots=True)
class _Origin:
    key: str  # scheme://authority, as written in the URL
    host: str
    port: int
    tls: bool
    host_line: str  # the Host header, with its line end


class _Pool:
    """The connections to one origin, shared by every workspace (tenant) but fairly: a tenant holds at most
    `tenant_limit` of them at once, and a connection given back goes to a waiting call of the tenant that
    holds the fewest, in turn among equals, rather than first come first served (so a tenant's flood of
    calls queues behind its own)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connect: Callable[[float], Awaitable[Connection]],
        limits: tuple[int, int],
        keepalive: float,
        origin: str,
    ) -> None:
        self.loop = loop
        self.connect = connect  # a new connection to the origin, before the deadline
        self.limit, self.tenant_limit = limits
        self.keepalive = keepalive
        self.origin = origin
        self.idle: list[Connection] = []
        self.size = 0  # connections open or opening, idle or busy
        self.held: dict[str, int] = {}  # tenant -> connections it holds (busy, opening, or handed on to it)
        # tenant -> its calls waiting; the tenants in turn order (served from the front, then moved to the end)
        self.waiters: dict[str, deque[asyncio.Future[Connection | None]]] = {}
        self.closed = False  # the client was closed: connections still busy are closed when given back
        self._sweep_timer: asyncio.TimerHandle | None = None

    def take_for(self, tenant: str) -> Connection | None:
        """An idle connection for `tenant` at once, if it may hold one more and one is idle."""
        if self.held.get(tenant, 0) >= self.tenant_limit:
            return None
        connection = self.take()
        if connection is not None:
            self._hold(tenant)
        return connection

    def take(self) -> Connection | None:
        """The most recently used idle connection that is still open and fresh, if any."""
        now = self.loop.time()
        while self.idle:
            connection = self.idle.pop()
            if self._fresh(connection, now):
                return connection
            self._drop(connection)
        return None

    def _fresh(self, connection: Connection, now: float) -> bool:
        return not connection.closed and now - connection.idle_since < self.keepalive

    def drop_idle(self) -> None:
        while self.idle:
            self._drop(self.idle.pop())

    def _hold(self, tenant: str) -> None:
        self.held[tenant] = self.held.get(tenant, 0) + 1

    def _unhold(self, tenant: str) -> None:
        left = self.held[tenant] - 1
        if left:
            self.held[tenant] = left
        else:  # no entry for a tenant holding nothing: the dict stays as small as the tenants calling now
            del self.held[tenant]

    def give_back(self, connection: Connection, tenant: str) -> None:
        """After an exchange: to the next waiter, or idle; closed when it cannot carry another request."""
        self._unhold(tenant)
        if self.closed or not connection.reusable:
            self._drop(connection)
        elif not self._hand_on(connection):
            connection.idle_since = self.loop.time()
            self.idle.append(connection)
            if self._sweep_timer is None:
                self._sweep_timer = self.loop.call_at(connection.idle_since + self.keepalive, self._sweep)

    def _sweep(self) -> None:
        """Close the connections idle for `keepalive` or more, even if no request comes to this origin again;
        one timer per pool while any connection is idle."""
        self._sweep_timer = None
        now = self.loop.time()
        fresh = []
        for connection in self.idle:  # oldest first: `take` pops the newest
            if self._fresh(connection, now):
                fresh.append(connection)
            else:
                self._drop(connection)
        self.idle = fresh
        if fresh:
            self._sweep_timer = self.loop.call_at(fresh[0].idle_since + self.keepalive, self._sweep)

    def close(self) -> None:
        self.closed = True
        timer, self._sweep_timer = self._sweep_timer, None
        if timer is not None:
            timer.cancel()
        for connection in self.idle:
            with contextlib.suppress(RuntimeError):  # its event loop is closed, and its sockets with it
                connection.close()

    def _drop(self, connection: Connection | None) -> None:
        """One connection less (closed, or never opened): its slot goes to the next waiter."""
        if connection is not None:
            connection.close()
        self.size -= 1
        self._hand_on(None)

    def _hand_on(self, given: Connection | None) -> bool:
        """Give the next waiter in turn a connection, or None for a free slot (counted as its own at once,
        so nobody can take it in between); False if no tenant that may hold one more waits."""
        if not self.waiters:  # the common case, on every connection given back: no allocation
            return False
        found = self._next_waiter()
        if found is None:
            return False
        tenant, waiter = found
        self._hold(tenant)
        if given is None:
            self.size += 1
        waiter.set_result(given)
        return True

    def _next_waiter(self) -> tuple[str, asyncio.Future[Connection | None]] | None:
        """The first waiting call of the tenant that holds the fewest connections (the first in turn among
        equals; it then goes to the end of the turn), among those below their limit."""
        chosen, fewest = None, self.tenant_limit
        for tenant, queue in list(self.waiters.items()):
            while queue and queue[0].done():  # given up (deadline, cancellation)
                queue.popleft()
            if not queue:
                del self.waiters[tenant]
            elif self.held.get(tenant, 0) < fewest:
                chosen, fewest = tenant, self.held.get(tenant, 0)
        if chosen is None:
            return None
        queue = self.waiters.pop(chosen)
        waiter = queue.popleft()
        if queue:
            self.waiters[chosen] = queue
        return chosen, waiter

    async def acquire(self, tenant: str, deadline: float) -> Connection:
        """A connection when `take_for` gave none: a new one while both limits allow it, else the next one handed
        on in turn. Waiting past the deadline is `UpstreamBusyError`: nothing was sent."""
        if self.held.get(tenant, 0) < self.tenant_limit and self.size < self.limit:
            self.size += 1
            self._hold(tenant)
            given = None
        else:
            given = await self._wait(tenant, deadline)
        if given is not None:
            return given
        try:
            return await self.connect(deadline)
        except BaseException:
            self._unhold(tenant)
            self._drop(None)
            raise

    async def _wait(self, tenant: str, deadline: float) -> Connection | None:
        held = self.held.get(tenant, 0)
        if held >= self.tenant_limit:
            _notices.warning(f"upstream_connections_per_workspace:{tenant}:{self.origin}", "workspace %s holds "
                             "%d connections to %s (CRANK_UPSTREAM_CONNECTIONS_PER_WORKSPACE): its further calls "
                             "wait", tenant, held, self.origin)  # fmt: skip
        else:
            _notices.warning(f"upstream_connections_per_origin:{self.origin}", "%d connections to %s are busy "
                             "(CRANK_UPSTREAM_CONNECTIONS_PER_ORIGIN): calls wait their turn", self.size,
                             self.origin)  # fmt: skip
        waiter: asyncio.Future[Connection | None] = self.loop.create_future()
        self.waiters.setdefault(tenant, deque()).append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                return await waiter
        except BaseException as exc:  # the deadline, or the caller cancelled
            self._pass_on(waiter, tenant)
            if isinstance(exc, TimeoutError):
                raise UpstreamBusyError from None
            raise

    def _pass_on(self, waiter: asyncio.Future[Connection | None], tenant: str) -> None:
        """A waiter gave up (deadline, cancellation), perhaps just after being handed a connection or a
        free slot: the next one gets it."""
        if not waiter.done():
            waiter.cancel()  # left in its queue: skipped when its turn comes
            return
        if waiter.cancelled():
            return
        given = waiter.result()
        if given is not None:
            self.give_back(given, tenant)
        else:
            self._unhold(tenant)
            self._drop(None)


class UpstreamClient:
    """Pooled HTTP/1.1 requests to any upstream. Made anywhere; its connections belong to the event loop
    of the first request (a request from another loop starts new pools)."""

    def __init__(
        self,
        *,
        limit_per_host: int = DEFAULT_LIMIT_PER_HOST,
        limit_per_tenant: int | None = None,
        keepalive_timeout: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        """`limit_per_tenant`: half of `limit_per_host` when None (`default_limit_per_tenant`)."""
        if limit_per_tenant is None:
            limit_per_tenant = default_limit_per_tenant(limit_per_host)
        if limit_per_host < 1 or limit_per_tenant < 1:
            raise ValueError("limit_per_host and limit_per_tenant must be at least 1")
        if limit_per_tenant > limit_per_host:  # not capped silently: the operator meant something else
            raise ValueError(f"limit_per_tenant ({limit_per_tenant}) may not exceed limit_per_host ({limit_per_host})")
        self._limits = (limit_per_host, limit_per_tenant)
        self.egress = egress if egress is not None else EgressPolicy.from_environment()
        """Which addresses it connects to (crank.gateway.egress); `CRANK_EGRESS_ALLOW` when not given."""
        self._keepalive_timeout = keepalive_timeout
        self._max_response_bytes = max_response_bytes
        self._ssl_context = ssl_context
        self._tracer = tracing.tracer()  # None unless the OTEL_* variables turn traces on (crank.tracing)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pools: dict[str, _Pool] = {}
        self._origins: dict[str, _Origin] = {}
        self._names: set[str] = set()  # header names already checked
        self._methods: set[str] = set()  # methods already checked

    async def request(
        self,
        method: str,
        url: str,
        *,
        params: list[tuple[str, str]] | None,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
        tenant: str = "",
        traced: bool = True,
    ) -> UpstreamResponse:
        """One request; `url` is already percent-encoded (path parameters), `params` are encoded here. A
        URL, header name or header value that would change the request's framing is a `ValueError`.

        `tenant` (the workspace) is whose share of the origin's connections the request uses. With tracing on, the
        request has a client span and carries its trace context (`traceparent`); `traced=False` is that span's own
        request."""
        if traced and self._tracer is not None:
            return await self._traced(method, url, params=params, headers=headers, body=body, timeout=timeout,
                                      tenant=tenant)  # fmt: skip
        origin, target = self._split(url)
        if params:
            # Percent-encoding only lengthens: a query already too long unencoded is refused before the work.
            unencoded = len(target) + sum(len(name) + len(value) + 2 for name, value in params)
            if unencoded > MAX_REQUEST_HEAD_BYTES:
                raise _head_too_large(unencoded)
            target += ("&" if "?" in target else "?") + urlencode(params, quote_via=quote)
        data = self._serialize(method, target, origin, headers, body)
        loop = asyncio.get_running_loop()
        pool = self._pool(origin, loop)
        deadline = loop.time() + timeout
        for attempt in (1, 2):
            # The second attempt follows a connection the upstream had closed: the other idle ones are
            # as old (an upstream restart closes them all), so it goes out on a new one.
            connection = (pool.take_for(tenant) if attempt == 1 else None) or await pool.acquire(tenant, deadline)
            reused = connection.exchanges > 0
            waiter = connection.send(data, head_only=method == "HEAD")
            timer = loop.call_at(deadline, connection.time_out)
            try:
                return await waiter
            except UpstreamConnectionError:
                if attempt == 1 and reused and not connection.answered and method in IDEMPOTENT_METHODS:
                    pool.drop_idle()
                    continue  # the upstream had closed this idle connection as the request went out
                raise
            finally:
                timer.cancel()
                pool.give_back(connection, tenant)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _traced(
        self, method: str, url: str, *, params: list[tuple[str, str]] | None, headers: Mapping[str, str],
        body: bytes | None, timeout: float, tenant: str,
    ) -> UpstreamResponse:  # fmt: skip
        """`request` inside a client span (HTTP client conventions), its context sent upstream."""
        assert self._tracer is not None
        origin, _ = self._split(url)
        scheme = "https" if origin.tls else "http"
        with tracing.client_span(self._tracer, method, scheme, origin.host, origin.port) as span:
            try:
                response = await self.request(method, url, params=params, headers={**headers, **tracing.inject()},
                                              body=body, timeout=timeout, tenant=tenant, traced=False)  # fmt: skip
            except Exception as exc:
                tracing.mark_error(span, type(exc).__name__)
                raise
            span.set_attribute("http.response.status_code", response.status)
            if response.status >= 400:
                tracing.mark_error(span, str(response.status))
            return response

    def _pool(self, origin: _Origin, loop: asyncio.AbstractEventLoop) -> _Pool:
        if loop is not self._loop:  # connections cannot move between event loops
            self._close_pools()
            self._loop = loop
        pool = self._pools.get(origin.key)
        if pool is None:
            connect = functools.partial(self._connect, origin, loop)
            pool = self._pools[origin.key] = _Pool(loop, connect, self._limits, self._keepalive_timeout, origin.key)
        return pool

    async def _connect(self, origin: _Origin, loop: asyncio.AbstractEventLoop, deadline: float) -> Connection:
        context = (self._ssl_context or _default_ssl_context()) if origin.tls else None
        limit = self._max_response_bytes
        try:
            async with asyncio.timeout_at(deadline):
                # Resolved and checked once; the connection goes to a checked address, never to what a second
                # resolution (DNS rebinding) would say. TLS still verifies the certificate for the host name.
                addresses = await self.egress.addresses(origin.host, origin.port)
                failure: OSError | None = None
                for address in addresses:
                    try:
                        _, connection = await loop.create_connection(
                            lambda: Connection(loop, limit), address, origin.port,
                            ssl=context, server_hostname=origin.host if context else None,
                        )  # fmt: skip
                        return connection
                    except OSError as exc:
                        failure = exc
                assert failure is not None  # `addresses` is never empty
                raise failure
        except TimeoutError:
            raise UpstreamTimeoutError(sent=False) from None
        except OSError as exc:  # refused, unreachable, unknown host, a certificate that does not verify
            raise UpstreamConnectionError(str(exc) or type(exc).__name__, sent=False, cause=_cause(exc)) from None

    def _split(self, url: str) -> tuple[_Origin, str]:
        """The origin of `url` (parsed once per origin) and the request target (path and query)."""
        scheme_end = url.find("://")
        start = scheme_end + 3
        end = min((i for i in (url.find("/", start), url.find("?", start), url.find("#", start)) if i >= 0),
                  default=len(url))  # fmt: skip
        key = url[:end]
        origin = self._origins.get(key)
        if origin is None:
            origin = self._origins[key] = _parse_origin(key)
        target = url[end:].partition("#")[0]
        if not target.startswith("/"):
            target = "/" + target
        if _UNSAFE_TARGET.search(target):
            raise ValueError(f"the URL's path may not contain spaces or control characters: {url!r}")
        return origin, target

    def _serialize(
        self, method: str, target: str, origin: _Origin, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        if method not in self._methods:
            if not is_token(method):
                raise ValueError(f"{method!r} cannot be sent as a request method")
            self._methods.add(method)
        lines = [f"{method} {target} HTTP/1.1\r\n{origin.host_line}"]
        given: set[str] = set()
        for name, value in headers.items():
            if name not in self._names:
                if not is_token(name) or name.lower() in ("host", "content-length", "transfer-encoding"):
                    raise ValueError(f"{name!r} cannot be sent as a header name")
                self._names.add(name)
            if "\r" in value or "\n" in value:
                raise ValueError(f"the value of header {name!r} may not contain line breaks")
            lines.append(f"{name}: {value}\r\n")
            given.add(name.lower())
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n")
        if given.isdisjoint(_DEFAULT_HEADERS):
            lines.append(_ALL_DEFAULT_HEADERS)
        else:  # the caller's Accept, Accept-Encoding or User-Agent replaces the default one
            lines.extend(line for name, line in _DEFAULT_HEADERS.items() if name not in given)
        lines.append("\r\n")
        head = "".join(lines).encode()
        if len(head) > MAX_REQUEST_HEAD_BYTES:
            raise _head_too_large(len(head))
        return head + body if body else head

    async def aclose(self) -> None:
        """Close every connection; the client can still be used afterwards (it opens new ones)."""
        self._close_pools()

    def _close_pools(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()


def _head_too_large(size: int) -> UpstreamRequestTooLargeError:
    return UpstreamRequestTooLargeError(
        f"the request head would be at least {size} bytes; at most {MAX_REQUEST_HEAD_BYTES} are sent"
    )


def placeholder_in_origin(url: str) -> bool:
    """Whether a `{placeholder}` stands in a URL's scheme, host or port: filled from a call's arguments, it would
    send the request, and the credentials bound to the operation's origin, wherever the arguments say."""
    scheme, _, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return any(brace in scheme or brace in authority for brace in "{}")


def parse_upstream_url(url: str) -> SplitResult:
    """`url` split, if it can name an upstream: http(s) with a host and a usable port, none of them a placeholder
    (`placeholder_in_origin`), no credentials, no space or control character (they would break the request line);
    else a `ValueError` saying why."""
    if placeholder_in_origin(url):
        raise ValueError(f"{url!r} has a placeholder in its scheme, host or port, which a call's arguments would "
                         "fill: name the host itself")  # fmt: skip
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"an upstream URL is http:// or https:// with a host, got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in an upstream URL are not sent; use the operation's auth")
    if _UNSAFE_TARGET.search(url):
        raise ValueError(f"an upstream URL may not contain spaces or control characters: {url!r}")
    if port == 0:
        raise ValueError(f"port 0 cannot be connected to: {url!r}")
    return parts


def _parse_origin(key: str) -> _Origin:
    parts = parse_upstream_url(key)
    tls = parts.scheme == "https"
    default_port = 443 if tls else 80
    port = parts.port or default_port
    host = parts.hostname
    assert host is not None  # parse_upstream_url refuses a URL without one
    authority = f"[{host}]" if ":" in host else host
    if port != default_port:
        authority += f":{port}"
    return _Origin(key, host, port, tls, f"Host: {authority}\r\n")


_ssl_context: ssl.SSLContext | None = None


def _cause(exc: OSError) -> str:
    """Why a connection could not be made, in the words of an operator's log."""
    if isinstance(exc, ssl.SSLError):
        return "tls"
    if isinstance(exc, socket.gaierror):
        return "dns"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    return "unreachable"


def _default_ssl_context() -> ssl.SSLContext:
    """The system's trust store, host names checked; made once (loading the store is slow)."""
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = ssl.create_default_context()
    return _ssl_context
