"""The admin HTTP API: JSON over HTTP for workspaces, operations, agents, bindings, imports, publishing,
versions, rollback and API keys, under `/admin/v1`, with its own OpenAPI document at
`/admin/v1/openapi.json`.

Every request except the OpenAPI document needs `Authorization: Bearer <admin token>` (compared in
constant time). Errors are `{"error": {"code", "message"}}` with a fitting status: 400 for a body
that is not JSON, 401 without the token, 404 for what does not exist, 409 for what exists already,
422 for a body or a definition that is wrong (the message names the place), 503 `registry_unavailable`
(with `Retry-After`) while the registry database cannot be reached or refuses: a request fails within the
readiness probe's timeout instead of waiting for the database.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Final

import yaml
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import IntegrityError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from crank import __version__, _json, _yaml
from crank.admin.actions import bind_tool, credential_gaps, publish_agent, unbind_tool
from crank.admin.apply import apply_catalog
from crank.admin.changes import reimport, republish_operation
from crank.admin.documents import is_url
from crank.admin.guard import SIGN_IN_RETRY_AFTER, TOO_MANY_ATTEMPTS, SignInGuard
from crank.admin.models import (
    AgentIn,
    ApiKeyIn,
    ApiKeyLimitsIn,
    BindingIn,
    CatalogFile,
    ImportIn,
    OperationIn,
    RollbackIn,
    WorkspaceIn,
    problems,
)
from crank.exceptions import AuthChallengeError, ConfigurationError, RegistryConflictError, RegistryNotFoundError
from crank.gateway.egress import EgressPolicy
from crank.registry import DATABASE_ERRORS, Registry, describe_database_error
from crank.registry.runtime import OAuthPolicy, SchemeCredential
from crank.registry.vault import Vault
from crank.telemetry import Probe
from crank.types import JSONObject, Scope
from crank.wire.asgi import header, send_response
from crank.wire.auth import Principal
from crank.wire.middleware import BearerAuthMiddleware

__all__ = ["AdminAPI", "registry_probe"]

PREFIX = "/admin/v1"
_OPENAPI_PATH = PREFIX + "/openapi.json"
_UNAUTHORIZED = "the admin API needs 'Authorization: Bearer <admin token>'"
Handler = Callable[["AdminAPI", Request, Any], Any]


class _HTTPError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class _Endpoint:
    method: str
    path: str
    summary: str
    handler: Handler
    body: type[BaseModel] | None = None
    status: int = 200


_RETRY_AFTER = 5


def _json_response(payload: Any, status: int = 200) -> Response:
    return Response(_json.dumps(payload), status, media_type="application/json")


def registry_probe(registry: Registry) -> Probe:
    """Whether the registry database answers a read (`crank.telemetry.Probe`: bounded, cached, one in flight)."""

    async def read() -> None:
        await run_in_threadpool(registry.generation)

    return Probe("registry", read, describe=describe_database_error)


class AdminAPI:
    """An ASGI app serving the admin API for one registry. `probe` checks the registry before each request
    (default: `registry_probe(registry)`; `crank serve` shares one with `/readyz`); `egress` says what URL
    imports may fetch and publishes may target (`CRANK_EGRESS_ALLOW` when None)."""

    def __init__(
        self,
        registry: Registry,
        *,
        token: str,
        probe: Probe | None = None,
        egress: EgressPolicy | None = None,
        guard: SignInGuard | None = None,
    ) -> None:
        """`guard`: what bounds wrong admin tokens per address (shared with the console; one of its own if None)."""
        if len(token) < 16:
            raise ConfigurationError("the admin token must be at least 16 characters")
        self.registry = registry
        self.probe = probe or registry_probe(registry)
        self.egress = egress if egress is not None else EgressPolicy.from_environment()
        self.guard = guard if guard is not None else SignInGuard()
        self._token = token.encode()
        routes = [Route(_OPENAPI_PATH, self._openapi, methods=["GET"])]
        routes += [Route(PREFIX + e.path, self._route(e), methods=[e.method]) for e in ENDPOINTS]
        # Every request but the OpenAPI document needs the admin token: checked around the whole app.
        self._app = BearerAuthMiddleware(
            Starlette(routes=routes, exception_handlers={HTTPException: _routing_error}),
            _AdminToken(self._token, self.guard),
            realm="crank-admin",
            message=_UNAUTHORIZED,
            refusal=_refusal,
            exempt=lambda scope: scope.get("path") == _OPENAPI_PATH,
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.guard.refused(scope) and header(scope, b"authorization") is not None:
            body = _json.dumps({"error": {"code": "too_many_attempts", "message": TOO_MANY_ATTEMPTS}})
            await send_response(send, 429, body, [(b"retry-after", b"%d" % SIGN_IN_RETRY_AFTER)])
            return
        await self._app(scope, receive, send)

    def _route(self, endpoint: _Endpoint) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                body = await _body(request, endpoint.body) if endpoint.body is not None else None
                problem = await self.probe.problem()
                if problem is not None:  # fail fast: a request would wait for the database's own timeouts
                    return _unavailable(problem)
                # The registry is synchronous (SQLAlchemy): run it off the event loop.
                result = await run_in_threadpool(endpoint.handler, self, request, body)
            except DATABASE_ERRORS as exc:
                return _unavailable(describe_database_error(exc))
            except _HTTPError as exc:
                return _error(exc.status, exc.code, exc.message)
            except RegistryNotFoundError as exc:
                return _error(404, "not_found", str(exc))
            except RegistryConflictError as exc:
                return _error(409, "conflict", str(exc))
            except IntegrityError:  # two writers at once (two publishes of one agent, say): the second loses
                return _error(409, "conflict", "a concurrent change got there first; repeat the request")
            except ConfigurationError as exc:
                return _error(422, "invalid_definition", str(exc))
            if endpoint.status == 204:
                return Response(status_code=204)
            return _json_response(result, endpoint.status)

        return handle

    async def _openapi(self, request: Request) -> Response:
        return _json_response(openapi_document())


ADMIN: Final = Principal(None, id="admin")
"""Who holds the admin token: every workspace's operator."""


