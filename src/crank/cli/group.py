"""The `crank` command group: each command group of the package registers itself on `main`."""

from __future__ import annotations

import click

from crank import __version__
from crank.cli.common import Commands

__all__ = ["main"]


@click.group(cls=Commands)
@click.version_option(__version__, prog_name="crank")
@click.option("--settings", "settings_file", type=click.Path(dir_okay=False), help="Settings file (TOML or YAML).")
def main(settings_file: str | None) -> None:
    """Crank publishes existing APIs to LLM agents as MCP tools."""
