"""The `crank` command.

`crank serve` runs the gateway (roles admin, mcp or all) from the settings (`CRANK_*` variables or a
settings file), or any Crank ASGI app given as module:attribute. The admin commands (workspace,
operation, import, agent, publish, versions, rollback, key, apply) act on the registry the settings
name, as the admin HTTP API does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from crank import __version__, _json
from crank.exceptions import ConfigurationError, DependencyUnavailableError

__all__ = ["main"]


def _echo_json(value: Any) -> None:
    click.echo(_json.dumps_pretty(value).decode())


@contextmanager
def _clear_errors() -> Iterator[None]:
    """A wrong definition or setting, or an operational fault (the registry database or Redis cannot be
    reached), is a one-line (or one-per-problem) message and exit code 1, never a traceback."""
    try:
        yield
    except Exception as exc:
        message = _operational(exc)
        if message is None:
            raise
        raise click.ClickException(message) from None


def _operational(error: Exception) -> str | None:
    """The message of an error the operator must fix (not a bug in Crank), else None. The driver modules
    are looked at only when a command loaded them: `crank --version` imports neither."""
    if isinstance(error, ConfigurationError | DependencyUnavailableError):
        return str(error)
    if "sqlalchemy" in sys.modules:
        from crank.registry import DATABASE_ERRORS, describe_database_error

        if isinstance(error, DATABASE_ERRORS):
            return describe_database_error(error)
    if "redis" in sys.modules:
        import redis.exceptions

        if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return f"Redis cannot be reached: {first}"
    return None


class _Commands(click.Group):
    """Every command answers an operational fault in one line (`_clear_errors`), wherever it arises."""

    def invoke(self, ctx: click.Context) -> Any:
        with _clear_errors():
            return super().invoke(ctx)


def _settings(**overrides: Any) -> Any:
    from crank.settings import load_settings

    context = click.get_current_context()
    settings_file = context.find_root().params.get("settings_file")
    with _clear_errors():
        return load_settings(settings_file, **overrides)


def _egress() -> Any:
    """The settings' egress policy (`egress_allow` and `listen`, from the environment or the settings file):
    what imports by URL, publishes and checks may reach, as `crank serve` would."""
    return _settings().egress_policy()


def _migrated_engine(settings: Any) -> Any:
    """The settings' registry, its schema brought up to date: an unpooled engine (a command's few statements;
    nothing open left for a fork to inherit). A registry that cannot be reached is one line (`_clear_errors`)."""
    from crank.registry import migrate, open_engine

    with _clear_errors():
        engine = open_engine(
            settings.registry_url,
            pooled=False,
            connect_timeout=settings.database_connect_timeout,
            statement_timeout=settings.database_statement_timeout,
        )
        migrate(engine)
    return engine


def _registry() -> Any:
    from crank.registry import Registry
    from crank.registry.changes import change_announcer

    settings = _settings()
    engine = _migrated_engine(settings)
    return Registry(engine, announce=change_announcer(settings.registry_url, settings.redis_url))


def _read_definition(path: str) -> Any:
    import yaml

    from crank import _yaml

    try:
        return _yaml.load(Path(path).read_text())
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{path} is not valid JSON or YAML: {exc}") from None


@click.group(cls=_Commands)
@click.version_option(__version__, prog_name="crank")
@click.option("--settings", "settings_file", type=click.Path(dir_okay=False), help="Settings file (TOML or YAML).")
def main(settings_file: str | None) -> None:
    """Crank publishes existing APIs to LLM agents as MCP tools."""


# -- serving ---------------------------------------------------------------------------------------


@main.command()
@click.argument("app", required=False)
@click.option("--role", type=click.Choice(["admin", "mcp", "all"]), default=None, help="Gateway role [all].")
@click.option("--listen", default=None, help="host:port (default: CRANK_LISTEN or 127.0.0.1:8000).")
@click.option("--workers", type=int, default=None,
              help="Worker processes on the one port, each a full server [CRANK_WORKERS, 1].")  # fmt: skip
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for APP.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the SQLite registry and admin token [CRANK_DATA_DIR, ~/.local/share/crank].")  # fmt: skip
@click.option(
    "--openapi",
    "spec",
    default=None,
    metavar="SPEC",
    help="Serve this OpenAPI document (file or URL) at once as one agent, and print how to connect.",
)
@click.option("--base-url", default=None, help="With --openapi: the upstream base URL (default: the document's).")
@click.option("--workspace", "-w", "workspace", default=None,
              help="With --openapi: the workspace to serve it in [a slug of the document's title]; one this command "
              "made, or a new one.")  # fmt: skip
@click.option("--include", multiple=True, help="With --openapi: only these operations (glob, as for import).")
@click.option(
    "--auth-bearer",
    default=None,
    metavar="REF",
    help="With --openapi: the upstream's bearer token, by reference (env:NAME or file:/path).",
)
@click.option(
    "--auth-header",
    default=None,
    metavar="NAME=REF",
    help="With --openapi: a header carrying the upstream's secret, e.g. X-Api-Key=env:API_KEY.",
)
@click.option("--auth-scheme", "auth_schemes", multiple=True, metavar="SCHEME=REF",
              help="With --openapi: the credential of one of the document's security schemes (repeatable): "
              "SCHEME=env:NAME, or SCHEME=CLIENT_ID:env:NAME for OAuth 2 client credentials.")  # fmt: skip
def serve(
    app: str | None, role: str | None, listen: str | None, workers: int | None, app_dir: str, data_dir: str | None,
    spec: str | None, base_url: str | None, workspace: str | None, include: tuple[str, ...],
    auth_bearer: str | None, auth_header: str | None, auth_schemes: tuple[str, ...],
) -> None:  # fmt: skip
    """Serve the gateway, or an ASGI APP (module:attribute) built with Crank, such as an RPCService.

    With --openapi SPEC: import the document into the registry (SQLite in the data folder), publish all
    of it as one agent (direct tools, or discovery mode when they do not fit the token budget), and
    print the MCP URL, a key and client setups. Run it again after the API changed: the changes are
    reported and published.

    With --workers N (or CRANK_WORKERS), N processes answer on the one port, each a whole server: a worker
    that dies is started again, and SIGTERM or Ctrl+C stops them all gracefully."""
    from crank.telemetry import configure_logging
    from crank.wire.listen import bind_listener, serve_on

    auth = _upstream_auth(auth_bearer, auth_header)
    credentials = _scheme_credentials(auth_schemes)
    if spec is None and (base_url or workspace or include or auth or credentials):
        raise click.UsageError("--base-url, --workspace, --include and --auth-* go with --openapi")
    settings = _settings(role=role, listen=listen, data_dir=data_dir, workers=workers)
    if spec is not None and settings.role == "admin":
        raise click.UsageError("--openapi serves an MCP endpoint: not with role admin")
    if spec is not None and settings.workers > 1:
        raise click.UsageError("--openapi runs one process: not with --workers (or CRANK_WORKERS) above 1")
    with _clear_errors():
        sock = bind_listener(settings.host, settings.port)  # a busy port is reported before anything else
    with sock:  # closed however serving ends, an operator's fault included
        configure_logging(settings.log_format, settings.log_level)
        if app is not None:
            sys.path.insert(0, app_dir)
            # uvicorn imports `app` when it starts serving: in each worker, after the fork.
            _serve_workers(settings, lambda: serve_on(app, sock, settings.connection_limits(),
                                                      trusted_proxies=settings.trusted_proxies))  # fmt: skip
        elif spec is not None:
            _serve_openapi(settings, sock, spec, base_url, workspace, include, auth, credentials)
        else:
            _prepare_registry(settings)
            _announce(settings)
            _warn_of_workers_without_redis(settings)
            _serve_workers(settings, lambda: _serve_crank(settings, sock))


def _warn_of_workers_without_redis(settings: Any) -> None:
    if settings.workers > 1 and settings.redis_url is None and settings.role != "admin":
        import logging

        logging.getLogger("crank.server").warning(
            "%d workers without CRANK_REDIS_URL: idempotency records, confirmation tokens and rate-limit counts are "
            "kept per worker, so a repeat or a confirmation reaching another worker is not recognised and each "
            "worker allows a workspace, agent or key its whole rate limit and quota (docs/deployment.md)",
            settings.workers,
        )


def _serve_workers(settings: Any, serve_one: Callable[[], None]) -> None:
    """One process serves; more are forked from this one after the bind, supervised (crank.wire.workers)."""
    from crank.wire.workers import WORKERS_VARIABLE, run_workers

    if settings.workers == 1:
        os.environ[WORKERS_VARIABLE] = "1"
        serve_one()
        return
    code = run_workers(settings.workers, lambda: _in_worker(serve_one), liveness_timeout=settings.worker_timeout)
    if code:
        raise click.exceptions.Exit(code)


def _in_worker(serve_one: Callable[[], None]) -> None:
    """A worker's life: an operator's fault is its one line (then exit 1), as without workers."""
    try:
        with _clear_errors():
            serve_one()
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None


def _serve_crank(settings: Any, sock: Any) -> None:
    """One process of `crank serve`: a `CrankServer` whose early answers its HTTP protocol writes itself."""
    from crank.server import CrankServer
    from crank.wire.listen import serve_on

    with _clear_errors():
        server = CrankServer(settings)
    serve_on(
        server,
        sock,
        settings.connection_limits(),
        answer_early=server.answer_early,
        answers_early_now=server.answers_early_now,
        stopping=server.stopping,
        trusted_proxies=settings.trusted_proxies,
    )


def _prepare_registry(settings: Any) -> None:
    """Reach the registry and bring its schema up to date once, before any worker starts: an unreachable
    registry is one line and exit 1, and workers never race one another through the migrations. The engine
    is unpooled and disposed: nothing open is left to be inherited by a fork."""
    engine = _migrated_engine(settings)
    try:
        if settings.role in ("admin", "all"):
            with _clear_errors():
                settings.admin_secret()  # generated here once, not by each worker
    finally:
        engine.dispose()


def _upstream_auth(bearer: str | None, header: str | None) -> dict[str, str] | None:
    if bearer is not None and header is not None:
        raise click.UsageError("give --auth-bearer or --auth-header, not both")
    if bearer is not None:
        return {"type": "bearer", "secret": bearer}
    if header is not None:
        name, sep, reference = header.partition("=")
        if not sep or not name or not reference:
            raise click.BadParameter("expected NAME=REF, e.g. X-Api-Key=env:API_KEY", param_hint="--auth-header")
        return {"type": "header", "name": name, "secret": reference}
    return None


def _scheme_credentials(pairs: tuple[str, ...]) -> dict[str, tuple[str, str | None]]:
    """`--auth-scheme SCHEME=REF` (or `SCHEME=CLIENT_ID:REF`): each scheme's secret reference and client id, bound
    to origins once the import says which operations require the scheme (`give_scheme_credentials`)."""
    credentials: dict[str, tuple[str, str | None]] = {}
    for pair in pairs:
        scheme, equals, value = pair.partition("=")
        client_id = None
        if not value.startswith(("env:", "file:")):
            client_id, _, value = value.partition(":")
        if not equals or not scheme or not value.startswith(("env:", "file:")) or value in ("env:", "file:"):
            raise click.BadParameter(f"{pair!r}: expected SCHEME=env:NAME or SCHEME=CLIENT_ID:env:NAME",
                                     param_hint="--auth-scheme")  # fmt: skip
        credentials[scheme] = (value, client_id or None)
    return credentials


def _serve_openapi(
    settings: Any,
    sock: Any,
    spec: str,
    base_url: str | None,
    workspace: str | None,
    include: tuple[str, ...],
    auth: dict[str, str] | None,
    credentials: dict[str, Any],
) -> None:
    from crank.instant import build_instant
    from crank.wire.listen import serve_on

    with _clear_errors(), _progress_bar(f"importing {Path(spec).name}") as progress:
        instant = build_instant(settings, spec, base_url=base_url, include=include or None, auth=auth,
                                credentials=credentials, workspace=workspace, progress=progress)  # fmt: skip
    click.echo(instant.banner())
    sys.stdout.flush()
    serve_on(instant.server, sock, settings.connection_limits(), stopping=instant.server.stopping,
             trusted_proxies=settings.trusted_proxies)  # fmt: skip


def _announce(settings: Any) -> None:
    base = f"http://{settings.listen}"
    workers = f", {settings.workers} workers" if settings.workers > 1 else ""
    click.echo(f"crank {__version__}: role {settings.role}{workers}, registry {_safe_url(settings.registry_url)}")
    if settings.role in ("admin", "all"):
        where = "CRANK_ADMIN_TOKEN" if settings.admin_token else str(settings.data_dir / "admin-token")
        click.echo(f"admin API: {base}/admin/v1 (token in {where}; OpenAPI at {base}/admin/v1/openapi.json)")
    if settings.role in ("mcp", "all"):
        click.echo(f"MCP: {base}/mcp/v1/<workspace>/<agent>; metrics at {base}/metrics")


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@main.command()
@click.option("--listen", default="127.0.0.1:8000", show_default=True, help="host:port to serve on.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the demo's registry, key and admin token, kept between starts "
                   "(default: ~/.local/share/crank-demo).")  # fmt: skip
def demo(listen: str, data_dir: str | None) -> None:
    """Serve the gateway with a demo workspace fronting the shipped demo REST API, and print how to connect."""
    from crank.demo import run_demo

    with _clear_errors():
        run_demo(listen, Path(data_dir) if data_dir else None)


@main.command()
@click.argument("app")
@click.option("--api-version", "version", default=None, help="API version (default: the app's first).")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for APP.")
def openrpc(app: str, version: str | None, app_dir: str) -> None:
    """Print the OpenRPC document of an RPCApp (or RPCService) given as module:attribute."""
    from crank.rpc import RPCApp

    target = _import_app(app, app_dir)
    target = getattr(target, "rpc", target)  # an RPCService carries its RPCApp
    if not isinstance(target, RPCApp):
        raise click.BadParameter(f"{app} is a {type(target).__name__}, not an RPCApp or RPCService", param_hint="APP")
    chosen = version or target.versions[0]
    if chosen not in target.versions:
        raise click.BadParameter(f"unknown version {chosen!r}; the app has {', '.join(target.versions)}")
    _echo_json(target.openrpc(chosen))


def _import_app(app: str, app_dir: str) -> Any:
    from uvicorn.importer import ImportFromStringError, import_from_string

    sys.path.insert(0, app_dir)
    try:
        return import_from_string(app)
    except ImportFromStringError as exc:
        raise click.BadParameter(str(exc), param_hint="APP") from None


# -- the registry ----------------------------------------------------------------------------------


@main.group()
def workspace() -> None:
    """Workspaces (tenants)."""


@workspace.command("list")
def workspace_list() -> None:
    """List the workspaces."""
    _echo_json(_registry().workspaces())


@workspace.command("create")
@click.argument("slug")
@click.option("--name", default=None, help="Display name (default: the slug).")
@click.option("--language", default="en", show_default=True, help="Default language of tool texts.")
def workspace_create(slug: str, name: str | None, language: str) -> None:
    """Create a workspace, or update its name and language."""
    from crank.admin.models import WorkspaceRef

    with _clear_errors():
        checked = _validated(WorkspaceRef, {"slug": slug, "name": name or slug, "default_language": language})
        _registry().put_workspace(checked.slug, checked.name, checked.default_language)
    click.echo(f"workspace {slug} ready")


@workspace.command("oauth")
@click.argument("slug")
@click.option("--issuer", "issuers", multiple=True, help="An issuer whose access tokens the workspace trusts.")
@click.option("--audience", default=None, help="Public base URL of its endpoints (default: CRANK_PUBLIC_URL).")
@click.option("--credentials", type=click.Choice(["keys", "oauth", "both"]), default="both", show_default=True)
@click.option(
    "--sign-in", type=click.Choice(["always", "calls"]), default="always", show_default=True,
    help="calls: initialize and tools/list need no token; a call asks for one (401).",
)  # fmt: skip
@click.option("--agent-scope", "agent_scopes", multiple=True, metavar="AGENT=SCOPE[,SCOPE]",
              help="Scopes every request to an agent needs ('*' for every agent).")  # fmt: skip
@click.option("--tool-scope", "tool_scopes", multiple=True, metavar="TOOL=SCOPE[,SCOPE]",
              help="Scopes a call needs besides its agent's: a tool name, or read, write, destructive.")  # fmt: skip
@click.option("--introspection-client", default=None, metavar="CLIENT_ID=env:NAME",
              help="Introspect opaque tokens (RFC 7662) as this client, its secret by reference.")  # fmt: skip
@click.option("--sign-in-client", default=None, metavar="CLIENT_ID=env:NAME",
              help="Sign users in on the connect page as this client of the first --issuer (its secret by "
              "reference; redirect URI CRANK_PUBLIC_URL/connect/WORKSPACE/_/signed-in): users' own connections need "
              "it.")  # fmt: skip
@click.option("--off", is_flag=True, help="Take API keys only again.")
@click.option("--show", is_flag=True, help="Print the policy and change nothing.")
def workspace_oauth(slug: str, issuers: tuple[str, ...], audience: str | None, credentials: str, sign_in: str,
                    agent_scopes: tuple[str, ...], tool_scopes: tuple[str, ...], introspection_client: str | None,
                    sign_in_client: str | None, off: bool, show: bool) -> None:  # fmt: skip
    """Let a workspace take OAuth access tokens (docs/security.md, OAuth): the issuers it trusts, the scopes its
    agents and tools need. Replicas apply it when they reload, as after a publish."""
    from crank.registry.runtime import OAuthPolicy

    registry = _registry()
    with _clear_errors():
        if show:
            policy = registry.workspace_oauth_policy(slug)
            _echo_json(None if policy is None else policy.model_dump(mode="json", exclude_defaults=True))
            return
        if off:
            registry.set_workspace_oauth(slug, None)
            click.echo(f"workspace {slug}: API keys only")
            return
        data: dict[str, Any] = {"issuers": issuers, "audience": audience, "credentials": credentials,
                                "sign_in": sign_in, "agent_scopes": _scope_pairs(agent_scopes),
                                "tool_scopes": _scope_pairs(tool_scopes)}  # fmt: skip
        if introspection_client is not None:
            client_id, _, secret = introspection_client.partition("=")
            data["introspection"] = {"client_id": client_id, "client_secret": secret}
        if sign_in_client is not None:
            client_id, _, secret = sign_in_client.partition("=")
            first = issuers[0] if issuers else ""
            data["sign_in_client"] = {"issuer": first, "client_id": client_id, "client_secret": secret}
        policy = _validated(OAuthPolicy, data)
        registry.set_workspace_oauth(slug, policy)
    click.echo(f"workspace {slug}: takes {credentials} ({', '.join(policy.issuers)})")


@workspace.command("credential")
@click.argument("slug")
@click.argument("scheme", required=False)
@click.argument("reference", required=False)
@click.option(
    "--client-id", default=None, help="OAuth 2 client credentials: the client's id (the secret is REFERENCE)."
)
@click.option("--origin", "origins", multiple=True, metavar="URL",
              help="Where the credential may be sent: the API's origin (https://api.example.com), and for OAuth 2 "
              "the token URL's too (repeatable; at least one).")  # fmt: skip
@click.option("--token-exchange", "exchange_url", default=None, metavar="TOKEN_URL",
              help="Act as the signed-in user: exchange the user's access token at this token endpoint (RFC 8693) "
              "for one of the API; Crank's own client there is --client-id and REFERENCE.")  # fmt: skip
@click.option("--issuer", default=None, metavar="URL", help="With --token-exchange: the issuer of the users' tokens "
              "(one of the workspace's OAuth issuers, whose token endpoint TOKEN_URL is).")  # fmt: skip
@click.option("--audience", default=None, help="With --token-exchange: the API as its authorization server names it.")
@click.option("--resource", default=None, help="With --token-exchange: the API's URL (RFC 8707), instead of or "
              "beside --audience.")  # fmt: skip
@click.option("--scope", "scopes", multiple=True, help="With --token-exchange or --connect: a scope to ask for "
              "(repeatable).")  # fmt: skip
@click.option("--connect", is_flag=True, help="Act as the signed-in user through their own connection: each user "
              "connects their account once (OAuth authorization code with PKCE; Crank's own client there is "
              "--client-id and REFERENCE).")  # fmt: skip
@click.option("--authorization-url", default=None, metavar="URL", help="With --connect: the authorization endpoint, "
              "when the API description declares no authorization code flow (with --token-url).")  # fmt: skip
@click.option("--token-url", default=None, metavar="URL", help="With --connect: the token endpoint (with "
              "--authorization-url).")  # fmt: skip
@click.option("--remove", is_flag=True, help="Take the scheme's credential away.")
def workspace_credential(
    slug: str, scheme: str | None, reference: str | None, client_id: str | None, origins: tuple[str, ...],
    exchange_url: str | None, issuer: str | None, audience: str | None, resource: str | None, scopes: tuple[str, ...],
    connect: bool, authorization_url: str | None, token_url: str | None, remove: bool,
) -> None:  # fmt: skip
    """Give the workspace a credential for a security scheme of its API descriptions, by reference (env:NAME or
    file:/path: a token, an API key, user:password for basic, an OAuth 2 client secret). Every operation that
    requires the scheme and has no credential of its own takes it at its agents' next publish. With
    --token-exchange, the scheme's calls act as the signed-in user instead of one account (docs/gateway.md, Acting
    as the user). Without SCHEME, list the workspace's credentials (references, never values)."""
    from crank.registry.runtime import SchemeCredential

    registry = _registry()
    with _clear_errors():
        if scheme is None:
            _echo_json({name: given.model_dump(exclude_none=True)
                        for name, given in registry.workspace_credentials(slug).items()})  # fmt: skip
            return
        if remove:
            registry.set_workspace_credential(slug, scheme, None)
            click.echo(f"workspace {slug}: no credential for {scheme}")
            return
        if reference is None:
            raise click.UsageError("give the credential's REFERENCE (env:NAME or file:/path), or --remove")
        data: dict[str, Any] = {"secret": reference, "client_id": client_id, "origins": origins}
        if exchange_url is not None:
            data["exchange"] = {"issuer": issuer, "token_url": exchange_url, "audience": audience,
                                "resource": resource, "scopes": scopes}  # fmt: skip
            if connect:
                raise click.UsageError("a credential acts as the user through --token-exchange or --connect, not both")
        elif connect:
            data["connection"] = {"authorization_url": authorization_url, "token_url": token_url, "scopes": scopes}
        elif issuer or audience or resource or scopes:
            raise click.UsageError("--issuer, --audience, --resource and --scope describe a --token-exchange")
        if (authorization_url or token_url) and not connect:
            raise click.UsageError("--authorization-url and --token-url describe a --connect")
        credential = _validated(SchemeCredential, data)
        registry.set_workspace_credential(slug, scheme, credential)
    click.echo(f"workspace {slug}: {scheme} uses {reference} (publish its agents to apply it)")


