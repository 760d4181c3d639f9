"""ASGI apps that put the layers together.

`RPCService` serves an `RPCApp`'s JSON-RPC routes and, for each configured path, the MCP endpoint of
one API group at that path (the first API version) and at `<path>/<version>`.

`GatewayService` serves every published agent of a registry at `/mcp/v1/{workspace}/{agent}` (with the
plain pair below it), reloading published versions without restart, its metrics at `/metrics` and its
readiness at `/readyz` (not ready while the registry or Redis does not answer, or a served tool's secret does
not resolve on this host).

`CrankServer` is what `crank serve` runs: the gateway's roles (`mcp`, `admin` or `all`) in one app,
from `Settings`.

```python
app = RPCService(rpc, mcp={"/mcp": MCPConfig(group="mcp", enabled=True)})
```
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from crank.admin.api import AdminAPI, registry_probe
from crank.admin.console import Console
from crank.admin.console.sso import SingleSignOn
from crank.admin.guard import SignInGuard
from crank.exceptions import ConfigurationError
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import EgressPolicy
from crank.gateway.tokens import MAX_DOCUMENT_BYTES, TokenLimits, TokenVerifier
from crank.gateway.user_connections import CONNECT_PATH, ConnectLinks, UserConnections
from crank.mcp.changes import DEFAULT_MAX_LISTENERS_PER_GROUP, ListChanges
from crank.mcp.endpoint_options import EndpointAccess, EndpointOptions
from crank.mcp.http import MCPEndpoint
from crank.mcp.routing import mount
from crank.mcp.server import ServerInfo
from crank.mcp.streams import Relay
from crank.registry import Registry, migrate, open_engine
from crank.registry.audit import AuditLog
from crank.registry.changes import ChangeListener, change_announcer, change_listener
from crank.registry.runtime import OAuthPolicy
from crank.registry.vault import Vault, VaultKeys
from crank.rpc import RPCApp
from crank.settings import Settings
from crank.sources.access import GatewayAuthenticator, ResourceAuthenticator
from crank.sources.agent_cache import AgentCacheLimits
from crank.sources.agents import AgentSource
from crank.sources.api_keys import DEFAULT_KEY_LIST_MAX_AGE, KeyCacheLimits
from crank.sources.audit_trail import DEFAULT_AUDIT_BUFFER, AuditTrail, audit_key
from crank.sources.connect import ConnectPages
from crank.sources.rpc import MCPConfig, RPCSource
from crank.state import MemoryStore, StateStore, check_durability, open_state
from crank.state.relay import RedisRelay
from crank.telemetry import METRICS_CONTENT_TYPE, Metrics, Probe
from crank.types import ASGIApp, JSONObject, Receive, Scope, Send
from crank.wire.asgi import DEFAULT_MAX_BODY_SIZE, EarlyAnswer, serve_lifespan
from crank.wire.auth import PROTECTED_RESOURCE_PATH, metadata_path
from crank.wire.checks import Refused, check_request
from crank.wire.middleware import send_refusal

__all__ = ["CrankServer", "GatewayService", "MCPConfig", "RPCService"]

_MCP_PREFIX = "/mcp/v1/"
_CORS = {"access-control-allow-origin": "*", "access-control-allow-methods": "GET, HEAD, OPTIONS"}


class RPCService:
    """An `RPCApp` with its MCP endpoints. Publication stays off for a path until its config says `enabled`."""

    def __init__(self, rpc: RPCApp, *, mcp: Mapping[str, MCPConfig] | None = None) -> None:
        self.rpc = rpc
        self.mcp = dict(mcp or {})
        self._asgi: Starlette | None = None
        self._verifier: TokenVerifier | None = None  # one for every endpoint that takes access tokens
        self._resources: list[ResourceAuthenticator] = []
        # The MCP endpoints by path, versioned paths first (`/mcp/v2` before `/mcp`): an http request for one is
        # handed to it at once, not through Starlette's middleware and routes (the hot path; docs/benchmarks.md).
        self._endpoints: list[tuple[str, MCPEndpoint]] = []
        self._other_paths: frozenset[str] = frozenset()

    def build(self) -> Starlette:
        """Compile every schema, catalog and route now (also done on the first request)."""
        if self._asgi is None:
            routes: list[BaseRoute] = self.rpc.routes()
            self.rpc.build()  # no more methods from here on
            for path, config in self.mcp.items():
                if config.enabled:
                    routes += self._mcp_routes(path.rstrip("/"), config)
            routes += self._metadata_routes()
            # The other routes' paths (/rpc and its versions, the resource metadata): Starlette's, whatever MCP
            # endpoint's path they fall below (an endpoint at `/` never takes /rpc).
            mounted = {id(endpoint) for _, endpoint in self._endpoints}
            self._other_paths = frozenset(
                route.path for route in routes if isinstance(route, Route) and id(route.app) not in mounted
            )
            self._asgi = Starlette(routes=routes, lifespan=self._lifespan)
        return self._asgi

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Any) -> AsyncIterator[None]:
        """The rpc app's lifespan, then the token verifier's connections (to issuers) closed at shutdown."""
        async with self.rpc.lifespan(app):
            try:
                yield
            finally:
                if self._verifier is not None:
                    await self._verifier.client.aclose()

    def _mcp_routes(self, path: str, config: MCPConfig) -> list[BaseRoute]:
        default, *others = self.rpc.versions
        # Versioned paths first: `path` itself is a mount that would also match `path/v2`.
        served = [(f"{path}/{version}", self._endpoint(config, version, f"{path}/{version}")) for version in others]
        served.append((path, self._endpoint(config, default, path)))
        # Longest path first, so that an endpoint at `/mcp/admin` is never taken for one at `/mcp`.
        self._endpoints = sorted([*self._endpoints, *served], key=lambda pair: len(pair[0]), reverse=True)
        return [mount(where, endpoint) for where, endpoint in served]

    def _endpoint(self, config: MCPConfig, version: str, path: str) -> MCPEndpoint:
        source = RPCSource(self.rpc, config, version)
        auth = self._resource(config.oauth, path) if config.oauth is not None else None
        options = EndpointOptions(
            server_info=ServerInfo(self.rpc.title, self.rpc.version),
            default_format=config.default_format,
            invalid_arguments=config.invalid_arguments,
            cache_scope="private" if source.private or auth is not None else "public",
            debug=self.rpc.debug,
        )
        access = EndpointAccess(auth, metadata_url=auth.metadata_url) if auth is not None else None
        return MCPEndpoint(source.provide, options, access)

    def _resource(self, policy: OAuthPolicy, path: str) -> ResourceAuthenticator:
        if policy.audience is None:
            raise ConfigurationError(f"MCP endpoint {path}: oauth needs its audience (the public base URL)")
        if self._verifier is None:
            self._verifier = TokenVerifier(UpstreamClient(max_response_bytes=MAX_DOCUMENT_BYTES))
        auth = ResourceAuthenticator(self._verifier, policy, policy.audience.rstrip("/") + path)
        self._resources.append(auth)
        return auth

    def _metadata_routes(self) -> list[BaseRoute]:
        """RFC 9728 documents of the endpoints that take access tokens, with CORS: each at the well-known path plus
        its own, and the first one's at the root."""
        routes: list[BaseRoute] = []
        for index, auth in enumerate(self._resources):
            document = auth.metadata()
            paths = [auth.metadata_path] + ([PROTECTED_RESOURCE_PATH] if index == 0 else [])
            routes += [Route(path, _metadata_endpoint(document), methods=["GET", "HEAD", "OPTIONS"]) for path in paths]
        return routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.build()
        if scope["type"] == "http":
            # As the endpoint's Starlette mount routes it (`crank.mcp.routing.mount`), without the framework's
            # layers around it: the endpoint answers its own failures.
            root = scope.get("root_path", "")
            path: str = scope["path"]
            route = path[len(root) :] if root and path.startswith(root) else path
            if route not in self._other_paths:
                for where, endpoint in self._endpoints:
                    if route.startswith(where) and (len(route) == len(where) or route[len(where)] == "/"):
                        # The keys Starlette and its mount would set (a role resolver may build a `Request`), set
                        # in the scope itself, as Starlette's router updates it.
                        scope["app"] = app
                        scope["app_root_path"] = scope.get("app_root_path", root)
                        scope["root_path"] = root + where
                        scope["path_params"] = {}
                        await endpoint.http_app(scope, receive, send)
                        return
        await app(scope, receive, send)


