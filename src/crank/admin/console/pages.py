"""What each console page shows, read from the registry with the same actions as the admin API and the CLI
(`crank.admin.lint`, `crank.admin.changes`): typed page models, rendered by the templates. Runs in a worker
thread (the registry is synchronous)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, get_args

from pydantic import ValidationError

from crank.admin.actions import ImportFormat
from crank.admin.changes import ImportReport, VersionDiff, diff_versions, reimport
from crank.admin.console.trying import Answer, FormField, form_fields
from crank.admin.lint import (
    Finding,
    ToolSize,
    catalog_report,
    checked_catalog,
    lint_runtime,
    tool_sizes,
    unbuildable,
)
from crank.admin.models import problems
from crank.exceptions import ConfigurationError, RegistryNotFoundError
from crank.gateway.egress import EgressPolicy
from crank.registry import ApiKeyInfo, OperationSummary, Registry, RuntimeView, VersionInfo
from crank.registry.runtime import AgentMode, Limits, OAuthPolicy, SchemeCredential
from crank.registry.vault import Vault, VaultEntryInfo
from crank.sources.agents import build_catalog
from crank.types import JSONObject

__all__ = [
    "POLICY_FIELDS",
    "AccessPage",
    "access_page",
    "agent_limits",
    "read_policy",
    "MAX_LISTED_OPERATIONS",
    "AgentPage",
    "CatalogView",
    "ImportPage",
    "OperationRow",
    "TryPage",
    "WorkspacePage",
    "agent_page",
    "diff_page",
    "import_document",
    "keys_page",
    "try_page",
    "workspace_page",
]

MODES: Final[tuple[str, ...]] = get_args(AgentMode)
MAX_LISTED_OPERATIONS: Final = 200
"""Operations shown at once on a workspace's page; the search narrows the rest."""
MAX_QUERY: Final = 200
POLICY_FIELDS: Final = ("issuers", "audience", "credentials", "sign_in", "agent_scopes", "tool_scopes")
"""The OAuth policy form's fields (`policy_form`, `read_policy`)."""


@dataclass(frozen=True)
class OperationRow:
    name: str
    method: str
    url: str
    description: str


@dataclass(frozen=True)
class WorkspacePage:
    workspace: dict[str, Any]
    operations: list[OperationRow]
    matching: int
    """How many operations the query matches (more than are listed when over `MAX_LISTED_OPERATIONS`)."""
    total: int
    agents: list[dict[str, Any]]
    query: str


@dataclass(frozen=True)
class CatalogView:
    """An agent's `tools/list` as the model reads it, in one language and mode."""

    language: str
    languages: list[str]
    mode: AgentMode
    estimate: int
    budget: int
    tools: list[ToolSize]

    @property
    def over_budget(self) -> bool:
        return self.estimate > self.budget

    @property
    def percent(self) -> int:
        return round(100 * self.estimate / self.budget) if self.budget else 0


@dataclass(frozen=True)
class AgentPage:
    workspace: str
    agent: dict[str, Any]
    catalog: CatalogView | None
    """None when the draft cannot be built: `findings` then holds the one that says why."""
    findings: list[Finding]
    versions: list[VersionInfo]
    modes: tuple[str, ...] = MODES


@dataclass(frozen=True)
class KeysPage:
    workspace: str
    keys: list[ApiKeyInfo]
    agents: list[str]
    prefix: str
    created: tuple[ApiKeyInfo, str] | None = None
    """A key made by this request, with its secret: shown once, never again."""


def workspace_page(registry: Registry, workspace: str, query: str = "") -> WorkspacePage:
    """The workspace, its operations whose name, description or URL hold `query` (case-insensitive), and its
    agents."""
    query = query.strip()[:MAX_QUERY]
    needle = query.casefold()
    rows = [_operation_row(summary) for summary in registry.operation_summaries(workspace)]
    matching = [row for row in rows if not needle or needle in f"{row.name} {row.description} {row.url}".casefold()]
    return WorkspacePage(registry.workspace(workspace), matching[:MAX_LISTED_OPERATIONS], len(matching), len(rows),
                         registry.agents(workspace), query)  # fmt: skip