def _scope_pairs(pairs: tuple[str, ...]) -> dict[str, list[str]]:
    scopes: dict[str, list[str]] = {}
    for pair in pairs:
        name, equals, listed = pair.partition("=")
        if not equals:
            raise click.BadParameter(f"{pair!r}: expected NAME=SCOPE[,SCOPE]")
        scopes.setdefault(name, []).extend(scope for scope in listed.split(",") if scope)
    return scopes


def _validated(model: Any, data: Any) -> Any:
    from pydantic import ValidationError

    from crank.admin.models import problems

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise click.ClickException(problems(exc, whole="value")) from None


@main.group()
def operation() -> None:
    """Operation drafts of a workspace."""


@operation.command("list")
@click.argument("workspace")
def operation_list(workspace: str) -> None:
    """List a workspace's operation drafts: name, protocol, method and URL."""
    with _clear_errors():
        operations = _registry().operations(workspace)
    for name, spec in operations.items():
        target = spec.get("target") or {}
        click.echo(f"{name}\t{spec.get('protocol')}\t{target.get('method', '')} {target.get('url', '')}")


@operation.command("show")
@click.argument("workspace")
@click.argument("name")
def operation_show(workspace: str, name: str) -> None:
    """Print an operation draft as JSON."""
    with _clear_errors():
        _echo_json(_registry().operation(workspace, name))