def _refused_head(scope: Scope) -> Refused | None:
    """What the request checks (`check_request`) say of a request to `crank serve`'s own routes; None for one they
    let through (or a scope that is not http). The admin API checks its requests itself and answers in its own
    error shape: here only its ambiguous framing is refused, as the connection must close whatever the app."""
    if scope["type"] != "http":
        return None
    checked = check_request(scope, None, None)
    if type(checked) is not Refused or (scope["path"].startswith("/admin/") and not checked.close):
        return None
    return checked


def _metadata_endpoint(document: JSONObject) -> Callable[[Request], Awaitable[Response]]:
    async def serve(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers={**_CORS, "access-control-allow-headers": "*"})
        return JSONResponse(document, headers={**_CORS, "cache-control": "max-age=300"})

    return serve


_ROUTE_CACHE_SIZE = 4096
_ROUTE_CACHE_PATH_CHARS = 256  # longer paths are routed each time, never kept: the cache stays under 4 MiB


def _agent_route(path: str, routes: dict[str, tuple[str, dict[str, str]]]) -> tuple[str, dict[str, str]] | None:
    """For `/mcp/v1/{workspace}/{agent}[/...]`: the agent's root below the app's and its path parameters, kept
    in `routes` when the path is short (a client sends the same path on every call; cleared when full, so a
    flood of distinct or long paths cannot grow it). None for any other path."""
    if not path.startswith(_MCP_PREFIX):
        return None
    workspace, _, rest = path[len(_MCP_PREFIX) :].partition("/")
    agent = rest.partition("/")[0]
    if not (workspace and agent):
        return None
    # The parameters are shared by every request of the path: read, never changed.
    route = (f"{_MCP_PREFIX}{workspace}/{agent}", {"workspace": workspace, "agent": agent})
    if len(path) <= _ROUTE_CACHE_PATH_CHARS:
        if len(routes) >= _ROUTE_CACHE_SIZE:
            routes.clear()
        routes[path] = route
    return route


