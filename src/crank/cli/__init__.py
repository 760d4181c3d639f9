"""The `crank` command.

`crank serve` runs the gateway (roles admin, mcp or all) from the settings (`CRANK_*` variables or a
settings file), or any Crank ASGI app given as module:attribute. The admin commands (workspace,
operation, import, agent, publish, versions, rollback, key, apply) act on the registry the settings
name, as the admin HTTP API does.

One module per group of commands, each registering itself on `main` (`crank.cli.group`) when imported here.
"""

from __future__ import annotations

from crank.cli import audit, keys, lint, registry, serving, vault  # noqa: F401  (their commands register on `main`)
from crank.cli.group import main

__all__ = ["main"]