@operation.command("put")
@click.argument("workspace")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--republish", is_flag=True, help="Then publish every published agent that binds it.")
def operation_put(workspace: str, name: str, file: str, republish: bool) -> None:
    """Create or replace an operation draft from a JSON or YAML FILE."""
    from crank.admin.models import OperationIn

    spec = _validated(OperationIn, _read_definition(file)).model_dump(exclude_none=True)
    registry = _registry()
    with _clear_errors():
        registry.put_operation(workspace, name, spec)
    click.echo(f"operation {workspace}/{name} saved (draft)")
    if republish:
        _republish(registry, workspace, name)


@operation.command("republish")
@click.argument("workspace")
@click.argument("name")
def operation_republish(workspace: str, name: str) -> None:
    """Publish, in one transaction, every published agent that binds operation NAME (its draft as it is now)."""
    _republish(_registry(), workspace, name)


def _republish(registry: Any, workspace: str, name: str) -> None:
    from crank.admin.changes import republish_operation

    with _clear_errors():
        report = republish_operation(registry, workspace, name)
    for agent, version in report.published.items():
        click.echo(f"published {workspace}/{agent} version {version}")
        for finding in report.findings[agent]:
            click.echo(f"  {finding}")
    for agent in report.unchanged:
        click.echo(f"{workspace}/{agent}: unchanged")
    if not report.published and not report.unchanged:
        click.echo(f"no published agent binds {name}")