def _operation_row(summary: OperationSummary) -> OperationRow:
    method = "POST" if summary.protocol == "jsonrpc" else (summary.method or "GET").upper()
    return OperationRow(summary.name, method, summary.url, summary.description)


def agent_page(registry: Registry, workspace: str, agent: str, *, language: str | None, mode: str | None) -> AgentPage:
    """The agent's draft (what the next publish serves) as the model reads it, its lint findings, and its
    published versions."""
    info = registry.agent(workspace, agent)
    versions = registry.version_history(workspace, agent)
    try:
        runtime = _in_mode(registry.draft_runtime(workspace, agent), mode)
        uncompacted = _in_mode(registry.draft_runtime(workspace, agent, compact=False), mode)
        catalog = checked_catalog(runtime)  # built once for the report, the sizes and the findings
        report = catalog_report(runtime, catalog=catalog, language=language)
        sizes = tool_sizes(runtime, uncompacted, catalog=catalog, language=language)
        findings = lint_runtime(runtime, catalog=catalog)
    except ConfigurationError as exc:
        return AgentPage(workspace, info, None, [unbuildable(exc)], versions)
    default = str(registry.workspace(workspace)["default_language"])
    languages = sorted({default, *_languages(runtime)})
    chosen = language if language is not None and language in languages else default
    view = CatalogView(chosen, languages, runtime.agent.mode, report.estimate, report.budget, sizes)
    return AgentPage(workspace, info, view, findings, versions)


def _in_mode(runtime: RuntimeView, mode: str | None) -> RuntimeView:
    if mode not in MODES or mode == runtime.agent.mode:
        return runtime
    return runtime.model_copy(update={"agent": runtime.agent.model_copy(update={"mode": mode})})


def _languages(runtime: RuntimeView) -> set[str]:
    return {language for tool in runtime.tools for language in tool.translations}


def diff_page(registry: Registry, workspace: str, agent: str, old: int, new: int) -> VersionDiff:
    return diff_versions(
        registry.version_runtime(workspace, agent, old), registry.version_runtime(workspace, agent, new)
    )


def keys_page(registry: Registry, workspace: str, prefix: str = "", **extra: Any) -> KeysPage:
    """The workspace's API keys whose id starts with `prefix` (never the keys: only their digests are kept)."""
    prefix = prefix.strip()[:64]
    keys = [info for info in registry.api_key_infos(workspace) if info.id.startswith(prefix)]
    agents = [str(agent["slug"]) for agent in registry.agents(workspace)]
    return KeysPage(workspace, keys, agents, prefix, **extra)


@dataclass(frozen=True)
class TryPage:
    """A published tool, its form, and what a call of it answered (when one was made)."""

    workspace: str
    agent: str
    version: int
    tool: JSONObject
    """The tool's `tools/list` entry, as the published version serves it."""
    fields: list[FormField]
    answer: Answer | None = None
    sent: str = ""
    """The arguments of the call made, as JSON (what "Run it" sends again with the confirmation token)."""
    problems: list[str] = field(default_factory=list)

    @property
    def destructive(self) -> bool:
        return bool((self.tool.get("annotations") or {}).get("destructiveHint"))


def try_page(
    registry: Registry, workspace: str, agent: str, tool: str, values: dict[str, str] | None = None
) -> TryPage:
    """The tool as the agent's published version serves it (`RegistryNotFoundError` when it serves none)."""
    version = registry.agent(workspace, agent)["published_version"]
    if version is None:
        raise RegistryNotFoundError(f"agent {workspace}/{agent} is not published: publish it to try its tools")
    runtime = registry.version_runtime(workspace, agent, version)
    catalog = build_catalog(runtime)
    entry = catalog.tool_entry(tool, catalog.default_language)
    if entry is None:
        raise RegistryNotFoundError(f"version {version} of {workspace}/{agent} has no tool {tool!r}")
    return TryPage(workspace, agent, version, entry, form_fields(entry.get("inputSchema"), values))


@dataclass(frozen=True)
class ImportPage:
    """The re-import form, and what the document would change (a preview) or changed (applied)."""

    workspace: str
    kind: str = "openapi"
    url: str = ""
    document: str = ""
    report: ImportReport | None = None
    problems: list[str] = field(default_factory=list)


