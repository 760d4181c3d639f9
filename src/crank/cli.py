"""The `crank` command."""

from __future__ import annotations

import click

from crank import __version__

__all__ = ["main"]


@click.group()
@click.version_option(__version__, prog_name="crank")
def main() -> None:
    """Crank publishes existing APIs to LLM agents as MCP tools."""


@main.command()
@click.argument("app", default="examples.rpc_app:app")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for APP.")
@click.option("--log-level", default="info", show_default=True)
def serve(app: str, host: str, port: int, app_dir: str, log_level: str) -> None:
    """Serve an ASGI APP (module:attribute) built with Crank, for example an MCPEndpoint."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, app_dir=app_dir, log_level=log_level, access_log=False)


@main.command()
@click.argument("app")
@click.option("--api-version", "version", default=None, help="API version (default: the app's first).")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for APP.")
def openrpc(app: str, version: str | None, app_dir: str) -> None:
    """Print the OpenRPC document of an RPCApp (or RPCService) given as module:attribute."""
    import sys

    from uvicorn.importer import ImportFromStringError, import_from_string

    from crank import _json
    from crank.rpc import RPCApp

    sys.path.insert(0, app_dir)
    try:
        target = import_from_string(app)
    except ImportFromStringError as exc:
        raise click.BadParameter(str(exc), param_hint="APP") from None
    target = getattr(target, "rpc", target)  # an RPCService carries its RPCApp
    if not isinstance(target, RPCApp):
        raise click.BadParameter(f"{app} is a {type(target).__name__}, not an RPCApp or RPCService", param_hint="APP")
    chosen = version or target.versions[0]
    if chosen not in target.versions:
        raise click.BadParameter(f"unknown version {chosen!r}; the app has {', '.join(target.versions)}")
    click.echo(_json.dumps_pretty(target.openrpc(chosen)).decode())


if __name__ == "__main__":  # python -m crank.cli
    main()