@operation.command("delete")
@click.argument("workspace")
@click.argument("name")
def operation_delete(workspace: str, name: str) -> None:
    """Delete an operation draft."""
    with _clear_errors():
        _registry().delete_operation(workspace, name)
    click.echo(f"operation {workspace}/{name} deleted")


@main.group("import")
def import_() -> None:
    """Import operations from an API description into a workspace's drafts."""


def _import(kind: str, spec: str, workspace: str, base_url: str | None, include: tuple[str, ...],
            republish: bool = True, dry_run: bool = False, auth: dict[str, str] | None = None,
            credentials: dict[str, tuple[str, str | None]] | None = None) -> None:  # fmt: skip
    from crank.admin.changes import reimport

    registry = _registry()
    with _clear_errors(), _progress_bar(f"importing {Path(spec).name}") as progress:
        report = reimport(registry, workspace, kind,  # type: ignore[arg-type]
                          spec, base_url=base_url, include=include or None, progress=progress,
                          republish=republish, dry_run=dry_run, egress=_egress())  # fmt: skip
    for line in report.lines():
        click.echo(line)
    for agent, findings in report.findings.items():
        click.echo(f"  {agent}: {len(findings)} lint finding(s) (crank lint {workspace} {agent})")
    counts = f"{len(report.added)} added, {len(report.removed)} removed, {len(report.changed)} changed"
    if dry_run:
        click.echo(f"dry run: {counts}, {len(report.unchanged)} unchanged; nothing written")
    elif not report.added and not report.removed and not report.changed:
        click.echo(f"{workspace}: no changes ({len(report.unchanged)} operations as imported before)")
    else:
        click.echo(f"imported {len(report.names)} operations into {workspace}: {counts} "
                   "(drafts; bind them to an agent and publish)")  # fmt: skip
    if report.breaking:
        click.echo(f"warning: {len(report.breaking)} bound tool(s) broken by this change", err=True)
    if not dry_run:
        from crank.admin.actions import credential_gaps, give_scheme_credentials, imported_sizes, set_operations_auth

        with _clear_errors():
            if auth is not None:
                set_operations_auth(registry, workspace, report.names, auth)
            if credentials:
                give_scheme_credentials(registry, workspace, report.names, credentials)
            if auth is not None or credentials:
                click.echo(f"credentials given: publish the agents that bind these operations to apply them "
                           f"(crank publish {workspace} AGENT)")  # fmt: skip
            _echo_sizes(imported_sizes(registry, workspace, [*report.added, *(c.operation for c in report.changed)]))
            for gap in credential_gaps(registry, workspace, report.names):
                click.echo(f"credentials: {gap.scheme} ({gap.type}) is required by {len(gap.tools)} operation(s) "
                           f"({', '.join(gap.tools[:5])}{', ...' if len(gap.tools) > 5 else ''}) and not given: "
                           f"{gap.how()}", err=True)  # fmt: skip