class GatewayService:
    """Published agents over MCP. Give it the registry; it owns one pooled upstream client unless given one.

    Every request needs a workspace API key (`Authorization: Bearer <key>`, see `Registry.create_api_key`)
    unless `require_api_keys=False`; a missing or wrong key is 401 with `WWW-Authenticate`, and every key is
    503 while the registry has not confirmed the key list for `key_list_max_age` seconds.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        client: UpstreamClient | None = None,
        poll_interval: float = 0.25,
        require_api_keys: bool = True,
        server_info: ServerInfo | None = None,
        metrics: Metrics | None = None,
        state: StateStore | None = None,
        key_list_max_age: float = DEFAULT_KEY_LIST_MAX_AGE,
        probe: Probe | None = None,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
        listener: ChangeListener | None = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        public_url: str | None = None,
        request_state_secret: str | bytes | None = None,
        relay: Relay | None = None,
        max_streams_per_workspace: int = DEFAULT_MAX_LISTENERS_PER_GROUP,
        token_limits: TokenLimits | None = None,
        vault_keys: VaultKeys | None = None,
        agent_cache: AgentCacheLimits | None = None,
        key_cache: KeyCacheLimits | None = None,
        audit: bool = False,
        audit_buffer: int = DEFAULT_AUDIT_BUFFER,
    ) -> None:
        """`audit`: every tool call is recorded in the registry's audit trail (`crank.sources.audit_trail`; off by
        default: docs/deployment.md, "The audit trail"),
        with at most `audit_buffer` records waiting to be written. `allowed_hosts`, `allowed_origins`: what the
        MCP endpoints' DNS-rebinding protection accepts besides the loopback names and same-origin requests
        (`MCPEndpoint`). `listener`: how this replica hears of registry changes at once
        (`crank.registry.changes`); it polls every `poll_interval` seconds besides (without one, only that).
        `max_body_size`: larger request bodies get 413, unread. `public_url`: the server's public base URL,
        which names each agent's resource for OAuth (a workspace's own audience wins); never taken from a
        request's `Host`. `request_state_secret` and `relay`: what lets replicas finish each other's questions
        to users (a confirmation): the same secret on every replica, and the answer relay (`crank.state.relay`)
        over their Redis. `max_streams_per_workspace`: list-change streams one workspace's callers may hold open
        at once (`crank.mcp.changes`). `vault_keys`: the keys of the token vault (`CRANK_VAULT_KEYS`), which
        users' own connections to APIs need, with `public_url` for their connect pages; checked here against the
        vault's rows (`ConfigurationError` naming a key the rows need). `agent_cache`: how many agents stay
        built, and how many cold ones are built a second; `key_cache`: how many API keys stay held, and how many
        are looked up a second."""
        client = client or UpstreamClient()
        self.metrics = metrics or Metrics()
        state = state or MemoryStore()
        vault = Vault(registry.engine, vault_keys) if vault_keys is not None else None
        if vault is not None:
            vault.check()
        links = ConnectLinks(public_url, vault_keys) if vault_keys is not None and public_url else None
        connections = UserConnections(vault, state, links)
        # A publish tells the clients of the agents whose lists it changed.
        self.changes = ListChanges(max_per_group=max_streams_per_workspace)
        self.audit = (AuditTrail(AuditLog(registry.engine), capacity=audit_buffer,
                                 on_drop=self.metrics.audit_dropped.inc, key=audit_key(request_state_secret))
                      if audit else None)  # fmt: skip
        self.source = AgentSource(
            registry,
            client,
            poll_interval=poll_interval,
            require_keys=require_api_keys,
            metrics=self.metrics,
            state=state,
            key_list_max_age=key_list_max_age,
            listener=listener,
            changes=self.changes,
            connections=connections,
            agent_cache=agent_cache,
            key_cache=key_cache,
            audit=self.audit,
        )
        # `/readyz` asks each dependency through a bounded, cached probe: the registry, and Redis when used.
        self.probes = [probe or registry_probe(registry)]
        if not isinstance(self.source.state, MemoryStore):
            self.probes.append(Probe("redis", self.source.state.ping))
        self.source.reload()
        # Issuers' documents are small: their own client, with the same egress policy and a small answer limit.
        issuers = UpstreamClient(egress=client.egress, max_response_bytes=MAX_DOCUMENT_BYTES)
        verifier = TokenVerifier(issuers, limits=token_limits)
        self.auth = GatewayAuthenticator(self.source, verifier, public_url=public_url)
        self.connect: ConnectPages | None = None
        if vault_keys is not None and public_url:
            self.connect = ConnectPages(
                public_url=public_url, keys=vault_keys, connections=connections, state=self.source.state,
                verifier=verifier, client=client, policies=self.source.oauth_policy,
                connection_auth=self.source.connection_auth,
            )  # fmt: skip
        # Keys make what a caller sees depend on who asks: `cacheScope: private`.
        options = EndpointOptions(
            server_info=server_info or ServerInfo("crank-gateway"),
            cache_scope="private" if require_api_keys else "public",
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
            max_body_size=max_body_size,
            request_state_secret=request_state_secret,
            relay=relay,
            changes=self.changes,
        )
        admission = self.source.admission
        access = EndpointAccess(self.auth, metadata_url=self.auth.metadata_url, admit=admission.admit,
                                refused_now=admission.refused_now)  # fmt: skip
        endpoint = MCPEndpoint(self.source.provide, options, access if require_api_keys else None)
        self.endpoint = endpoint
        self._routes: dict[str, tuple[str, dict[str, str]]] = {}  # agent paths seen lately (`_agent_route`)
        self._durability_check: asyncio.Task[list[str]] | None = None

    def start(self) -> None:
        """Start watching the registry, and check (in the background: a state store that does not answer
        never delays the start) that the state store keeps idempotency records (docs/security.md)."""
        self.source.ensure_watching()
        self._durability_check = asyncio.get_running_loop().create_task(check_durability(self.source.state))

    async def stop(self) -> None:
        if self._durability_check is not None:
            self._durability_check.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._durability_check
        try:
            await self.source.aclose()
            await self.auth.verifier.client.aclose()
            await self.endpoint.aclose()
        finally:
            if self.audit is not None:  # what is still buffered is written before the process ends
                await asyncio.to_thread(self.audit.close)

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        """`crank.wire.asgi.EarlyAnswers` for `crank serve`'s HTTP protocol: the 429 of a request to an agent
        whose workspace's limit is known to be used up, written from the request's head without an ASGI call
        (about 50 µs of CPU a refusal against 65 through the app, most of the rest the kernel's receive and
        send: docs/benchmarks.md). None for any other request, at the cost of one check while no limit of any
        workspace is used up."""
        if not self.source.limiter.knows_full:
            return None
        child = self._agent_scope(scope)
        return None if child is None else self.endpoint.answer_early(child)

    def answers_early_now(self) -> bool:
        """`crank.wire.asgi.EarlyAnswersNow`: whether `answer_early` may answer anything (a limit is known full)."""
        return self.source.limiter.knows_full

    def _agent_scope(self, scope: Scope) -> Scope | None:
        """The scope of a request to an agent (`/mcp/v1/{workspace}/{agent}[/...]`) as the endpoint sees it: its
        root is the agent's, with the path's parameters. None for any other path."""
        path: str = scope.get("path", "")
        route = self._routes.get(path) or _agent_route(path, self._routes)
        if route is None:
            return None
        root, params = route
        outer = scope.get("root_path")
        return {**scope, "root_path": outer + root if outer else root, "path_params": params}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Routes by splitting the path: `/mcp/v1/{workspace}/{agent}[/tools|/call]`, `/metrics`, else 404.

        The hot path of every call, so no router: it cost about 8 % of a call's CPU (docs/benchmarks.md).
        """
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, startup=self.start, shutdown=self.stop)
            return
        child = self._agent_scope(scope)
        if child is not None:
            if scope["type"] == "http":
                await self.endpoint.http_app(child, receive, send)
            else:
                await self.endpoint(child, receive, send)
            return
        path = scope.get("path", "")
        if path.startswith(PROTECTED_RESOURCE_PATH) and scope["type"] == "http":
            response = await self._resource_metadata(scope, path, scope["method"])
        elif path.startswith(CONNECT_PATH + "/") and self.connect is not None and scope["type"] == "http":
            await self.connect(scope, receive, send)
            return
        elif path == "/metrics" and scope["type"] == "http":
            response = Response(self.metrics.exposition(), media_type=METRICS_CONTENT_TYPE)
        elif path == "/readyz" and scope["type"] == "http":
            response = await self.readiness()
        else:
            message = "No MCP endpoint here: MCP endpoints are at /mcp/v1/{workspace}/{agent}"
            response = JSONResponse({"error": {"code": "not_found", "message": message}}, 404)
        await response(scope, receive, send)

    async def _resource_metadata(self, scope: Scope, path: str, method: str) -> Response:
        """RFC 9728 documents, with CORS so that a browser-based client can read them: an agent's at the
        well-known path plus its resource's path (the public URL's own path, if any, included). None at the root:
        a server of many tenants has no one resource there, and clients try the agent's path first."""
        if method == "OPTIONS":
            return Response(status_code=204, headers={**_CORS, "access-control-allow-headers": "*"})
        if method not in ("GET", "HEAD"):
            return JSONResponse({"error": "method not allowed"}, 405, headers={"allow": "GET, HEAD, OPTIONS"})
        rest = path[len(PROTECTED_RESOURCE_PATH) :]
        agent_path = rest[rest.find(_MCP_PREFIX) :] if _MCP_PREFIX in rest else ""
        route = _agent_route(agent_path, {}) if agent_path else None
        document = None
        if route is not None and route[0] == agent_path.rstrip("/"):
            document = await self.auth.metadata(scope, route[1]["workspace"], route[1]["agent"])
        if document is None or metadata_path(document["resource"]) != path.rstrip("/"):
            return JSONResponse({"error": "no protected resource here"}, 404, headers=_CORS)
        return JSONResponse(document, headers={**_CORS, "cache-control": "max-age=300"})

    async def readiness(self) -> Response:
        """`/readyz`: 200 when the registry (and Redis, when used) answer and every served tool's secret
        references resolve on this host, else 503 naming the dependencies that do not answer and listing the
        missing secrets by workspace, agent and operation (references are names; values are never read out)."""
        unavailable = await _unavailable(self.probes)
        if unavailable:
            return JSONResponse({"status": "not_ready", "unavailable": unavailable}, 503)
        missing, refused = self.source.missing_secrets(), self.source.refused_targets()
        # A tenant's operations without a credential are its own to fix, not this replica's: listed, never a 503
        # (one tenant's import must not take every replica out of its load balancer).
        gaps = [gap.to_json() for gap in self.source.missing_credentials()]
        if not missing and not refused:
            return JSONResponse({"status": "ready", "missing_credentials": gaps} if gaps else {"status": "ready"})
        body: JSONObject = {"status": "not_ready"}
        if gaps:
            body["missing_credentials"] = gaps
        if missing:
            names = await run_in_threadpool(self.source.registry.operation_names)
            body["missing_secrets"] = [entry.to_json(names.get(entry.operation_id)) for entry in missing]
        if refused:
            body["refused_targets"] = [target.to_json() for target in refused]
        return JSONResponse(body, 503)


