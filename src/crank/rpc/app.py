"""`RPCApp`: the methods of a Python service, served as JSON-RPC 2.0, OpenRPC and MCP from one metadata.

```python
app = RPCApp(title="Shop", versions=("v1", "v2"))

@app.method("Catalog.search", groups=["mcp"], cache=60, mcp=MCP(title="Search products"))
async def search(query: str, limit: int = 10) -> list[Product]:
    \"\"\"Search products by name.

    Args:
        query: Part of the product name.
        limit: How many products at most.
    \"\"\"

```

`app` is an ASGI app: JSON-RPC at `/rpc` (first version) and `/rpc/<version>`, with their OpenRPC
documents on GET. Cache, lock and rate limit are per process unless a Redis URL is given (`redis_url`, or
`CRANK_REDIS_URL` in the environment): then every worker and replica sharing that Redis acts as one.
The MCP endpoints of its groups are added by `crank.server.RPCService`, above this layer: the rpc core
knows nothing of MCP beyond the `MCP` settings it keeps for it.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from crank.exceptions import ConfigurationError
from crank.rpc.auth import BearerTokenRoles, RoleResolver
from crank.rpc.context import Context
from crank.rpc.endpoint import JSONRPCEndpoint
from crank.rpc.events import EventName, Events, Handler
from crank.rpc.executor import Executor
from crank.rpc.method import MCP, Method, RateLimit
from crank.rpc.offerings import PromptSpec, ResourceSpec, prompt_spec, resource_spec
from crank.rpc.openrpc import build_openrpc
from crank.schema import DatetimeFormat, describe_method
from crank.state.coordination import (
    DEFAULT_CACHE_MAX_BYTES,
    DEFAULT_CACHE_SIZE,
    DEFAULT_LOCK_LEASE,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_REDIS_PREFIX,
    Coordinator,
    LocalCoordinator,
    RedisCoordinator,
)
from crank.types import JSONObject, Receive, Scope, Send
from crank.wire.workers import WORKERS_VARIABLE

__all__ = ["FROM_ENVIRONMENT", "REDIS_URL_VARIABLE", "WORKERS_VARIABLES", "RPCApp"]

F = TypeVar("F", bound=Callable[..., Any])

REDIS_URL_VARIABLE: Final = "CRANK_REDIS_URL"
"""The environment variable an `RPCApp` reads its Redis URL from when none is given (as `crank serve` does)."""
WORKERS_VARIABLES: Final = (WORKERS_VARIABLE, "WEB_CONCURRENCY")
"""Set above 1, they say several processes serve the app: `crank serve --workers N` sets the first in every
worker, and uvicorn and gunicorn read the second as their worker count."""


class _Unset(enum.Enum):
    FROM_ENVIRONMENT = "FROM_ENVIRONMENT"


FROM_ENVIRONMENT: Final = _Unset.FROM_ENVIRONMENT
"""`RPCApp(redis_url=...)`'s default: `CRANK_REDIS_URL` when set, else in process. `None` means in process."""