def _echo_sizes(sizes: list[Any]) -> None:
    """Each tool's estimate after and before compaction, heaviest first, then the median and the largest."""
    import statistics

    if not sizes:
        return
    click.echo("tokens per tool, compacted (docs/gateway.md, Compaction):")
    for size in sizes:
        click.echo(f"  {size}")
    after, before = [size.tokens for size in sizes], [size.before for size in sizes]
    click.echo(f"median {statistics.median(after):g} tokens (before {statistics.median(before):g}), "
               f"largest {max(after)} (before {max(before)})")  # fmt: skip


@contextmanager
def _progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label=label, file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        yield progress
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


@import_.command("openapi")
@click.argument("spec")
@click.option("--workspace", "-w", required=True)
@click.option("--base-url", default=None, help="Upstream base URL (default: the document's first server).")
@click.option("--include", multiple=True, help="Only operations whose name, operationId or tag matches (glob).")
@click.option("--republish/--no-republish", default=True, show_default=True,
              help="Publish again the agents that bind a changed or removed operation.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only report what would change; write nothing.")
@click.option(
    "--auth-bearer", default=None, metavar="REF", help="Every imported operation's bearer token, by reference."
)
@click.option("--auth-header", default=None, metavar="NAME=REF", help="A header carrying every operation's secret.")
@click.option("--auth-scheme", "auth_schemes", multiple=True, metavar="SCHEME=REF",
              help="The workspace's credential of one of the document's security schemes (repeatable): "
              "SCHEME=env:NAME, or SCHEME=CLIENT_ID:env:NAME for OAuth 2 client credentials.")  # fmt: skip