class _AdminToken:
    """The admin API's `Authenticator`: the admin token, compared in constant time; a wrong one is the guard's."""

    def __init__(self, token: bytes, guard: SignInGuard) -> None:
        self._token = token
        self._guard = guard

    def authenticate(self, scope: Scope, token: str | None) -> Principal:
        if token is not None and hmac.compare_digest(token.encode(), self._token):
            return ADMIN
        if token is not None:
            self._guard.failed(scope, "the admin API")
        raise AuthChallengeError(_UNAUTHORIZED)

    async def verify(self, scope: Scope, token: str | None) -> Principal:
        raise AuthChallengeError(_UNAUTHORIZED)  # `authenticate` always knows


def _error(status: int, code: str, message: str) -> Response:
    return _json_response({"error": {"code": code, "message": message}}, status)


_ROUTING_ERRORS = {
    404: ("not_found", "no admin API endpoint at this path (see /admin/v1/openapi.json)"),
    405: ("method_not_allowed", "this path does not take this method"),
}


async def _routing_error(request: Request, exc: Exception) -> Response:
    """What the router refuses (no such path, another method) in the admin error shape, not Starlette's text."""
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        raise exc
    code, message = _ROUTING_ERRORS.get(exc.status_code, ("bad_request", exc.detail))
    response = _error(exc.status_code, code, message)
    response.headers.update(exc.headers or {})  # Allow, on a 405
    return response


def _unavailable(problem: str) -> Response:
    response = _error(503, "registry_unavailable", f"{problem}; retry later")
    response.headers["retry-after"] = str(_RETRY_AFTER)
    return response


def _refusal(scope: Scope, status: int, message: str) -> bytes:
    return _json.dumps({"error": {"code": "unauthorized", "message": message}})


async def _body(request: Request, model: type[BaseModel]) -> Any:
    raw = await request.body()
    try:
        if "yaml" in request.headers.get("content-type", ""):
            # Nested no deeper than a JSON body may be: what is stored must be written out again as JSON.
            data = _yaml.load(raw, max_depth=_json.MAX_DEPTH)
        else:
            data = _json.loads_bounded(raw) if raw else {}
    except (_json.JSONDepthError, _yaml.YAMLLimitError) as limit:
        raise _HTTPError(400, "bad_request", f"the body: {limit}") from None
    except (ValueError, yaml.YAMLError):
        raise _HTTPError(400, "bad_request", "the body is not valid JSON (or YAML with Content-Type yaml)") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _HTTPError(422, "invalid_body", problems(exc, whole="body")) from None


# -- handlers (run in a worker thread) ---------------------------------------------------------------


