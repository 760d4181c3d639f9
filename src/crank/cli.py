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
@click.argument("app", default="examples.quickstart:app")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for APP.")
@click.option("--log-level", default="info", show_default=True)
def serve(app: str, host: str, port: int, app_dir: str, log_level: str) -> None:
    """Serve an ASGI APP (module:attribute) built with Crank, for example an MCPEndpoint."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, app_dir=app_dir, log_level=log_level, access_log=False)


if __name__ == "__main__":  # python -m crank.cli
    main()
