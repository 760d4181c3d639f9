"""Secret references that do not resolve on this host, found before the first call.

Operations name their upstream credentials by reference (`env:NAME`, `file:/path`); the serving process
reads them on the first call. This module checks them without keeping or showing any value: a publish
warns about the ones missing where it runs, and a serving replica reports them on `/readyz`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from crank.exceptions import ConfigurationError
from crank.gateway.adapters.http import check_secret_reference
from crank.registry.runtime import RuntimeView
from crank.types import JSONObject

__all__ = ["MissingSecret", "missing_secrets", "secret_problem"]


@dataclass(frozen=True, slots=True)
class MissingSecret:
    """A reference of one published tool's operation that does not resolve here: names, never values."""

    workspace: str
    agent: str
    tool: str
    operation_id: str
    reference: str
    problem: str

    def to_json(self, operation: str | None = None) -> JSONObject:
        """As `/readyz` lists it; `operation` is the operation's name when the caller knows it."""
        return {
            "workspace": self.workspace,
            "agent": self.agent,
            "operation": operation or self.operation_id,
            "tool": self.tool,
            "reference": self.reference,
            "problem": self.problem,
        }


def secret_problem(reference: str) -> str | None:
    """Why `reference` does not resolve on this host, or None when it does. The value is never read into
    the answer: for a file, only whether it can be read."""
    try:
        kind, name = check_secret_reference(reference, where="secret")
    except ConfigurationError as exc:
        return str(exc).removeprefix("secret: ")
    if kind == "env":
        return None if name in os.environ else f"environment variable {name!r} is not set"
    if not os.path.isfile(name) or not os.access(name, os.R_OK):
        return f"secret file {name!r} does not exist or cannot be read"
    return None


def missing_secrets(runtime: RuntimeView) -> list[MissingSecret]:
    """Every tool of the view whose operation's secret reference does not resolve on this host."""
    missing = []
    for tool in runtime.tools:
        auth = tool.execution_config.auth
        if auth is None:
            continue
        problem = secret_problem(auth.secret)
        if problem is not None:
            missing.append(
                MissingSecret(
                    runtime.workspace.slug, runtime.agent.slug, tool.tool_name, tool.operation_id, auth.secret, problem
                )  # fmt: skip
            )
    return missing