def import_openapi(
    spec: str, workspace: str, base_url: str | None, include: tuple[str, ...], republish: bool, dry_run: bool,
    auth_bearer: str | None, auth_header: str | None, auth_schemes: tuple[str, ...],
) -> None:  # fmt: skip
    """Import an OpenAPI 3.0/3.1 document (file or URL, JSON or YAML): one operation per path and method.

    Importing a newer version reports what was added, removed and changed, flags the changes that break
    bound tools, and republishes the agents concerned, in one transaction. The document's security schemes are
    read: each operation records what it requires, and a scheme without a credential is said before any call."""
    auth = _upstream_auth(auth_bearer, auth_header)
    _import("openapi", spec, workspace, base_url, include, republish, dry_run, auth, _scheme_credentials(auth_schemes))


@import_.command("openrpc")
@click.argument("spec")
@click.option("--workspace", "-w", required=True)
@click.option("--url", "base_url", default=None, help="JSON-RPC endpoint URL (default: the document's server).")
@click.option("--include", multiple=True, help="Only methods whose name matches (glob).")
@click.option("--republish/--no-republish", default=True, show_default=True,
              help="Publish again the agents that bind a changed or removed operation.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only report what would change; write nothing.")
def import_openrpc(
    spec: str, workspace: str, base_url: str | None, include: tuple[str, ...], republish: bool, dry_run: bool
) -> None:
    """Import an OpenRPC document (file or URL): one jsonrpc operation per method (reported as for openapi)."""
    _import("openrpc", spec, workspace, base_url, include, republish, dry_run)


@main.group()
def agent() -> None:
    """Agents: curated toolsets bound to operations."""


@agent.command("list")
@click.argument("workspace")
def agent_list(workspace: str) -> None:
    """List a workspace's agents."""
    with _clear_errors():
        _echo_json(_registry().agents(workspace))


@agent.command("show")
@click.argument("workspace")
@click.argument("slug")
def agent_show(workspace: str, slug: str) -> None:
    """Print an agent draft (description, bindings) as JSON."""
    with _clear_errors():
        _echo_json(_registry().agent(workspace, slug))


@agent.command("put")
@click.argument("workspace")
@click.argument("slug")
@click.argument("file", type=click.Path(dir_okay=False))
def agent_put(workspace: str, slug: str, file: str) -> None:
    """Create or replace an agent draft (description, bindings) from a JSON or YAML FILE."""
    from crank.admin.models import AgentIn

    spec = _validated(AgentIn, _read_definition(file)).model_dump(exclude_none=True)
    with _clear_errors():
        _registry().put_agent(workspace, slug, spec)
    click.echo(f"agent {workspace}/{slug} saved (draft)")


@agent.command("bind")
@click.argument("workspace")
@click.argument("slug")
@click.argument("operation_name")
@click.option("--tool-name", default=None, help="Default: the operation's name.")
@click.option("--title", default=None)
@click.option("--description", default=None)
def agent_bind(
    workspace: str, slug: str, operation_name: str, tool_name: str | None, title: str | None, description: str | None
) -> None:
    """Bind OPERATION_NAME as a tool of the agent (creating the agent if needed)."""
    from crank.admin.actions import bind_tool
    from crank.admin.models import BindingIn
    from crank.exceptions import RegistryNotFoundError

    data = {"operation": operation_name, "tool_name": tool_name, "title": title, "description": description}
    binding = _validated(BindingIn, data).model_dump(exclude_none=True)
    registry = _registry()
    with _clear_errors():
        registry.operation(workspace, operation_name)  # no such operation: refused before the agent is made
        try:
            registry.agent(workspace, slug)
        except RegistryNotFoundError:
            registry.put_agent(workspace, slug, {"bindings": []})
        bind_tool(registry, workspace, slug, binding)
    click.echo(f"bound {operation_name} as {tool_name or operation_name} in {workspace}/{slug} (draft)")


@agent.command("mode")
@click.argument("workspace")
@click.argument("slug")
@click.argument("mode", type=click.Choice(["direct", "discovery"]))
def agent_mode(workspace: str, slug: str, mode: str) -> None:
    """Serve the agent's operations as tools (direct) or through three discovery tools (discovery)."""
    with _clear_errors():
        _registry().edit_agent(workspace, slug, lambda spec: {**spec, "mode": mode})
    click.echo(f"agent {workspace}/{slug} mode {mode} (draft; publish to serve it)")


@agent.command("unbind")
@click.argument("workspace")
@click.argument("slug")
@click.argument("tool_name")
def agent_unbind(workspace: str, slug: str, tool_name: str) -> None:
    """Remove the tool TOOL_NAME from the agent's draft."""
    from crank.admin.actions import unbind_tool

    with _clear_errors():
        unbind_tool(_registry(), workspace, slug, tool_name)
    click.echo(f"removed {tool_name} from {workspace}/{slug} (draft)")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
def publish(workspace: str, agent_slug: str) -> None:
    """Publish an agent's draft as a new version (served within a second, no restart)."""
    from crank.admin.actions import publish_agent

    with _clear_errors():
        report = publish_agent(_registry(), workspace, agent_slug, egress=_egress())
    click.echo(f"published {workspace}/{agent_slug} version {report.version}")
    _echo_catalog_line(report.catalog)
    for size in report.tools:
        click.echo(f"  {size}")
    for finding in report.findings:  # never blocking: `crank lint` is the gate for CI
        click.echo(f"  {finding}")
    if report.catalog.over_budget:
        from crank.admin.lint import DISCOVERY_HINT

        click.echo(f"warning: over the token budget ({report.catalog.estimate} > {report.catalog.budget}); "
                   f"consider discovery mode ({DISCOVERY_HINT})", err=True)  # fmt: skip


def _echo_catalog_line(catalog: Any) -> None:
    click.echo(f"  catalog: about {catalog.estimate} of {catalog.budget} tokens")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
def versions(workspace: str, agent_slug: str) -> None:
    """List an agent's published versions; * marks the one served."""
    with _clear_errors():
        history = _registry().version_history(workspace, agent_slug)
    for info in history:
        click.echo(f"{'*' if info.current else ' '} {info.version}\t{info.created_at}")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
