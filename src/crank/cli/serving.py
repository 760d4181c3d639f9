"""`crank serve`, `crank demo`, `crank doctor` and `crank openrpc`: serving the gateway or any Crank ASGI app, and
what would fail where it serves."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from crank import __version__
from crank.cli.common import (
    INCLUDE_HELP,
    clear_errors,
    current_settings,
    echo_json,
    import_app,
    migrated_engine,
    named_settings_file,
    progress_bar,
    scheme_credentials,
    upstream_auth,
)
from crank.cli.group import main

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
@click.option("--include", multiple=True, help="With --openapi: " + INCLUDE_HELP)
@click.option("--strict", is_flag=True, help="With --openapi: refuse the document when an operation cannot be called "
              "(default: skip it and say why).")  # fmt: skip
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
    spec: str | None, base_url: str | None, workspace: str | None, include: tuple[str, ...], strict: bool,
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

    auth = upstream_auth(auth_bearer, auth_header)
    credentials = scheme_credentials(auth_schemes)
    if spec is None and (base_url or workspace or include or strict or auth or credentials):
        raise click.UsageError("--base-url, --workspace, --include, --strict and --auth-* go with --openapi")
    settings = current_settings(role=role, listen=listen, data_dir=data_dir, workers=workers)
    if spec is not None and settings.role == "admin":
        raise click.UsageError("--openapi serves an MCP endpoint: not with role admin")
    if spec is not None and settings.workers > 1:
        raise click.UsageError("--openapi runs one process: not with --workers (or CRANK_WORKERS) above 1")
    with clear_errors():
        sock = bind_listener(settings.host, settings.port)  # a busy port is reported before anything else
    with sock:  # closed however serving ends, an operator's fault included
        configure_logging(settings.log_format, settings.log_level)
        if app is not None:
            sys.path.insert(0, app_dir)
            # uvicorn imports `app` when it starts serving: in each worker, after the fork.
            _serve_workers(settings, lambda: serve_on(app, sock, settings.connection_limits(),
                                                      trusted_proxies=settings.trusted_proxies))  # fmt: skip
        elif spec is not None:
            _serve_openapi(settings, sock, spec, base_url, workspace, include, auth, credentials, strict)
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
        with clear_errors():
            serve_one()
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None


def _serve_crank(settings: Any, sock: Any) -> None:
    """One process of `crank serve`: a `CrankServer` whose early answers its HTTP protocol writes itself."""
    from crank.server import CrankServer
    from crank.wire.listen import serve_on

    with clear_errors():
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
    engine = migrated_engine(settings)
    try:
        if settings.role in ("admin", "all"):
            with clear_errors():
                settings.admin_secret()  # generated here once, not by each worker
        if settings.role in ("mcp", "all"):
            with clear_errors():
                _check_agents(settings, engine)
    finally:
        engine.dispose()


def _check_agents(settings: Any, engine: Any) -> None:
    """A line a problem of each served agent whose calls would fail here (`crank doctor`'s checks), when the
    registry holds few enough to read them all at start; else one line that says to run `crank doctor`."""
    import logging

    from crank.admin.doctor import START_CHECK_AGENTS, published_findings
    from crank.registry import Registry

    logger = logging.getLogger("crank.server")
    registry = Registry(engine)
    published = registry.published_versions()
    if len(published) > START_CHECK_AGENTS:
        logger.info("%d agents published: crank doctor checks what would fail their calls here", len(published))
        return
    for finding in published_findings(registry, settings.egress_policy(), published):
        logger.warning("%s", finding.line())


def _serve_openapi(
    settings: Any,
    sock: Any,
    spec: str,
    base_url: str | None,
    workspace: str | None,
    include: tuple[str, ...],
    auth: dict[str, str] | None,
    credentials: dict[str, Any],
    strict: bool,
) -> None:
    from crank.instant import build_instant
    from crank.wire.listen import serve_on

    with clear_errors(), progress_bar(f"importing {Path(spec).name}") as progress:
        instant = build_instant(settings, spec, base_url=base_url, include=include or None, auth=auth,
                                credentials=credentials, workspace=workspace, progress=progress,
                                strict=strict)  # fmt: skip
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


@main.command()
@click.argument("workspace", required=False)
def doctor(workspace: str | None) -> None:
    """Check the settings, the registry, Redis and every published agent (or WORKSPACE's) as `crank serve` would
    run them here; print each problem with its fix.

    Run it with the server's settings and environment (the data folder's crank.toml, the same CRANK_* variables
    and secrets). Exits with 1 when anything would fail."""
    from crank.admin.doctor import published_findings

    settings = current_settings()
    source = named_settings_file() or os.environ.get("CRANK_SETTINGS_FILE") or _data_folder_settings(settings)
    click.echo(f"settings: data folder {settings.data_dir}; settings file {source or 'none'}")
    engine = migrated_engine(settings)
    problems = 0
    try:
        from crank.registry import Registry

        registry = Registry(engine)
        published = [key for key in registry.published_versions() if workspace in (None, key[0])]
        click.echo(f"registry: {_safe_url(settings.registry_url)}, {len(published)} agents published")
        problems += _check_redis(settings.redis_url)
        with clear_errors():
            for finding in published_findings(registry, settings.egress_policy(), published):
                click.echo(finding.line())
                problems += 1
    finally:
        engine.dispose()
    if problems:
        click.echo(f"{problems} problem{'' if problems == 1 else 's'}: the calls they name fail until they are fixed",
                   err=True)  # fmt: skip
        raise click.exceptions.Exit(1)
    click.echo(f"no problems: {len(published)} agent{'' if len(published) == 1 else 's'} checked")


def _data_folder_settings(settings: Any) -> str | None:
    from crank.settings import DATA_FOLDER_SETTINGS

    file = settings.data_dir / DATA_FOLDER_SETTINGS
    return str(file) if file.is_file() else None


def _check_redis(url: str | None) -> int:
    """Whether Redis answers (1 problem when it does not), as the gateway's state store and announcements use it."""
    if url is None:
        click.echo("state store: in process (no CRANK_REDIS_URL): fine for one process")
        return 0
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        click.echo(f"state store: Redis at {_safe_url(url)} does not answer: {first}; fix: start it, or "
                   f"correct redis_url (CRANK_REDIS_URL)")  # fmt: skip
        return 1
    finally:
        client.close()
    click.echo(f"state store: Redis at {_safe_url(url)} answers")
    return 0


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@main.command()
@click.option("--listen", default="127.0.0.1:8000", show_default=True, help="host:port to serve on.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the demo's registry, key and admin token, kept between starts "
                   "(default: ~/.local/share/crank-demo).")  # fmt: skip
@click.option("--oauth", is_flag=True,
              help="Also run a local authorization server (Node and npm oidc-provider, from scripts/install --node) "
                   "whose access tokens the demo takes beside the API key.")  # fmt: skip
def demo(listen: str, data_dir: str | None, oauth: bool) -> None:
    """Serve the gateway with a demo workspace fronting the shipped demo REST API, and print how to connect.

    The CRANK_* settings apply, except the registry and state store: the demo keeps its own in its folder."""
    from crank.demo import run_demo

    with clear_errors():
        run_demo(listen, Path(data_dir) if data_dir else None, oauth=oauth)


@main.command()
@click.argument("app")
@click.option("--api-version", "version", default=None, help="API version (default: the app's first).")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for APP.")
def openrpc(app: str, version: str | None, app_dir: str) -> None:
    """Print the OpenRPC document of an RPCApp (or RPCService) given as module:attribute."""
    from crank.rpc import RPCApp

    target = import_app(app, app_dir)
    target = getattr(target, "rpc", target)  # an RPCService carries its RPCApp
    if not isinstance(target, RPCApp):
        raise click.BadParameter(f"{app} is a {type(target).__name__}, not an RPCApp or RPCService", param_hint="APP")
    chosen = version or target.versions[0]
    if chosen not in target.versions:
        raise click.BadParameter(f"unknown version {chosen!r}; the app has {', '.join(target.versions)}")
    echo_json(target.openrpc(chosen))