def import_document(
    registry: Registry, workspace: str, kind: ImportFormat, source: str | JSONObject, *, apply: bool,
    egress: EgressPolicy,
) -> ImportReport:  # fmt: skip
    """What importing `source` (a URL, or the document itself) does to the workspace: with `apply` False, the
    very same transaction rolled back (`reimport`'s dry run), so the preview is what applying it would do."""
    return reimport(registry, workspace, kind, source, dry_run=not apply, egress=egress)


@dataclass(frozen=True)
class AccessPage:
    """Who may call the workspace's agents (its OAuth policy, or API keys only) and what its operations send
    upstream (credentials by security scheme: references, never values)."""

    workspace: str
    policy: OAuthPolicy | None
    credentials: dict[str, SchemeCredential]
    connections: list[VaultEntryInfo] = field(default_factory=list)
    """Users' own connections to the workspace's APIs (never a token), each revocable."""
    form: dict[str, str] = field(default_factory=dict)
    """What the policy form shows: the policy as it is, or as the operator wrote it when it was refused."""
    problems: list[str] = field(default_factory=list)


def access_page(registry: Registry, workspace: str, **extra: Any) -> AccessPage:
    policy = registry.workspace_oauth_policy(workspace)
    form = extra.pop("form", None) or policy_form(policy)
    connections = Vault(registry.engine, None).entries(workspace)  # listed without decrypting
    return AccessPage(workspace, policy, registry.workspace_credentials(workspace), connections, form, **extra)


def policy_form(policy: OAuthPolicy | None) -> dict[str, str]:
    """A policy as the form's fields write it: one issuer a line, `name: scope scope` a line for scopes."""
    if policy is None:
        return {"issuers": "", "audience": "", "credentials": "both", "sign_in": "always", "agent_scopes": "",
                "tool_scopes": ""}  # fmt: skip
    return {
        "issuers": "\n".join(policy.issuers),
        "audience": policy.audience or "",
        "credentials": policy.credentials,
        "sign_in": policy.sign_in,
        "agent_scopes": "\n".join(f"{name}: {' '.join(scopes)}" for name, scopes in policy.agent_scopes.items()),
        "tool_scopes": "\n".join(f"{name}: {' '.join(scopes)}" for name, scopes in policy.tool_scopes.items()),
    }


def read_policy(form: dict[str, str], current: OAuthPolicy | None) -> OAuthPolicy:
    """The policy the form says (`ValueError` with each problem, `; `-separated). An introspection client and a
    sign-in client are kept as they were: the console does not edit them (the admin API and the CLI do)."""
    try:
        return OAuthPolicy.model_validate({
            "issuers": [line.strip() for line in form.get("issuers", "").splitlines() if line.strip()],
            "audience": form.get("audience", "").strip() or None,
            "credentials": form.get("credentials") or "both",
            "sign_in": form.get("sign_in") or "always",
            "agent_scopes": _scope_lines(form.get("agent_scopes", ""), "agent scopes"),
            "tool_scopes": _scope_lines(form.get("tool_scopes", ""), "tool scopes"),
            "introspection": current.introspection if current is not None else None,
            "sign_in_client": current.sign_in_client if current is not None else None,
        })  # fmt: skip
    except ValidationError as invalid:
        raise ValueError(problems(invalid, whole="policy")) from None


def _scope_lines(text: str, what: str) -> dict[str, list[str]]:
    scopes: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, colon, words = line.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"{what}: write each line as `name: scope scope`, not {line.strip()[:80]!r}")
        scopes[name.strip()] = words.split()
    return scopes


def agent_limits(registry: Registry, workspace: str) -> dict[str, str]:
    """Each agent's own rate limit and quota in words ("" for none), as its draft sets them."""
    return {str(agent["slug"]): limits_text(agent.get("limits")) for agent in registry.agents(workspace)}


def limits_text(stored: Any) -> str:
    if not stored:
        return ""
    limits = Limits.model_validate(stored)
    return "; ".join(limit.words() for limit in (limits.rate, limits.quota) if limit is not None)