async def _unavailable(probes: list[Probe]) -> list[str]:
    """The names of the dependencies whose probe fails (asked at once: each waits at most its timeout). The
    details (a host, a port) go to the log, not to whoever asks `/readyz`."""
    problems = await asyncio.gather(*(probe.problem() for probe in probes))
    return [probe.name for probe, problem in zip(probes, problems, strict=True) if problem is not None]


class CrankServer:
    """`crank serve`: the admin API under `/admin/v1` (roles `admin`, `all`), the MCP endpoints under
    `/mcp/v1` and `/metrics` (roles `mcp`, `all`), and `/healthz` and `/readyz` in every role.

    Opens the registry of the settings (the SQLite file under the data folder by default) and brings
    its schema up to date before serving.
    """

    def __init__(
        self, settings: Settings, *, registry: Registry | None = None, egress: EgressPolicy | None = None
    ) -> None:
        """`egress`: what its upstream calls, URL imports and publishes may reach (the settings' by default)."""
        self.settings = settings
        self.egress = egress if egress is not None else settings.egress_policy()
        if registry is None:
            engine = open_engine(
                settings.registry_url,
                connect_timeout=settings.database_connect_timeout,
                statement_timeout=settings.database_statement_timeout,
            )
            migrate(engine)
            registry = Registry(engine, announce=change_announcer(settings.registry_url, settings.redis_url))
        self.registry = registry
        self.admin: ASGIApp | None = None
        self.gateway: GatewayService | None = None
        self.probe = registry_probe(registry)  # one for the admin API and /readyz
        self.console: Console | None = None
        self.sign_ins = SignInGuard()  # wrong admin tokens per address, through the admin API and the console alike
        if settings.role in ("admin", "all"):
            self.admin = AdminAPI(registry, token=settings.admin_secret(), probe=self.probe, egress=self.egress,
                                  guard=self.sign_ins)  # fmt: skip
        if settings.role in ("mcp", "all"):
            self.gateway = GatewayService(
                registry,
                client=settings.upstream_client(self.egress),
                poll_interval=settings.poll_interval,
                require_api_keys=settings.require_api_keys,
                state=open_state(settings.redis_url),
                key_list_max_age=settings.key_list_max_age,
                probe=self.probe,
                allowed_hosts=settings.host_names,
                allowed_origins=settings.origins,
                listener=change_listener(settings.registry_url, settings.redis_url) if settings.registry_push else None,
                max_body_size=settings.max_body_bytes,
                public_url=settings.public_url,
                request_state_secret=settings.signing_secret(),
                relay=RedisRelay(settings.redis_url) if settings.redis_url else None,
                # A tenth of the connections at most for one workspace's list-change streams: docs/security.md.
                max_streams_per_workspace=max(1, settings.max_connections // 10),
                token_limits=settings.token_limits(),
                agent_cache=settings.agent_cache_limits(),
                key_cache=settings.key_cache_limits(),
                vault_keys=settings.vault(),
                audit=settings.audit,
                audit_buffer=settings.audit_buffer,
            )
        if settings.role in ("admin", "all"):  # "try it" calls the gateway of this process, when it has one
            self.console = Console(registry, token=settings.admin_secret(), egress=self.egress,
                                   idle_timeout=settings.console_idle_timeout, mcp=self.gateway,
                                   metrics=self.gateway.metrics if self.gateway is not None else None,
                                   sso=self._single_sign_on(), public_url=settings.public_url,
                                   guard=self.sign_ins)  # fmt: skip

    def _single_sign_on(self) -> SingleSignOn | None:
        """The console's sign-in through an OpenID provider, when the settings name one."""
        settings = self.settings
        if settings.console_sso_issuer is None or settings.console_sso_client_id is None:
            return None
        assert settings.console_sso_client_secret is not None  # the settings give all three or none
        issuers = UpstreamClient(egress=self.egress, max_response_bytes=MAX_DOCUMENT_BYTES)
        return SingleSignOn(issuer=settings.console_sso_issuer, client_id=settings.console_sso_client_id,
                            client_secret=settings.console_sso_client_secret.get_secret_value(),
                            admins=frozenset(settings.console_sso_admins), verifier=TokenVerifier(issuers),
                            admin_token=settings.admin_secret())  # fmt: skip

    def answer_early(self, scope: Scope) -> EarlyAnswer | None:
        """The gateway's early answers (`GatewayService.answer_early`) for the paths `__call__` routes to it."""
        if self.gateway is None or not scope["path"].startswith(_MCP_PREFIX):
            return None
        return self.gateway.answer_early(scope)

    def answers_early_now(self) -> bool:
        """`crank.wire.asgi.EarlyAnswersNow`: the gateway's (`GatewayService.answers_early_now`)."""
        return self.gateway is not None and self.gateway.answers_early_now()

    def _start(self) -> None:
        if self.gateway is not None:
            self.gateway.start()
        if self.console is not None:
            self.console.start()

    async def _stop(self) -> None:
        try:
            if self.gateway is not None:
                await self.gateway.stop()
        finally:  # the console's provider connections and usage thread, whatever the gateway's stop did
            if self.console is not None:
                await self.console.aclose()

    def stopping(self) -> None:
        """The server stops taking connections: end the streams that would keep it waiting (listening clients
        reconnect elsewhere, or here when it is back); calls in flight finish."""
        if self.gateway is not None:
            self.gateway.changes.close_all()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, startup=self._start, shutdown=self._stop)
            return
        path: str = scope.get("path", "")
        if path == "/healthz":
            await JSONResponse({"status": "ok", "role": self.settings.role})(scope, receive, send)
        elif path == "/readyz" and self.gateway is None:  # the admin role needs only the registry
            unavailable = await _unavailable([self.probe])
            body = {"status": "not_ready", "unavailable": unavailable} if unavailable else {"status": "ready"}
            await JSONResponse(body, 503 if unavailable else 200)(scope, receive, send)
        elif path.startswith(("/admin/", "/console")) and type(refused := _refused_head(scope)) is Refused:
            await send_refusal(scope, send, refused)  # the MCP endpoints' own checks refuse it there
        elif self.admin is not None and path.startswith("/admin/"):
            await self.admin(scope, receive, send)
        elif self.console is not None and (path == "/console" or path.startswith("/console/")):
            await self.console(scope, receive, send)
        elif self.gateway is not None:
            await self.gateway(scope, receive, send)
        else:
            await JSONResponse({"error": {"code": "not_found", "message": "not served in this role"}}, 404)(
                scope, receive, send
            )
