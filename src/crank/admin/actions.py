"""Admin actions shared by the admin HTTP API and the CLI: import, check, publish.

A publish compiles the agent's catalog first (schemas, mappings, adapters, translations), so a tool
that cannot be served fails the publish with a message naming it, and the previous version keeps
serving.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from crank.admin.documents import Imported, SkippedOperation
from crank.admin.lint import CatalogReport, Finding, ToolSize, catalog_report, checked_catalog, lint_runtime, tool_sizes
from crank.admin.openapi import import_openapi
from crank.admin.openrpc import import_openrpc
from crank.exceptions import ConfigurationError, RegistryNotFoundError
from crank.gateway.client import UpstreamClient
from crank.gateway.egress import EgressPolicy
from crank.gateway.secrets import MissingCredential, check_secret_references, missing_credentials, missing_secrets
from crank.registry import Registry, RuntimeView, key_digest, tool_name_of
from crank.registry.runtime import SchemeCredential, check_agent_media, execution_config_of, origin_of
from crank.sources.agents import build_catalog
from crank.types import JSONObject, JSONValue

__all__ = [
    "CheckAndLint",
    "ImportFormat",
    "ImportedSpecs",
    "PublishReport",
    "bind_tool",
    "check_runtime",
    "check_surface",
    "secret_findings",
    "imported_sizes",
    "imported_specs",
    "kept_api_key",
    "publish_agent",
    "unbind_tool",
]

ImportFormat = Literal["openapi", "openrpc"]


def check_runtime(runtime: RuntimeView) -> None:
    """Compile the catalog of a runtime view; raises `ConfigurationError` naming the tool that is wrong."""
    check_surface(runtime)
    checked_catalog(runtime)


def check_surface(runtime: RuntimeView) -> None:
    """What a publish refuses of an agent's documents and prompts beyond each one's own bounds (their sum)."""
    try:
        check_agent_media(runtime.agent.documents, runtime.agent.prompts)
    except ValueError as heavy:
        raise ConfigurationError(f"agent {runtime.workspace.slug}/{runtime.agent.slug}: {heavy}") from None


@dataclass(frozen=True)
class PublishReport:
    """A publish's version, and what the linter says of it (findings never block a publish; seed 004)."""

    version: int
    findings: list[Finding]
    catalog: CatalogReport
    tools: list[ToolSize]
    """Each tool's estimate after and before compaction, heaviest first."""

    def to_json(self) -> JSONObject:
        return {
            "version": self.version,
            "token_estimate": self.catalog.estimate,
            "token_budget": self.catalog.budget,
            "tools": [asdict(size) for size in self.tools],
            "findings": [asdict(finding) for finding in self.findings],
        }


class CheckAndLint:
    """A publish check that compiles each agent's catalog and keeps its lint findings for the report."""

    def __init__(
        self, uncompacted: dict[str, RuntimeView] | None = None, *, egress: EgressPolicy | None = None
    ) -> None:
        self.egress = egress
        """The policy the agents' targets are checked against (`CRANK_EGRESS_ALLOW` when None)."""
        self.findings: dict[str, list[Finding]] = {}
        self.catalogs: dict[str, CatalogReport] = {}
        self.sizes: dict[str, list[ToolSize]] = {}
        self.uncompacted = uncompacted or {}
        """Agents' views before compaction, by slug, for the sizes before and after."""

    def __call__(self, runtime: RuntimeView) -> None:
        egress = self.egress if self.egress is not None else EgressPolicy.from_environment()
        for tool in runtime.tools:  # a target address the policy refuses is never published, nor a token URL's
            egress.check_target(tool.target.url, where=f"tool {tool.tool_name!r}")
            auth = tool.execution_config.auth
            if auth is not None and auth.token_url is not None:
                egress.check_target(auth.token_url, where=f"tool {tool.tool_name!r}: token_url")
        check_surface(runtime)
        check_secret_references(runtime)
        catalog = build_catalog(
            runtime, UpstreamClient(egress=egress)
        )  # the check; the linter and the budget report reuse what it built
        slug = runtime.agent.slug
        self.findings[slug] = (
            lint_runtime(runtime, catalog=catalog) + secret_findings(runtime) + credential_findings(runtime)
        )
        self.catalogs[slug] = catalog_report(runtime, catalog=catalog)
        uncompacted = self.uncompacted.get(slug)
        if uncompacted is not None:
            self.sizes[slug] = tool_sizes(runtime, uncompacted, catalog=catalog)

    def report(self, slug: str, version: int) -> PublishReport:
        sizes = self.sizes.get(slug) or [ToolSize(name, tokens, tokens) for name, tokens in self.catalogs[slug].tools]
        return PublishReport(version, self.findings[slug], self.catalogs[slug], sizes)