@click.argument("version", type=click.IntRange(min=1))
def rollback(workspace: str, agent_slug: str, version: int) -> None:
    """Serve an earlier published VERSION again."""
    with _clear_errors():
        _registry().rollback(workspace, agent_slug, version)
    click.echo(f"{workspace}/{agent_slug} now serves version {version}")


@main.group()
def vault() -> None:
    """The token vault: users' connections to APIs, encrypted (CRANK_VAULT_KEYS)."""


@vault.command("key")
def vault_key() -> None:
    """Print a new vault key (32 random bytes, base64): keep it where a reference of CRANK_VAULT_KEYS names it."""
    from crank.registry.vault import new_vault_key

    click.echo(new_vault_key())


def _vault() -> Any:
    from crank.registry.vault import Vault

    settings = _settings()
    keys = settings.vault()
    if keys is None:
        raise click.UsageError("CRANK_VAULT_KEYS is not set: give the vault's keys (`crank vault key` makes one)")
    return Vault(_migrated_engine(settings), keys)


@vault.command("check")
def vault_check() -> None:
    """Check that CRANK_VAULT_KEYS holds every key the vault's rows are encrypted with."""
    store = _vault()
    store.check()
    click.echo(f"vault: {len(store.entries())} entries, every one readable (current key {store.keys.current})")


@vault.command("rotate")
def vault_rotate() -> None:
    """Re-encrypt every row under the current (first) key of CRANK_VAULT_KEYS; then older keys may go."""
    store = _vault()
    store.check()
    click.echo(f"vault: {store.rotate()} entries re-encrypted with key {store.keys.current}")


@main.group()
def connection() -> None:
    """Users' own connections to APIs (listed and revoked without their tokens)."""


def _connections() -> Any:
    from crank.registry.vault import Vault

    settings = _settings()
    return Vault(_migrated_engine(settings), None)  # listing and removing never decrypt


@connection.command("list")
@click.argument("workspace", required=False)
@click.option("--scheme", default=None, help="Only this security scheme's connections.")
@click.option("--subject", default=None, help="Only this user's (their subject at the identity provider).")
def connection_list(workspace: str | None, scheme: str | None, subject: str | None) -> None:
    """List connections: whose, to which scheme, since when (never a token)."""
    _echo_json([entry.to_json() for entry in _connections().entries(workspace, scheme=scheme, subject=subject)])


@connection.command("remove")
@click.argument("workspace")
@click.option("--scheme", default=None, help="Only this security scheme's connections.")
@click.option("--subject", default=None, help="Only this user's.")
@click.option("--all", "everyone", is_flag=True, help="Every connection of the workspace (with no other filter).")
def connection_remove(workspace: str, scheme: str | None, subject: str | None, everyone: bool) -> None:
    """Revoke connections: their users are asked to connect again on their next call (every replica stops using
    them within 30 s). Their tokens are not revoked at the API's authorization server."""
    if scheme is None and subject is None and not everyone:
        raise click.UsageError("say which: --scheme, --subject, or --all")
    removed = _connections().delete(workspace, scheme=scheme, subject=subject)
    click.echo(f"workspace {workspace}: {removed} connection(s) removed")


@main.group()
def key() -> None:
    """Workspace API keys for the MCP endpoints."""


_RATE_HELP = "Rate limit of the key's tool calls: CALLS/SECONDS (100/60: 100 calls per 60 s window)."
_QUOTA_HELP = "Quota of the key's tool calls: CALLS/PERIOD, the period hour, day or month (UTC): 10000/day."


