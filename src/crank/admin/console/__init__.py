"""The web console: operators see, try and curate their agents in a browser (docs/console.md)."""

from crank.admin.console.app import PREFIX, Console

__all__ = ["PREFIX", "Console"]