def secret_findings(runtime: RuntimeView) -> list[Finding]:
    """A warning per secret reference that does not resolve on this host (a publish never blocks on it: the
    admin host may not hold the upstreams' secrets; the serving replicas must, and `/readyz` says so)."""
    return [
        Finding(
            missing.tool,
            "unresolved-secret",
            "warning",
            f"secret {missing.reference} does not resolve on this host: {missing.problem}.",
            "provide it on every host that serves this agent; until then its calls fail as configuration_error "
            "and /readyz reports not ready.",
        )  # fmt: skip
        for missing in missing_secrets(runtime)
    ]


def set_operations_auth(registry: Registry, workspace: str, names: Sequence[str], auth: JSONObject) -> None:
    """Give the named operations one upstream credential of their own (`--auth-bearer`, `--auth-header`)."""
    _set_execution(registry, workspace, names, "auth", auth)


def set_operations_confirmation(registry: Registry, workspace: str, names: Sequence[str], confirmation: str) -> None:
    """Give the named operations `execution_config.confirmation` (`--human-confirmation`: "human", each call asked
    of the user through their client, docs/safety.md)."""
    _set_execution(registry, workspace, names, "confirmation", confirmation)


def _set_execution(registry: Registry, workspace: str, names: Sequence[str], key: str, value: JSONValue) -> None:
    """One `execution_config` key of the named operation drafts set to `value`; those that have it already are
    left unwritten."""
    specs = registry.operations(workspace)
    updated = {}
    for name in names:
        execution = {**(specs[name].get("execution_config") or {}), key: value}
        if execution != specs[name].get("execution_config"):
            updated[name] = {**specs[name], "execution_config": execution}
    registry.put_operations(workspace, updated)


def credential_gaps(registry: Registry, workspace: str, names: Sequence[str]) -> list[MissingCredential]:
    """The security schemes the named operation drafts require with no credential: none of their own, and none
    of the workspace's that may serve any scheme they accept at their target. Said by the import, before any
    call."""
    given = registry.workspace_credentials(workspace)
    specs = registry.operations(workspace)
    tools = []
    for name in names:
        spec = specs.get(name) or {}
        target = str((spec.get("target") or {}).get("url", ""))
        config = execution_config_of(spec.get("execution_config"), where=f"operation {name!r}")
        if not any(r.scheme in given and given[r.scheme].opens(r, target) for r in config.requires):
            tools.append((name, target, config))
    return missing_credentials(workspace, tools)


def give_scheme_credentials(
    registry: Registry, workspace: str, names: Sequence[str], given: dict[str, tuple[str, str | None]]
) -> None:
    """`--auth-scheme SCHEME=REF`: each scheme's credential, bound to the origins the named operations that
    require it call (and their token URLs'). A scheme none of them requires is a `ConfigurationError`."""
    specs = registry.operations(workspace)
    for scheme, (secret, client_id) in given.items():
        origins: set[str] = set()
        for name in names:
            spec = specs.get(name) or {}
            config = execution_config_of(spec.get("execution_config"), where=f"operation {name!r}")
            for requirement in config.requires:
                if requirement.scheme == scheme:
                    target = str((spec.get("target") or {}).get("url", ""))
                    origins.update(origin_of(url) for url in (target, requirement.token_url) if url)
        if not origins:
            raise ConfigurationError(f"--auth-scheme {scheme}: no imported operation requires that scheme")
        credential = SchemeCredential(secret=secret, client_id=client_id, origins=tuple(sorted(origins)))
        registry.set_workspace_credential(workspace, scheme, credential)