def _key_limits(rate: str | None, quota: str | None) -> Any:
    """`--rate` and `--quota` as `Limits` (None for neither); a wrong one is a usage error naming it."""
    from pydantic import ValidationError

    from crank.registry.runtime import Limits

    data: dict[str, Any] = {}
    for option, value, second in (("rate", rate, "window"), ("quota", quota, "period")):
        if value is not None:
            calls, slash, per = value.partition("/")
            if not slash or not calls.strip().isdigit():
                raise click.BadParameter(f"{value!r}: expected CALLS/{second.upper()}", param_hint=f"--{option}")
            data[option] = {"calls": int(calls), second: per.strip()}  # the model reads "60" as 60.0
    try:
        return Limits.model_validate(data) if data else None
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise click.BadParameter(f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


@key.command("create")
@click.argument("workspace")
@click.option("--agent", "agents", multiple=True, help="Limit the key to this agent (repeatable).")
@click.option("--rate", help=_RATE_HELP)
@click.option("--quota", help=_QUOTA_HELP)
def key_create(workspace: str, agents: tuple[str, ...], rate: str | None, quota: str | None) -> None:
    """Create a key (printed once; only its digest is stored). Without --rate and --quota, the key's tool
    calls are held to its workspace's key_limits, if any."""
    limits = _key_limits(rate, quota)
    with _clear_errors():
        info, key = _registry().issue_api_key(workspace, agents or None, limits=limits)
    click.echo(key)
    click.echo(f"id {info.id} (for `crank key delete {workspace} {info.id}`)", err=True)


@key.command("revoke")
@click.argument("api_key")
def key_revoke(api_key: str) -> None:
    """Revoke a key you have (by the key itself)."""
    with _clear_errors():
        _registry().revoke_api_key(api_key)
    click.echo("revoked")


@key.command("list")
@click.argument("workspace")
def key_list(workspace: str) -> None:
    """List a workspace's keys: ids, dates, agents and own limits (never the keys)."""
    with _clear_errors():
        infos = _registry().api_key_infos(workspace)
    for info in infos:
        agents = ",".join(info.agents) if info.agents is not None else "*"
        limits = f"  {_json.dumps(info.limits).decode()}" if info.limits else ""  # none: the workspace's key_limits
        click.echo(f"{info.id}  {info.created_at}  {agents}{limits}")


@key.command("limits")
@click.argument("workspace")
@click.argument("key_id")
@click.option("--rate", help=_RATE_HELP)
@click.option("--quota", help=_QUOTA_HELP)
def key_limits(workspace: str, key_id: str, rate: str | None, quota: str | None) -> None:
    """Set a key's own rate limit and quota (by its id); with neither option, it has its workspace's
    key_limits again. Replicas apply it when they reload, as after a publish."""
    limits = _key_limits(rate, quota)
    with _clear_errors():
        info = _registry().set_api_key_limits(workspace, key_id, limits)
    click.echo(f"{info.id}: {_json.dumps(info.limits).decode() if info.limits else 'the workspace key_limits'}")


@key.command("delete")
@click.argument("workspace")
@click.argument("key_id")
def key_delete(workspace: str, key_id: str) -> None:
    """Revoke a key by its id (from `crank key list`), as the admin API's DELETE does."""
    with _clear_errors():
        _registry().delete_api_key(workspace, key_id)
    click.echo("revoked")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def apply(file: str) -> None:
    """Apply a declarative catalog FILE (YAML): create or update, then publish what changed."""
    from crank.admin.apply import apply_catalog, load_catalog_file

    with _clear_errors():
        catalog = load_catalog_file(file)
        registry = _registry()
        with _progress_bar("importing") as progress:
            report = apply_catalog(registry, catalog, base_dir=Path(file).parent, progress=progress, egress=_egress())
    click.echo(f"workspace {report.workspace}: {len(report.operations)} operations")
    for slug, (version, new) in report.versions.items():
        click.echo(f"  agent {slug}: version {version}{' (published)' if new else ' (unchanged)'}")
        for finding in report.findings.get(slug, []):
            click.echo(f"    {finding}")


# -- seed 004: lint and budget --------------------------------------------------------------------


@main.command()
@click.argument("workspace", required=False)
@click.argument("agents", nargs=-1)
@click.option("--app", default=None, help="Lint an in-process app's MCP tools instead (module:attribute).")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for --app.")
@click.option("--budget", type=click.IntRange(min=1), default=None, help="Token budget (default: configured, 4096).")
@click.option("--strict", is_flag=True, help="Exit with 1 on warnings too (an agent over its budget, say).")
def lint(
    workspace: str | None, agents: tuple[str, ...], app: str | None, app_dir: str, budget: int | None, strict: bool
) -> None:
    """Check agents (their drafts: what a publish would serve) against seed 004's checklist.

    Exits with 1 when any finding is an error (with --strict: any finding at all), so it can gate a team's CI.
    Going over the token budget is a warning, as seed 004 says. A draft that cannot be built at all is one
    finding of its agent; the other agents are still linted."""
    from crank.admin.lint import lint_draft

    if app is not None:
        results = _lint_app(app, app_dir, budget)
    elif workspace is None:
        raise click.UsageError("give a WORKSPACE (and optionally AGENTS), or --app module:attribute")
    else:
        registry = _registry()
        with _clear_errors():
            slugs = agents or tuple(agent["slug"] for agent in registry.agents(workspace))
            results = {slug: lint_draft(registry, workspace, slug, budget=budget) for slug in slugs}
    errors = 0
    for name, findings in results.items():
        errors += sum(strict or finding.severity == "error" for finding in findings)
        click.echo(f"{name}: {len(findings)} finding(s)")
        for finding in findings:
            click.echo(f"  {finding}")
    if errors:
        raise click.ClickException(f"{errors} {'finding' if strict else 'error'}(s)")


def _lint_app(app: str, app_dir: str, budget: int | None) -> dict[str, Any]:
    """Each MCP endpoint of an RPCService (path and API version), linted as one catalog."""
    from crank.admin.lint import lint_catalog
    from crank.sources.rpc import RPCSource

    service = _import_app(app, app_dir)
    results: dict[str, Any] = {}
    if hasattr(service, "build"):
        service.build()
    for path, config in getattr(service, "mcp", {}).items():
        for version in service.rpc.versions:
            source = RPCSource(service.rpc, config, version)
            every_role = frozenset(role for method in source.methods for role in method.roles)
            catalog = source.catalog_for(every_role)  # every tool some caller can see
            results[f"{path} ({version})"] = lint_catalog(catalog, name=path, budget=budget)[0]
    if not results:
        raise click.BadParameter(f"{app} has no MCP endpoints (an RPCService with mcp=... is expected)")
    return results


@main.command()
@click.argument("workspace")
def catalog(workspace: str) -> None:
    """Each agent's token estimate against its budget, heaviest tools first, each with its size before
    compaction (drafts: the next publish).

    An agent whose draft cannot be built is reported as such and the others still are; the exit code
    is then 1."""
    from crank.admin.lint import catalog_report, tool_sizes, unbuildable

    registry = _registry()
    broken = 0
    with _clear_errors():
        for agent in registry.agents(workspace):
            try:
                runtime = registry.draft_runtime(workspace, agent["slug"])
                report = catalog_report(runtime)
                sizes = tool_sizes(runtime, registry.draft_runtime(workspace, agent["slug"], compact=False))
            except ConfigurationError as exc:
                broken += 1
                click.echo(f"{agent['slug']}: cannot be built\n  {unbuildable(exc)}")
                continue
            hint = f"crank agent mode {workspace} {agent['slug']} discovery"
            flag = f"  OVER BUDGET (or serve it in discovery mode: {hint})" if report.over_budget else ""
            click.echo(f"{agent['slug']}: about {report.estimate} of {report.budget} tokens{flag}")
            for size in sizes:
                click.echo(f"  {size}")
    if broken:
        raise click.ClickException(f"{broken} agent(s) cannot be built")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
def check(workspace: str, agent_slug: str) -> None:
    """Call the agent's read-only tools (or each operation's sample_arguments) against the real upstreams and
    report answers that drift from the output schema (drafts: the next publish). Exit code 1 on any drift
    or error."""
    import asyncio

    from crank.admin.check import check_agent

    registry = _registry()
    with _clear_errors():
        results = asyncio.run(check_agent(registry, workspace, agent_slug, egress=_egress()))
    for result in results:
        click.echo(str(result))
    failed = sum(result.status in ("drift", "error") for result in results)
    if failed:
        raise click.ClickException(f"{failed} tool(s) drifted or failed")


if __name__ == "__main__":  # python -m crank.cli
    main()