def _path(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    return value


def list_workspaces(api: AdminAPI, request: Request, body: None) -> Any:
    return {"workspaces": api.registry.workspaces()}


def put_workspace(api: AdminAPI, request: Request, body: WorkspaceIn) -> Any:
    slug = _path(request, "workspace")
    compact = body.compact.model_dump(exclude_none=True) if body.compact is not None else None
    api.registry.put_workspace(
        slug, body.name, body.default_language, body.token_budget, compact, body.limits, body.key_limits
    )
    return api.registry.workspace(slug)


def get_workspace(api: AdminAPI, request: Request, body: None) -> Any:
    return api.registry.workspace(_path(request, "workspace"))


def list_operations(api: AdminAPI, request: Request, body: None) -> Any:
    return {"operations": api.registry.operations(_path(request, "workspace"))}


def get_operation(api: AdminAPI, request: Request, body: None) -> Any:
    return api.registry.operation(_path(request, "workspace"), _path(request, "operation"))


def put_operation(api: AdminAPI, request: Request, body: OperationIn) -> Any:
    workspace, name = _path(request, "workspace"), _path(request, "operation")
    api.registry.put_operation(workspace, name, body.model_dump(exclude_none=True))
    return api.registry.operation(workspace, name)


def delete_operation(api: AdminAPI, request: Request, body: None) -> Any:
    api.registry.delete_operation(_path(request, "workspace"), _path(request, "operation"))


def republish(api: AdminAPI, request: Request, body: None) -> Any:
    """Publish every published agent that binds the operation, in one transaction."""
    workspace, operation = _path(request, "workspace"), _path(request, "operation")
    return republish_operation(api.registry, workspace, operation, egress=api.egress).to_json()


def import_document(api: AdminAPI, request: Request, body: ImportIn) -> Any:
    source: str | JSONObject | None = body.document if body.document is not None else body.url
    if source is None or (body.document is not None and body.url is not None):
        raise _HTTPError(422, "invalid_body", "give exactly one of 'url' or 'document'")
    if isinstance(source, str) and not is_url(source):
        raise _HTTPError(422, "invalid_body", "url: only http(s) URLs (the admin API does not read server files)")
    report = reimport(api.registry, _path(request, "workspace"), body.format, source, base_url=body.base_url,
                      include=body.include, republish=body.republish, dry_run=body.dry_run,
                      egress=api.egress, strict=body.strict)  # fmt: skip
    answer: JSONObject = report.to_json()
    if not body.dry_run:  # the schemes its operations require with no credential, said before any call
        gaps = credential_gaps(api.registry, _path(request, "workspace"), report.names)
        answer["missing_credentials"] = [gap.to_json() for gap in gaps]
    return answer


def list_agents(api: AdminAPI, request: Request, body: None) -> Any:
    return {"agents": api.registry.agents(_path(request, "workspace"))}


def get_agent(api: AdminAPI, request: Request, body: None) -> Any:
    return api.registry.agent(_path(request, "workspace"), _path(request, "agent"))


def put_agent(api: AdminAPI, request: Request, body: AgentIn) -> Any:
    workspace, slug = _path(request, "workspace"), _path(request, "agent")
    api.registry.put_agent(workspace, slug, body.model_dump(exclude_none=True))
    return api.registry.agent(workspace, slug)


def put_binding(api: AdminAPI, request: Request, body: BindingIn) -> Any:
    """Add or replace the binding whose tool name is in the path."""
    binding = {**body.model_dump(exclude_none=True), "tool_name": _path(request, "tool")}
    return bind_tool(api.registry, _path(request, "workspace"), _path(request, "agent"), binding)


def delete_binding(api: AdminAPI, request: Request, body: None) -> Any:
    unbind_tool(api.registry, _path(request, "workspace"), _path(request, "agent"), _path(request, "tool"))


def publish(api: AdminAPI, request: Request, body: None) -> Any:
    workspace, slug = _path(request, "workspace"), _path(request, "agent")
    return publish_agent(api.registry, workspace, slug, egress=api.egress).to_json()


def list_versions(api: AdminAPI, request: Request, body: None) -> Any:
    history = api.registry.version_history(_path(request, "workspace"), _path(request, "agent"))
    return {"versions": [{"version": v.version, "created_at": v.created_at, "current": v.current} for v in history]}


def rollback(api: AdminAPI, request: Request, body: RollbackIn) -> Any:
    workspace, slug = _path(request, "workspace"), _path(request, "agent")
    api.registry.rollback(workspace, slug, body.version)
    return {"version": body.version}


def create_api_key(api: AdminAPI, request: Request, body: ApiKeyIn) -> Any:
    info, key = api.registry.issue_api_key(_path(request, "workspace"), body.agents, limits=body.limits)
    return {"key": key, **asdict(info), "note": "Shown once: only its digest is stored."}


def list_api_keys(api: AdminAPI, request: Request, body: None) -> Any:
    return {"api_keys": [asdict(info) for info in api.registry.api_key_infos(_path(request, "workspace"))]}


def put_api_key_limits(api: AdminAPI, request: Request, body: ApiKeyLimitsIn) -> Any:
    info = api.registry.set_api_key_limits(_path(request, "workspace"), _path(request, "key"), body.limits)
    return asdict(info)


def delete_api_key(api: AdminAPI, request: Request, body: None) -> Any:
    api.registry.delete_api_key(_path(request, "workspace"), _path(request, "key"))


def get_oauth(api: AdminAPI, request: Request, body: None) -> Any:
    policy = api.registry.workspace_oauth_policy(_path(request, "workspace"))
    return {"oauth": None if policy is None else policy.model_dump(mode="json")}


def put_oauth(api: AdminAPI, request: Request, body: OAuthPolicy) -> Any:
    api.registry.set_workspace_oauth(_path(request, "workspace"), body)
    return {"oauth": body.model_dump(mode="json")}


def delete_oauth(api: AdminAPI, request: Request, body: None) -> Any:
    api.registry.set_workspace_oauth(_path(request, "workspace"), None)


def list_credentials(api: AdminAPI, request: Request, body: None) -> Any:
    given = api.registry.workspace_credentials(_path(request, "workspace"))
    return {"credentials": {scheme: credential.model_dump(exclude_none=True) for scheme, credential in given.items()}}


def put_credential(api: AdminAPI, request: Request, body: SchemeCredential) -> Any:
    api.registry.set_workspace_credential(_path(request, "workspace"), _path(request, "scheme"), body)
    return {"scheme": _path(request, "scheme"), **body.model_dump(exclude_none=True)}


def delete_credential(api: AdminAPI, request: Request, body: None) -> Any:
    api.registry.set_workspace_credential(_path(request, "workspace"), _path(request, "scheme"), None)


def list_connections(api: AdminAPI, request: Request, body: None) -> Any:
    """Users' connections to APIs (`crank.registry.vault`): whose, to which scheme, since when; never a token."""
    query = request.query_params
    vault = Vault(api.registry.engine, None)  # listing never decrypts
    workspace = _path(request, "workspace")
    api.registry.workspace(workspace)  # 404 for a workspace that does not exist
    entries = vault.entries(workspace, scheme=query.get("scheme"), subject=query.get("subject"))
    return {"connections": [entry.to_json() for entry in entries]}


def delete_connections(api: AdminAPI, request: Request, body: None) -> Any:
    """Revoke connections by scheme or user (`all=true`: every one of the workspace): their users are asked to
    connect again; every replica stops using them within `CONNECTION_RECHECK` seconds."""
    query = request.query_params
    scheme, subject = query.get("scheme"), query.get("subject")
    if not scheme and not subject and query.get("all") != "true":
        raise _HTTPError(422, "invalid_query", "say which connections: scheme, subject, or all=true")
    removed = Vault(api.registry.engine, None).delete(_path(request, "workspace"), scheme=scheme, subject=subject)
    return {"removed": removed}


def apply(api: AdminAPI, request: Request, body: CatalogFile) -> Any:
    locations = [location for s in body.sources for location in (s.openapi, s.openrpc) if location]
    if not all(is_url(location) for location in locations):
        raise _HTTPError(
            422, "invalid_body", "sources: only URLs through the admin API (it does not read server files)"
        )
    report = apply_catalog(api.registry, body, egress=api.egress)
    return {
        "workspace": report.workspace,
        "operations": report.operations,
        "agents": {
            slug: {"version": v, "published": new, "findings": [asdict(f) for f in report.findings.get(slug, [])]}
            for slug, (v, new) in report.versions.items()
        },
    }


_WS = "/workspaces/{workspace}"
_AGENT = _WS + "/agents/{agent}"
ENDPOINTS = (
    _Endpoint("GET", "/workspaces", "List workspaces", list_workspaces),
    _Endpoint("PUT", _WS, "Create or update a workspace", put_workspace, WorkspaceIn),
    _Endpoint("GET", _WS, "Show a workspace", get_workspace),
    _Endpoint("GET", _WS + "/operations", "List operation drafts", list_operations),
    _Endpoint("GET", _WS + "/operations/{operation}", "Show an operation draft", get_operation),
    _Endpoint(
        "PUT", _WS + "/operations/{operation}", "Create or replace an operation draft", put_operation, OperationIn
    ),  # fmt: skip
    _Endpoint("DELETE", _WS + "/operations/{operation}", "Delete an operation draft", delete_operation, status=204),
    _Endpoint(
        "POST", _WS + "/operations/{operation}/republish", "Publish every agent that binds the operation", republish
    ),  # fmt: skip
    _Endpoint("POST", _WS + "/imports", "Import operations from OpenAPI or OpenRPC", import_document, ImportIn),
    _Endpoint("GET", _WS + "/agents", "List agents", list_agents),
    _Endpoint("GET", _AGENT, "Show an agent draft", get_agent),
    _Endpoint("PUT", _AGENT, "Create or replace an agent draft", put_agent, AgentIn),
    _Endpoint("PUT", _AGENT + "/bindings/{tool}", "Bind an operation as a tool", put_binding, BindingIn),
    _Endpoint("DELETE", _AGENT + "/bindings/{tool}", "Remove a tool", delete_binding, status=204),
    _Endpoint("POST", _AGENT + "/publish", "Publish the draft as a new version", publish, status=201),
    _Endpoint("GET", _AGENT + "/versions", "List published versions", list_versions),
    _Endpoint("POST", _AGENT + "/rollback", "Serve an earlier version again", rollback, RollbackIn),
    _Endpoint("POST", _WS + "/api-keys", "Create an API key (shown once)", create_api_key, ApiKeyIn, status=201),
    _Endpoint("GET", _WS + "/api-keys", "List API keys (ids and scopes, never the keys)", list_api_keys),
    _Endpoint("DELETE", _WS + "/api-keys/{key}", "Revoke an API key by its id", delete_api_key, status=204),
    _Endpoint(
        "PUT",
        _WS + "/api-keys/{key}/limits",
        "Set an API key's rate limit and quota",
        put_api_key_limits,
        ApiKeyLimitsIn,
    ),  # fmt: skip
    _Endpoint("GET", _WS + "/oauth", "Show the workspace's OAuth policy (null: API keys only)", get_oauth),
    _Endpoint("PUT", _WS + "/oauth", "Take OAuth access tokens: issuers, audience, scopes", put_oauth, OAuthPolicy),
    _Endpoint("DELETE", _WS + "/oauth", "Take API keys only again", delete_oauth, status=204),
    _Endpoint("GET", _WS + "/credentials", "List the upstream credentials by security scheme", list_credentials),
    _Endpoint(
        "PUT",
        _WS + "/credentials/{scheme}",
        "Give a security scheme a credential (a reference)",
        put_credential,
        SchemeCredential,
    ),  # fmt: skip
    _Endpoint(
        "DELETE", _WS + "/credentials/{scheme}", "Take a scheme's credential away", delete_credential, status=204
    ),  # fmt: skip
    _Endpoint("GET", _WS + "/connections", "List users' connections to APIs (never a token)", list_connections),
    _Endpoint("DELETE", _WS + "/connections", "Revoke users' connections by scheme or subject", delete_connections),
    _Endpoint("POST", "/apply", "Apply a declarative catalog (JSON or YAML)", apply, CatalogFile),
)


def openapi_document() -> JSONObject:
    """The admin API's OpenAPI 3.1 document, built from the endpoint table and the pydantic models."""
    schemas: dict[str, Any] = {
        "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
            "code": {"type": "string"}, "message": {"type": "string"}}}}},
    }  # fmt: skip
    paths: dict[str, Any] = {}
    for endpoint in ENDPOINTS:
        operation: dict[str, Any] = {
            "operationId": endpoint.handler.__name__,
            "summary": endpoint.summary,
            "security": [{"adminToken": []}],
            "parameters": [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in _placeholders(endpoint.path)
            ],
            "responses": {
                str(endpoint.status): {"description": "Done."},
                "401": _error_response("No or wrong admin token."),
                "404": _error_response("Not found."),
                "422": _error_response("The body or the definition is wrong."),
                "503": _error_response("The registry database cannot be reached (registry_unavailable)."),
            },
        }
        if endpoint.body is not None:
            schema = endpoint.body.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(schema.pop("$defs", {}))
            schemas[endpoint.body.__name__] = schema
            ref = {"$ref": f"#/components/schemas/{endpoint.body.__name__}"}
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref}}}
        paths.setdefault(PREFIX + endpoint.path, {})[endpoint.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Crank admin API", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer"}},
        },
    }


def _placeholders(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def _error_response(description: str) -> JSONObject:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