class RPCApp:
    """Holds the methods; an ASGI app once they are registered.

    Parameters:
        title / version: the service's name and version (OpenRPC `info`, MCP `serverInfo`).
        versions: API versions, the first is the default (served at `/rpc` and at the MCP paths).
        rpc_path: where JSON-RPC is served.
        datetime_format: "date-time" (ISO strings) or "timestamp" (integer seconds) for datetimes.
        roles: how a request's roles are found: a mapping of bearer tokens to roles (the built-in verifier),
            or any `RoleResolver`; without it no caller has a role.
        cache_size: the most results the in-process cache of `cache=` methods keeps; the least recently used
            go first when it is full, and each leaves at its method's TTL anyway. With Redis: the most results
            of one method stored per TTL (at most about twice that many live); past it, results are not cached.
        redis_url: share cache, locks and rate limits with every process using this Redis (redis://host:port/db);
            by default `CRANK_REDIS_URL` when set; `None`: this process only.
        redis_prefix: where this app's keys live in Redis (two different apps on one Redis need two).
        lock_timeout: seconds a call of a `lock=True` method waits for the lock before -32004 (both modes).
        lock_lease: seconds a Redis lock outlives a holder that stopped renewing it (died, lost Redis).
        cache_max_bytes: the largest result (as JSON) the Redis cache stores; larger ones are not cached.
        debug: put file, line and trace in error data. Never in production.
    """

    def __init__(
        self,
        *,
        title: str = "Crank RPC",
        version: str = "1.0.0",
        versions: Sequence[str] = ("v1",),
        rpc_path: str = "/rpc",
        datetime_format: DatetimeFormat = "date-time",
        roles: RoleResolver | Mapping[str, Iterable[str]] | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        redis_url: str | None | Literal[_Unset.FROM_ENVIRONMENT] = FROM_ENVIRONMENT,
        redis_prefix: str = DEFAULT_REDIS_PREFIX,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_lease: float = DEFAULT_LOCK_LEASE,
        cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
        debug: bool = False,
    ) -> None:
        if not versions:
            raise ConfigurationError("versions must name at least one API version")
        self.title = title
        self.version = version
        self.versions = tuple(versions)
        self.rpc_path = rpc_path.rstrip("/")
        self.datetime_format: DatetimeFormat = datetime_format
        self.debug = debug
        self.events = Events()
        if redis_url is FROM_ENVIRONMENT:
            redis_url = os.environ.get(REDIS_URL_VARIABLE) or None
        coordinator: Coordinator
        if redis_url is None:
            coordinator = LocalCoordinator(cache_size=cache_size, lock_timeout=lock_timeout)
        else:
            coordinator = _redis_coordinator(redis_url, prefix=redis_prefix, lock_timeout=lock_timeout,
                                             lock_lease=lock_lease, cache_max_bytes=cache_max_bytes,
                                             cache_size=cache_size)  # fmt: skip
        self.executor = Executor(self.events, coordinator=coordinator, datetime_format=datetime_format, debug=debug)
        self.logger = logging.getLogger("crank.rpc")
        self._roles = BearerTokenRoles(roles) if isinstance(roles, Mapping) else roles
        self._methods: dict[str, dict[str, Method]] = {version: {} for version in self.versions}
        self.resources: list[ResourceSpec] = []
        """Documents offered beside the methods (`resource`), for the MCP endpoints of their groups."""
        self.prompts: list[PromptSpec] = []
        """Prompts offered beside the methods (`prompt`), for the MCP endpoints of their groups."""
        self._openrpc: dict[str, JSONObject] = {}
        self._asgi: Starlette | None = None

    # -- registration ------------------------------------------------------------------------------

    def method(
        self,
        name: str | None = None,
        *,
        groups: Iterable[str] = (),
        versions: Iterable[str] | None = None,
        description: str | None = None,
        deprecated: bool = False,
        roles: Iterable[str] = (),
        cache: float | None = None,
        lock: bool = False,
        rate_limit: str | RateLimit | None = None,
        mcp: MCP | None = None,
        output: Any = None,
    ) -> Callable[[F], F]:
        """Register a function (sync or async) or a class with `__call__` (instantiated without arguments).

        `cache` is a time-to-live in seconds; `rate_limit` is "10/minute" or a `RateLimit`; `output` is
        an explicit result type or literal JSON Schema (beats the return annotation).
        """

        def register(func: F) -> F:
            target = func() if inspect.isclass(func) else func
            method_name = name or getattr(func, "__name__", None) or type(func).__name__
            self.add(
                method_name, target, groups=tuple(groups), versions=tuple(versions or self.versions),
                description=description, deprecated=deprecated, roles=frozenset(roles), cache=cache, lock=lock,
                rate_limit=RateLimit.parse(rate_limit) if isinstance(rate_limit, str) else rate_limit, mcp=mcp,
                output=output,
            )  # fmt: skip
            return func

        return register

    def add(self, name: str, func: Callable[..., Any], *, groups: tuple[str, ...], versions: tuple[str, ...],
            description: str | None, deprecated: bool, roles: frozenset[str], cache: float | None, lock: bool,
            rate_limit: RateLimit | None, mcp: MCP | None, output: Any) -> Method:  # fmt: skip
        if self._asgi is not None:
            raise ConfigurationError(f"method {name!r}: register methods before the app serves requests")
        if not name or name.startswith("rpc."):
            raise ConfigurationError(f"method {name!r}: names must be non-empty; 'rpc.' is reserved (JSON-RPC 2.0)")
        unknown = [version for version in versions if version not in self._methods]
        if unknown:
            raise ConfigurationError(f"method {name!r}: unknown versions {unknown}; the app has {list(self.versions)}")
        schemas = describe_method(func, name=name, output=output, datetime_format=self.datetime_format,
                                  context=Context)  # fmt: skip
        method = Method(
            name, func, schemas, groups, versions, description, deprecated, roles, cache, lock, rate_limit, mcp
        )
        for version in versions:
            if name in self._methods[version]:
                raise ConfigurationError(f"method {name!r} is registered twice in version {version!r}")
            self._methods[version][name] = method
        return method

    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        groups: Iterable[str] = (),
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
        completions: Mapping[str, Callable[..., Any]] | None = None,
        roles: Iterable[str] = (),
    ) -> Callable[[F], F]:
        """Offer a document at `uri` (a URI template when it has `{variables}`: the function's parameters) to
        the MCP endpoints of `groups`. The function (sync or async) returns text or bytes (`crank.rpc.offerings`).
        With `roles`, only a caller with one of them sees and reads it, as a method's `roles` say."""

        def register(func: F) -> F:
            self._check_open(f"resource {uri!r}")
            spec = resource_spec(uri, func, name=name, groups=tuple(groups), title=title, description=description,
                                 mime_type=mime_type, completions=completions or {},
                                 roles=frozenset(roles))  # fmt: skip
            if any(known.uri == uri for known in self.resources):
                raise ConfigurationError(f"resource {uri!r} is registered twice")
            self.resources.append(spec)
            return func

        return register

    def prompt(
        self,
        name: str | None = None,
        *,
        groups: Iterable[str] = (),
        title: str | None = None,
        description: str | None = None,
        completions: Mapping[str, Callable[..., Any]] | None = None,
        roles: Iterable[str] = (),
    ) -> Callable[[F], F]:
        """Offer a prompt to the MCP endpoints of `groups`: the function's parameters are its arguments, it
        returns the text of one user message or a list of messages (`crank.rpc.offerings`). With `roles`, only a
        caller with one of them sees and gets it."""

        def register(func: F) -> F:
            self._check_open(f"prompt {name or func.__name__!r}")
            spec = prompt_spec(func, name=name, groups=tuple(groups), title=title, description=description,
                               completions=completions or {}, roles=frozenset(roles))  # fmt: skip
            if any(known.name == spec.name for known in self.prompts):
                raise ConfigurationError(f"prompt {spec.name!r} is registered twice")
            self.prompts.append(spec)
            return func

        return register

    def _check_open(self, what: str) -> None:
        if self._asgi is not None:
            raise ConfigurationError(f"{what}: register it before the app serves requests")

    def on(self, event: EventName) -> Callable[[Handler], Handler]:
        """Decorator: `@app.on("post_response")` (events: request, response, error, post_response)."""

        def register(handler: Handler) -> Handler:
            return self.events.on(event, handler)

        return register

    # -- lookups -----------------------------------------------------------------------------------

    def method_for(self, name: str, version: str) -> Method | None:
        return self._methods[version].get(name)

    def methods_in(self, version: str) -> list[Method]:
        return list(self._methods[version].values())

    def openrpc(self, version: str) -> JSONObject:
        document = self._openrpc.get(version)
        if document is None:
            methods = self.methods_in(version)
            document = self._openrpc[version] = build_openrpc(methods, title=self.title, version=self.version)
        return document

    @property
    def resolves_roles(self) -> bool:
        """Whether callers can have roles (a role resolver was given): without one, every caller has none."""
        return self._roles is not None

    async def resolve_roles(self, scope: Scope) -> frozenset[str]:
        return await self._roles(scope) if self._roles is not None else frozenset()

    # -- ASGI --------------------------------------------------------------------------------------

    def build(self) -> Starlette:
        """Freeze the methods and build the /rpc routes now (also done on the first request)."""
        if self._asgi is None:
            self._asgi = Starlette(routes=self.routes(), lifespan=self.lifespan)
            self.warn_if_not_shared()
        return self._asgi

    def warn_if_not_shared(self) -> None:
        """Log one warning when several processes serve the app while its cache, locks and rate limits are
        each process's own: a `lock=True` method would run in two processes at once."""
        if self.executor.coordinator.shared:
            return
        workers = {name: value for name in WORKERS_VARIABLES if _above_one(value := os.environ.get(name))}
        names = sorted({method.name for version in self.versions for method in self.methods_in(version)
                        if method.lock or method.cache_ttl or method.rate_limit})  # fmt: skip
        if workers and names:
            said = ", ".join(f"{name}={value}" for name, value in workers.items())
            self.logger.warning(
                "several processes serve %s (%s) but no Redis is configured: the cache, lock and rate limit of %s "
                "hold in each process alone (a lock=True method can run in two at once). Set %s or "
                "RPCApp(redis_url=...).", self.title, said, ", ".join(names), REDIS_URL_VARIABLE,
                extra={"event": "rpc_not_shared"},
            )  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The ASGI lifespan: at start, builds the routes (and warns when several processes serve the app without
        Redis); at shutdown, closes the Redis connections. Pass it on when mounting the app in another one."""
        self.build()
        try:
            yield
        finally:
            await self.executor.coordinator.aclose()

    def routes(self) -> list[BaseRoute]:
        """The /rpc routes, for composing with other routes (see `crank.server.RPCService`)."""
        routes: list[BaseRoute] = []
        default = self.versions[0]
        for version in self.versions:
            path = self.rpc_path if version == default else f"{self.rpc_path}/{version}"
            # Every method reaches the endpoint, which answers the others itself (405 with Allow: GET, POST).
            routes.append(Route(path, JSONRPCEndpoint(self, version)))
            self.openrpc(version)
        return routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.build()(scope, receive, send)


def _redis_coordinator(url: str, **options: Any) -> RedisCoordinator:
    try:
        return RedisCoordinator(url, **options)
    except ConfigurationError:
        raise
    except ValueError as exc:  # redis-py's word on a URL it cannot read (never the URL: it may hold a password)
        raise ConfigurationError(f"redis_url: {exc}") from None


def _above_one(value: str | None) -> bool:
    try:
        return value is not None and int(value) > 1
    except ValueError:
        return False
