"""Secret references: which ones an operation may name, their values when called, and the ones that do
not resolve on this host.

Operations name their upstream credentials by reference (`env:NAME`, `file:/path`), never by value;
the serving process reads them on the first call. Whoever may define operations is not the operator,
so a reference must be one the operator gave to the operation's workspace:

- `env:NAME`: the variable is listed for the workspace in `CRANK_SECRET_ENV_ALLOW` (`shop:SHOP_TOKEN`),
  or starts with a prefix given to the workspace in `CRANK_SECRET_ENV_PREFIX` (`shop:SHOP_`); entries are
  comma-separated. A variable that more than one workspace's entries match belongs to none (one
  workspace never reads another's), and Crank's own `CRANK_*` variables are never a secret;
- `file:/path`: the file lies in the workspace's own folder of a secrets folder, `<folder>/<workspace>/`
  (`CRANK_SECRET_DIRS`, `:`-separated, /run/secrets and /var/run/secrets by default).

Nothing is allowed by default. A refused reference fails a publish naming the tool, and a call as
`configuration_error`; neither message, nor any log line, carries a value. `missing_secrets` lists
the references that do not resolve here, for a publish's warnings and `/readyz`.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from crank.exceptions import ConfigurationError, ToolConfigurationError
from crank.registry.runtime import ExecutionConfig, RuntimeView, origin_of
from crank.types import JSONObject

__all__ = [
    "MISSING_SECRET_MESSAGE",
    "SecretValue",
    "ENV_ALLOW_VARIABLE",
    "ENV_PREFIX_VARIABLE",
    "SECRET_DIRS_VARIABLE",
    "MissingSecret",
    "check_secret_reference",
    "check_secret_references",
    "missing_secrets",
    "resolve_secret",
    "secret_problem",
]

logger = logging.getLogger("crank.gateway")

MISSING_SECRET_MESSAGE: Final = (
    "The tool cannot call its upstream: a credential it needs is not configured on this server."
)
ENV_ALLOW_VARIABLE = "CRANK_SECRET_ENV_ALLOW"
ENV_PREFIX_VARIABLE = "CRANK_SECRET_ENV_PREFIX"
SECRET_DIRS_VARIABLE = "CRANK_SECRET_DIRS"
DEFAULT_SECRET_DIRS = ("/run/secrets", "/var/run/secrets")


def check_secret_reference(
    reference: str, *, workspace: str, where: str, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """(kind, name) of a reference the workspace may use, checked without reading it; else a
    `ConfigurationError` saying why (names only)."""
    environ = os.environ if environ is None else environ
    kind, _, name = reference.partition(":")
    if kind == "env" and name:
        if name.upper().startswith("CRANK_"):
            raise ConfigurationError(f"{where}: Crank's own settings ({name}) cannot be an upstream secret")
        owners = _owners(name, environ)
        if owners != {workspace}:
            raise ConfigurationError(
                f"{where}: environment variable {name!r} is not given to workspace {workspace!r}"
                + (" alone" if workspace in owners else "")
                + f" (the operator lists it in {ENV_ALLOW_VARIABLE} as '{workspace}:{name}', or gives the workspace "
                f"a prefix in {ENV_PREFIX_VARIABLE}; docs/gateway.md, Upstream credentials)"
            )
        return kind, name
    if kind == "file" and name:
        path = Path(name)
        folders = [folder for folder in environ.get(SECRET_DIRS_VARIABLE, ":".join(DEFAULT_SECRET_DIRS)).split(":")
                   if folder]  # fmt: skip
        own = [str(Path(folder) / workspace) for folder in folders]
        if not workspace or not path.is_absolute() or not any(_inside(path, Path(folder)) for folder in own):
            raise ConfigurationError(
                f"{where}: secret files of workspace {workspace!r} must be in one of {own} ({SECRET_DIRS_VARIABLE}), "
                f"got {name!r}"
            )
        return kind, name
    raise ConfigurationError(f"{where}: a secret is 'env:NAME' or 'file:/path', got {reference!r}")


def check_secret_references(runtime: RuntimeView) -> None:
    """At publish (and lint): a reference the workspace may not use is a `ConfigurationError` naming the
    tool. Only there: a serving replica whose allowances differ compiles the tool anyway, fails its calls
    as configuration_error and lists the reference in `missing_secrets`."""
    for tool in runtime.tools:
        auth = tool.execution_config.auth
        if auth is not None:
            check_secret_reference(auth.secret, workspace=runtime.workspace.slug, where=f"tool {tool.tool_name!r}")


def _owners(name: str, environ: Mapping[str, str]) -> set[str]:
    """The workspaces whose `CRANK_SECRET_ENV_ALLOW` or `CRANK_SECRET_ENV_PREFIX` entries match `name`."""
    owners = set()
    for variable, matches in ((ENV_ALLOW_VARIABLE, str.__eq__), (ENV_PREFIX_VARIABLE, str.startswith)):
        for entry in environ.get(variable, "").split(","):
            workspace, _, given = entry.strip().partition(":")
            if workspace and given and matches(name, given):
                owners.add(workspace)
    return owners


def _inside(path: Path, folder: Path) -> bool:
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(folder)]) == os.path.realpath(folder)


def resolve_secret(reference: str, *, workspace: str, where: str) -> str:
    """The value of a reference the workspace may use (checked again: the operator may have withdrawn it
    since the version was built). Refused, unset or unreadable: a `ConfigurationError` naming it."""
    kind, name = check_secret_reference(reference, workspace=workspace, where=where)
    if kind == "env":
        value = os.environ.get(name)
        if value is None:
            raise ConfigurationError(f"{where}: environment variable {name!r} is not set")
        return value
    try:
        return Path(name).read_text().strip()
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot read secret file {name!r}: {exc.strerror}") from None


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


def secret_problem(reference: str, workspace: str) -> str | None:
    """Why `reference` does not resolve on this host for `workspace`, or None when it does. The value is
    never read into the answer: for a file, only whether it can be read."""
    try:
        kind, name = check_secret_reference(reference, workspace=workspace, where="secret")
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
        problem = secret_problem(auth.secret, runtime.workspace.slug)
        if problem is not None:
            missing.append(
                MissingSecret(
                    runtime.workspace.slug, runtime.agent.slug, tool.tool_name, tool.operation_id, auth.secret, problem
                )  # fmt: skip
            )
    return missing


@dataclass(frozen=True, slots=True)
class MissingCredential:
    """A security scheme the API description requires of some served operations, with no credential given."""

    workspace: str
    scheme: str
    type: str
    tools: tuple[str, ...]
    origins: tuple[str, ...] = ()
    """Where the tools' calls (and an OAuth 2 token request) go: what the credential must be bound to."""
    connect_at: str | None = None
    """The description's authorization code flow (its authorization URL): each user may connect their own account
    there instead of one account for all (`--connect`)."""

    def how(self) -> str:
        """The exact setting that gives it: the workspace's credential for the scheme, then a publish."""
        oauth2 = self.type == "oauth2"
        scheme = shlex.quote(self.scheme)
        where = "".join(f" --origin {shlex.quote(origin)}" for origin in self.origins)
        given = f"{scheme} env:NAME" + (" --client-id CLIENT_ID" if oauth2 else "") + where
        option = f"{scheme}=" + ("CLIENT_ID:env:NAME" if oauth2 else "env:NAME")
        how = (f"crank workspace credential {shlex.quote(self.workspace)} {given}, then publish (or --auth-scheme "
               f"{option} on crank import openapi or crank serve --openapi)")  # fmt: skip
        if self.connect_at is not None:
            how += (f"; or, to act as each user through their own account (OAuth authorization code at "
                    f"{self.connect_at}): crank workspace credential {shlex.quote(self.workspace)} {scheme} env:NAME "
                    f"--client-id CLIENT_ID --connect{where}")  # fmt: skip
        return how

    def to_json(self) -> JSONObject:
        found: JSONObject = {"workspace": self.workspace, "scheme": self.scheme, "type": self.type,
                             "tools": list(self.tools), "origins": list(self.origins), "how": self.how()}  # fmt: skip
        if self.connect_at is not None:
            found["connect_at"] = self.connect_at
        return found


