"""`crank serve --openapi SPEC`: one command from an API description to a served agent.

The document (a file or a URL) is imported into a workspace named after its title (or `--workspace`), in the
registry of the settings (the SQLite file in the data folder by default), which the command creates and records
as its own (`CREATED_BY`): it never writes into a workspace it did not create, whatever the document's title
says (a third-party document titled "Shop" must not take over tenant `shop`); every operation is bound into one agent,
`api`; the agent is published (direct tools, or discovery mode when they do not fit its token budget),
and the MCP URL, an API key and ready-to-use client setups are printed. The key is kept in the data
folder and printed again at the next start while the registry still knows it.

Started again with a newer version of the document, the import reports what changed and what it breaks
(`crank.admin.changes`) and the agent is published again; an unchanged document publishes nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from crank.admin.actions import (
    CheckAndLint,
    credential_gaps,
    give_scheme_credentials,
    kept_api_key,
    set_operations_auth,
)
from crank.admin.changes import ImportReport, reimport
from crank.admin.clients import client_setups
from crank.admin.documents import is_url, load_document
from crank.admin.lint import CatalogReport, catalog_report
from crank.admin.models import SLUG
from crank.exceptions import ConfigurationError, RegistryNotFoundError
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import EgressPolicy
from crank.gateway.secrets import ENV_ALLOW_VARIABLE, MissingCredential
from crank.registry import Registry
from crank.server import CrankServer
from crank.settings import Settings
from crank.sources.agents import build_catalog
from crank.types import JSONObject

__all__ = ["AGENT", "CREATED_BY", "InstantServer", "build_instant", "client_setups", "workspace_slug"]

AGENT = "api"
"""The slug of the one agent that serves the whole document."""
CREATED_BY = "crank serve --openapi"
"""What the registry records as the maker of the workspaces this command creates (`created_by`)."""

AgentMode = Literal["direct", "discovery"]
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


@dataclass
class InstantServer:
    """What `crank serve --openapi` built: the server to run, where its agent is, and how it was made."""

    server: CrankServer
    title: str
    workspace: str
    mcp_url: str
    api_key: str
    mode: AgentMode
    version: int
    catalog: CatalogReport
    changes: ImportReport
    key_file: Path
    gaps: Sequence[MissingCredential] = ()
    """Security schemes the operations require with no credential given: said in the banner."""

    def banner(self) -> str:
        """What the command prints before serving: the URL, the key, what is served and the client setups."""
        tools = len(self.changes.names)
        if self.mode == "discovery":
            served = f"discovery mode: a few fixed tools to search, read and call {tools} operations"
        else:
            fit = "over" if self.catalog.over_budget else "within"
            served = (
                f"{tools} tools, about {self.catalog.estimate:,} tokens ({fit} the budget of {self.catalog.budget})"
            )
        lines = [
            f"Serving {self.title!r} as {self.workspace}/{AGENT}, version {self.version}: {served}",
            *(f"  {line}" for line in self.changes.lines() if not self.changes.first),
            *(
                [f"Skipped:        {len(self.changes.skipped)} operation(s) Crank cannot call (--strict refuses them):"]
                if self.changes.skipped
                else []
            ),
            *(f"  {skipped.line()}" for skipped in self.changes.skipped),
            f"MCP endpoint:   {self.mcp_url}",
            f"API key:        {self.api_key}",
            f"Data folder:    {self.server.settings.data_dir} (the key is kept in {self.key_file.name})",
            *(
                f"Credentials:    {gap.scheme} ({gap.type}) is required by {len(gap.tools)} tool(s) and not given: "
                f"add --auth-scheme {gap.scheme}={'CLIENT_ID:' if gap.type == 'oauth2' else ''}env:NAME"
                + (
                    f" (one account), or let each user connect their own at {gap.connect_at} (docs/gateway.md, "
                    "Acting as the user)"
                    if gap.connect_at
                    else ""
                )
                for gap in self.gaps
            ),
            "",
            client_setups(self.mcp_url, self.api_key, name=self.workspace),
        ]
        return "\n".join(lines)


def build_instant(
    settings: Settings,
    spec: str,
    *,
    base_url: str | None = None,
    include: Sequence[str] | None = None,
    auth: JSONObject | None = None,
    credentials: Mapping[str, tuple[str, str | None]] | None = None,
    workspace: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    strict: bool = False,
) -> InstantServer:
    """Import `spec`, bind all of it into the agent `api`, publish it and get a key; nothing is served yet. An
    operation Crank cannot call is skipped and named in the banner (`strict`: the document is refused).

    `auth` (`{"type": "bearer", "secret": "env:NAME"}` or `{"type": "header", "name": ..., "secret": ...}`)
    goes into every operation's execution settings; `credentials` are the workspace's for the document's
    security schemes (`--auth-scheme`), and a scheme the operations require without one is said in the
    banner. Raises `ConfigurationError` (a `SpecError` for the
    document) with a message for the user.

    The addresses named here (`spec` when a URL, `base_url`) are allowed beside the settings' egress
    allowance, and a variable `auth` names is given to the workspace (crank.gateway.secrets), for this
    process: the operator named them on the command line."""
    named = [origin for origin in (_origin(spec), _origin(base_url)) if origin]
    egress = EgressPolicy([*settings.egress_allow.split(","), *named], listen=[settings.listen])
    document = load_document(spec, egress=egress)
    title = str((document.get("info") or {}).get("title") or "API")
    if workspace is not None and not re.fullmatch(SLUG, workspace):
        raise ConfigurationError(f"--workspace {workspace!r}: use lower-case letters, digits, '-' and '_' (at most 64)")
    slug = workspace or workspace_slug(title)
    # Before the server loads what an earlier run published: its secrets resolve at once.
    for reference in [
        str(auth.get("secret", "")) if auth else "",
        *(secret for secret, _ in (credentials or {}).values()),
    ]:
        _give_variable(slug, reference)
    server = CrankServer(settings, egress=egress)
    registry = server.registry
    key_file = settings.data_dir / f"{slug}-api-key"
    _own_workspace(registry, slug, title, key_file, named=workspace is not None)
    # The agent is published below, with every operation bound: not by the import.
    changes = reimport(registry, slug, "openapi", document, base_url=base_url, include=include, progress=progress,
                       republish=False, egress=egress, strict=strict)  # fmt: skip
    if auth is not None:
        set_operations_auth(registry, slug, changes.names, auth)
    if credentials:
        give_scheme_credentials(registry, slug, changes.names, dict(credentials))
    gaps = credential_gaps(registry, slug, changes.names)
    description = f"The operations of {title}, as its OpenAPI document describes them."
    draft: JSONObject = {"description": description, "bindings": [{"operation": name} for name in changes.names]}
    registry.put_agent(slug, AGENT, draft)
    runtime = registry.draft_runtime(slug, AGENT)
    catalog = catalog_report(runtime, catalog=build_catalog(runtime, UpstreamClient(egress=egress)))
    mode: AgentMode = "discovery" if catalog.over_budget else "direct"
    registry.put_agent(slug, AGENT, {**draft, "mode": mode})
    version = registry.publish(slug, AGENT, check=CheckAndLint(egress=egress), skip_unchanged=True)
    key = kept_api_key(registry, slug, key_file)
    if server.gateway is not None:  # built before the publish and the key: serve both from the first request
        server.gateway.source.reload()
    mcp_url = f"http://{settings.listen}/mcp/v1/{slug}/{AGENT}"
    return InstantServer(server, title, slug, mcp_url, key, mode, version, catalog, changes, key_file, gaps)


def _own_workspace(registry: Registry, slug: str, title: str, key_file: Path, *, named: bool) -> None:
    """Create the workspace as this command's own, or make sure an existing one is: else `ConfigurationError`.
    A workspace an earlier Crank's `serve --openapi` made (no `created_by` yet) is known by its key file in the
    data folder, and recorded as its own."""
    try:
        info = registry.workspace(slug)
    except RegistryNotFoundError:
        registry.create_workspace(slug, title, created_by=CREATED_BY)
        return
    if info.get("created_by") == CREATED_BY:
        return
    if info.get("created_by") is None and key_file.exists():
        registry.adopt_workspace(slug, CREATED_BY)
        return
    given = "the name given" if named else f"the name made from the document's title {title!r}"
    raise ConfigurationError(
        f"workspace {slug!r} ({given}) already exists and was not made by crank serve --openapi, which never writes "
        "into a workspace it did not create: choose another name with --workspace NAME"
    )


def workspace_slug(title: str) -> str:
    """A workspace slug from a document's title: `Mailchimp Marketing API` -> `mailchimp-marketing-api`."""
    slug = _NOT_SLUG.sub("-", title.lower()).strip("-")[:64].rstrip("-")
    return slug or "api"


def _origin(location: str | None) -> str | None:
    """host:port of an http(s) URL (an egress allowance), or None for a file or nothing."""
    if not location or not is_url(location):
        return None
    parts = urlsplit(location)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _give_variable(workspace: str, reference: str) -> None:
    """Give the variable of an `env:NAME` reference to the workspace, in this process's allowance."""
    kind, _, name = reference.partition(":")
    if kind == "env" and name:
        given = os.environ.get(ENV_ALLOW_VARIABLE, "")
        os.environ[ENV_ALLOW_VARIABLE] = f"{given},{workspace}:{name}" if given else f"{workspace}:{name}"
