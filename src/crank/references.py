"""Secrets by reference for the server itself: `env:NAME` (the variable's value) or `file:/path` (the file's
content, stripped). A workspace's references for its upstreams are checked against what it may use
(`crank.gateway.secrets`); these are the operator's own (the vault's keys, an in-process endpoint's introspection
client), read as they are."""

from __future__ import annotations

import os
from pathlib import Path

from crank.exceptions import ConfigurationError

__all__ = ["read_reference"]


def read_reference(reference: str) -> str:
    """The value `reference` names; `ConfigurationError` saying why when it does not resolve (never a value)."""
    kind, _, name = reference.partition(":")
    if kind == "env" and name:
        value = os.environ.get(name)
        if value is None:
            raise ConfigurationError(f"{reference!r}: the environment variable {name!r} is not set")
        return value
    if kind == "file" and name:
        try:
            return Path(name).read_text().strip()
        except OSError as exc:
            raise ConfigurationError(f"cannot read {name!r}: {exc.strerror}") from None
    raise ConfigurationError(f"{reference!r} does not resolve (env:NAME or file:/path)")