def missing_credentials(workspace: str, tools: Iterable[tuple[str, str, ExecutionConfig]]) -> list[MissingCredential]:
    """The schemes that (tool name, target URL, execution config) triples require and have no credential for: a
    tool with no `auth` whose description requires credentials (its first alternative names the scheme to give),
    unless the header it would carry is one the tool forwards from its client."""
    grouped: dict[tuple[str, str], tuple[list[str], set[str], set[str]]] = {}
    for name, target, config in tools:
        if config.auth is None and config.requires:
            first = config.requires[0]
            if first.type == "header" and first.name.lower() in {header.lower() for header in config.forward_headers}:
                continue  # the client sends the key itself
            names, origins, flows = grouped.setdefault((first.scheme, first.type), ([], set(), set()))
            names.append(name)
            origins.update(origin_of(url) for url in (target, first.token_url) if url)
            if first.authorization_code is not None:
                flows.add(first.authorization_code.authorization_url)
    return [MissingCredential(workspace, scheme, kind, tuple(names), tuple(sorted(origins)), min(flows, default=None))
            for (scheme, kind), (names, origins, flows) in grouped.items()]  # fmt: skip


class SecretValue:
    """A secret reference of a published operation, read on first use and kept; a reference that does not resolve
    fails each call as `configuration_error`, with a warning line naming it (never its value). `check`: why a
    value cannot be sent the way its kind sends it (a cookie's rules, say), or None."""

    def __init__(
        self, reference: str, *, workspace: str, where: str, check: Callable[[str], str | None] | None = None
    ) -> None:
        self.reference = reference
        self._check = check
        self._workspace = workspace
        self._where = where
        self._value: str | None = None

    def value(self) -> str:
        if self._value is None:
            try:
                value = resolve_secret(self.reference, workspace=self._workspace, where=self._where)
                problem = _line_break(value) or (self._check(value) if self._check is not None else None)
                if problem is not None:
                    raise ConfigurationError(f"{self._where}: the secret {self.reference!r} {problem}")
            except ConfigurationError as exc:  # the operator's to fix: a warning without a traceback
                logger.warning("%s", exc, extra={"secret_reference": self.reference})
                raise ToolConfigurationError(MISSING_SECRET_MESSAGE) from None
            self._value = value
        return self._value


def _line_break(value: str) -> str | None:
    return "contains a line break or a control character" if re.search(r"[\x00-\x1f\x7f]", value) else None