def credential_findings(runtime: RuntimeView) -> list[Finding]:
    """A warning per security scheme the agent's operations require with no credential given: their calls would
    get the upstream's 401 (`upstream_unauthorized`); said before the first call, with how to give it."""
    tools = [(tool.tool_name, tool.target.url, tool.execution_config) for tool in runtime.tools]
    return [
        Finding(
            missing.tools[0],
            "missing-credential",
            "warning",
            f"the API requires {missing.scheme} ({missing.type}) of {len(missing.tools)} tool(s): "
            f"{', '.join(missing.tools)}; no credential is given for it.",
            missing.how() + ".",
        )
        for missing in missing_credentials(runtime.workspace.slug, tools)
    ]


def publish_agent(
    registry: Registry, workspace: str, agent: str, *, egress: EgressPolicy | None = None
) -> PublishReport:
    """Publish the agent's draft (compiled first: its targets under `egress`, `CRANK_EGRESS_ALLOW` when
    None); the report carries the linter's findings, budget included, and each tool's size before and
    after compaction."""
    check = CheckAndLint({agent: registry.draft_runtime(workspace, agent, compact=False)}, egress=egress)
    version = registry.publish(workspace, agent, check=check)
    return check.report(agent, version)


def imported_sizes(registry: Registry, workspace: str, names: list[str]) -> list[ToolSize]:
    """Each imported operation's estimate as a tool, after and before compaction by the workspace's and
    the operation's `compact` settings, heaviest first."""
    if not names:
        return []
    return tool_sizes(
        registry.operations_runtime(workspace, names), registry.operations_runtime(workspace, names, compact=False)
    )


@dataclass(frozen=True)
class ImportedSpecs:
    """Operation drafts from a document, by name, and the operations it left out (`SkippedOperation`)."""

    specs: dict[str, JSONObject]
    skipped: list[SkippedOperation]


def imported_specs(
    kind: ImportFormat,
    document: JSONObject,
    *,
    base_url: str | None = None,
    include: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    strict: bool = False,
) -> ImportedSpecs:
    """Operation drafts from an OpenAPI or OpenRPC document. Raises `SpecError` naming the place; an operation Crank
    cannot call is skipped (`strict`: refused)."""
    if kind == "openapi":
        imported = import_openapi(document, base_url=base_url, include=include, progress=progress, strict=strict)
    else:
        imported = Imported(import_openrpc(document, url=base_url, include=include, progress=progress), [])
    return ImportedSpecs({operation.name: operation.spec for operation in imported}, imported.skipped)


def bind_tool(registry: Registry, workspace: str, agent: str, binding: JSONObject) -> JSONObject:
    """Add a binding to the agent's draft, or replace the one with the same tool name in its place.
    A binding to an operation the workspace does not have is refused (`RegistryNotFoundError`)."""
    tool_name = tool_name_of(binding)
    registry.operation(workspace, str(binding.get("operation")))  # refused now, not at the next publish

    def edit(spec: JSONObject) -> JSONObject:
        bindings = list(spec.get("bindings", []))
        names = [tool_name_of(existing) for existing in bindings]
        if tool_name in names:
            bindings[names.index(tool_name)] = binding
        else:
            bindings.append(binding)
        return {**spec, "bindings": bindings}

    registry.edit_agent(workspace, agent, edit)
    return registry.agent(workspace, agent)


def unbind_tool(registry: Registry, workspace: str, agent: str, tool_name: str) -> None:
    def edit(spec: JSONObject) -> JSONObject:
        bindings = [binding for binding in spec.get("bindings", []) if tool_name_of(binding) != tool_name]
        if len(bindings) == len(spec.get("bindings", [])):
            raise RegistryNotFoundError(f"agent {workspace}/{agent} has no tool {tool_name!r}")
        return {**spec, "bindings": bindings}

    registry.edit_agent(workspace, agent, edit)


def kept_api_key(registry: Registry, workspace: str, path: Path) -> str:
    """The key kept in `path` when the registry still knows it, else a new key of the workspace, written
    there 0600 (by a rename, so a reader never sees half a key): a configured client keeps working from
    one start to the next."""
    if path.is_file():
        key = path.read_text().strip()
        if registry.api_key(key_digest(key)) is not None:
            return key
    key = registry.create_api_key(workspace)
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}-{secrets.token_hex(8)}")
    with os.fdopen(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
        file.write(key + "\n")
    fresh.replace(path)
    return key
