"""What a newer version of an API description changes, and what it breaks (issue 11, item 5).

Re-importing a document into a workspace compares each imported operation with the draft of the same
name and reports operations added, removed and changed; for a changed one, its parameters (added,
removed, a new type, now required or optional), its target and the other fields the import writes.
A change that breaks a bound tool is flagged with the agents and tools it reaches:

- the operation was removed from the document (the tool goes: its bindings are removed),
- a parameter was removed, or is new and required, or became required,
- a parameter's type changed.

`reimport` writes the drafts (deleting the removed operations) and republishes every published agent
that binds a changed or removed operation, in one registry transaction; with `dry_run` it runs the very
same transaction (the publish checks included) and rolls it back, so the report is what would happen.

The fields the import writes (`IMPORTED_FIELDS`) are replaced; every other field of a draft (an output
mapping, a result format, samples) is kept, and so are the execution settings the document does not
give (a timeout, credentials).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from crank.admin.actions import CheckAndLint, ImportFormat, imported_specs
from crank.admin.documents import DOCUMENT_EXECUTION_KEYS, Matcher, SkippedOperation, load_document
from crank.admin.lint import Finding
from crank.gateway.egress import EgressPolicy
from crank.registry import Registry, tool_name_of
from crank.registry.runtime import RuntimeTool, RuntimeView
from crank.types import JSONObject

__all__ = [
    "IMPORTED_FIELDS",
    "Breakage",
    "ImportReport",
    "OperationChange",
    "RepublishReport",
    "VersionDiff",
    "compare_operations",
    "diff_versions",
    "merge_draft",
    "reimport",
    "republish_operation",
]

IMPORTED_FIELDS = frozenset(
    {"protocol", "target", "description", "input_schema", "input_mapping", "output_schema", "annotations", "source"}
)
"""What an import writes into a draft (and `execution_config`, merged key by key); the rest is the user's."""

_COMPARED = ("description", "output_schema", "annotations", "execution_config")


@dataclass(frozen=True)
class OperationChange:
    """One changed operation: each difference as a line, and those that break a caller of the tool."""

    operation: str
    details: tuple[str, ...]
    breaking: tuple[str, ...] = ()


@dataclass(frozen=True)
class Breakage:
    """A bound tool that a change breaks."""

    agent: str
    tool: str
    operation: str
    reason: str

    def __str__(self) -> str:
        return f"agent {self.agent}, tool {self.tool}: {self.reason}"


@dataclass(frozen=True)
class ImportReport:
    """What an import of a document did (or, with `dry_run`, would do) to a workspace."""

    workspace: str
    added: list[str]
    removed: list[str]
    changed: list[OperationChange]
    unchanged: list[str]
    breaking: list[Breakage]
    published: dict[str, int]
    """Agents republished, with their new version."""
    names: list[str] = field(default_factory=list)
    """Every operation of the document as imported, in its order."""
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    dry_run: bool = False
    first: bool = False
    """Nothing had been imported from this document before (the added operations are not listed)."""
    skipped: list[SkippedOperation] = field(default_factory=list)
    """The document's operations that Crank cannot call, left out."""

    def lines(self) -> list[str]:
        """The report as text, one fact a line (the CLI prints it)."""
        out = [] if self.first else [f"+ {name}" for name in self.added]
        out += [f"- {name}" for name in self.removed]
        for change in self.changed:
            out.append(f"~ {change.operation}")
            out += [f"    {detail}" for detail in change.details]
        out += [f"BREAKING {breakage}" for breakage in self.breaking]
        verb = "would republish" if self.dry_run else "republished"
        out += [f"{verb} {agent} as version {version}" for agent, version in self.published.items()]
        return out

    def to_json(self) -> JSONObject:
        return {
            "imported": self.names,
            "skipped": [asdict(skipped) for skipped in self.skipped],
            "added": self.added,
            "removed": self.removed,
            "changed": [asdict(change) for change in self.changed],
            "unchanged": len(self.unchanged),
            "breaking": [asdict(breakage) for breakage in self.breaking],
            "published": self.published,
            "findings": {agent: [asdict(f) for f in findings] for agent, findings in self.findings.items()},
            "dry_run": self.dry_run,
        }


@dataclass(frozen=True)
class RepublishReport:
    """The agents an operation's edit republished, with their new version and lint findings."""

    operation: str
    published: dict[str, int]
    unchanged: list[str]
    findings: dict[str, list[Finding]]

    def to_json(self) -> JSONObject:
        return {
            "operation": self.operation,
            "published": self.published,
            "unchanged": self.unchanged,
            "findings": {agent: [asdict(f) for f in findings] for agent, findings in self.findings.items()},
        }


# -- comparing --------------------------------------------------------------------------------------


def merge_draft(old: JSONObject | None, new: JSONObject) -> JSONObject:
    """The imported `new` spec over the existing draft: imported fields replaced, the user's kept."""
    if old is None:
        return new
    merged = {key: value for key, value in old.items() if key not in IMPORTED_FIELDS and key != "execution_config"}
    merged.update(new)
    # What the document requires, and how it takes its body, are the document's: a scheme it no longer names is
    # no longer required, and a body that became JSON (or went away) is no longer a form.
    kept = {
        key: value for key, value in (old.get("execution_config") or {}).items() if key not in DOCUMENT_EXECUTION_KEYS
    }
    execution = {**kept, **(new.get("execution_config") or {})}
    if execution:
        merged["execution_config"] = execution
    return merged


def compare_operations(name: str, old: JSONObject, new: JSONObject) -> OperationChange | None:
    """How `new` differs from `old` (two drafts of one operation), or None when it does not."""
    details: list[str] = []
    breaking: list[str] = []
    old_target, new_target = old.get("target") or {}, new.get("target") or {}
    if old_target != new_target:
        details.append(f"target: {_target(old_target)} -> {_target(new_target)}")
    params = _parameter_changes(old.get("input_schema"), new.get("input_schema"))
    for detail, breaks in params:
        details.append(detail)
        if breaks:
            breaking.append(detail)
    if not params and old.get("input_mapping") != new.get("input_mapping"):
        details.append("input mapping changed")
    for key in _COMPARED:
        if old.get(key) != new.get(key):
            details.append(f"{key.replace('_', ' ')} changed")
    others = sorted((set(old) | set(new)) - {*IMPORTED_FIELDS, *_COMPARED})
    details += [f"{key} changed" for key in others if old.get(key) != new.get(key)]
    if not details:
        return None
    return OperationChange(name, tuple(details), tuple(breaking))


@dataclass(frozen=True)
class VersionDiff:
    """The tools two published versions of an agent differ by, each change as the re-import report words it."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[OperationChange, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_versions(old: RuntimeView, new: RuntimeView) -> VersionDiff:
    """Tools added, removed and changed from `old` to `new` (by tool name; a change lists its differences and
    those that break a caller, as `compare_operations` does for two drafts of an operation)."""
    before = {tool.tool_name: _comparable(tool) for tool in old.tools}
    after = {tool.tool_name: _comparable(tool) for tool in new.tools}
    changed = [compare_operations(name, before[name], after[name]) for name in after if name in before]
    return VersionDiff(
        added=tuple(name for name in after if name not in before),
        removed=tuple(name for name in before if name not in after),
        changed=tuple(change for change in changed if change is not None),
    )


def _comparable(tool: RuntimeTool) -> JSONObject:
    """A published tool in the words of an operation draft (`description`, `annotations`), for the comparison."""
    data = tool.to_json()
    for key in ("tool_name", "workspace_id", "agent_id", "operation_id"):
        data.pop(key, None)
    data["description"] = data.pop("tool_description", None)
    return data


def _target(target: JSONObject) -> str:
    return " ".join(str(target[key]) for key in ("method", "url") if key in target) or "none"


def _parameter_changes(old_schema: Any, new_schema: Any) -> list[tuple[str, bool]]:
    """(line, breaks a caller) for each parameter added, removed, retyped, or whose requirement changed."""
    old, new = _parameters(old_schema), _parameters(new_schema)
    changes: list[tuple[str, bool]] = []
    for name, (kind, required) in new.items():
        if name not in old:
            changes.append((f"parameter {name}: added ({kind}{', required' if required else ''})", required))
            continue
        old_kind, was_required = old[name]
        if old_kind != kind:
            changes.append((f"parameter {name}: type {old_kind} -> {kind}", True))
        if required and not was_required:
            changes.append((f"parameter {name}: now required", True))
        elif was_required and not required:
            changes.append((f"parameter {name}: now optional", False))
    changes += [(f"parameter {name}: removed", True) for name in old if name not in new]
    return changes


def _parameters(schema: Any) -> dict[str, tuple[str, bool]]:
    if not isinstance(schema, dict):
        return {}
    required = set(schema.get("required") or [])
    properties = schema.get("properties") or {}
    return {name: (_type(sub), name in required) for name, sub in properties.items()}


def _type(schema: Any) -> str:
    """A short name of a schema's type: `integer`, `string|null`, `array of string`, `Pet` for a `$ref`."""
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("$ref"), str):
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(sorted(str(item) for item in kind))
    if kind == "array":
        return f"array of {_type(schema.get('items'))}"
    if isinstance(kind, str):
        return kind
    for keyword in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(keyword), list):
            return f"{keyword}({', '.join(_type(member) for member in schema[keyword])})"
    return "enum" if "enum" in schema else "any"


# -- importing --------------------------------------------------------------------------------------


def reimport(
    registry: Registry,
    workspace: str,
    kind: ImportFormat,
    source: str | JSONObject,
    *,
    base_url: str | None = None,
    include: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    republish: bool = True,
    dry_run: bool = False,
    egress: EgressPolicy | None = None,
    strict: bool = False,
) -> ImportReport:
    """Import a document (a path, a URL or the parsed document) into the workspace's drafts and report
    what changed against the operations imported from it before.

    The earlier operations are the drafts imported from a document of the same kind and title (drafts
    imported before titles were kept count too) that `include` selects. Added and changed operations
    are written, removed ones deleted with their bindings, and (with `republish`) every published agent
    that binds a changed or removed operation is published again: all in one transaction, so an invalid
    document or an agent that cannot be built changes nothing. `dry_run` reports and writes nothing. An operation
    Crank cannot call is skipped and reported (`strict`: the document is refused for it).
    `egress`: the policy for a URL and the published targets (`CRANK_EGRESS_ALLOW` when not given)."""
    registry.workspace(workspace)  # an unknown workspace fails before the document is read
    document = load_document(source, egress=egress) if isinstance(source, str) else source
    title = _title(document)
    read = imported_specs(kind, document, base_url=base_url, include=include, progress=progress, strict=strict)
    imported = read.specs
    for spec in imported.values():
        spec["source"] = {**(spec.get("source") or {}), "document": title}
    drafts = registry.operations(workspace)
    earlier = {name for name, spec in drafts.items() if _from(spec, kind, title) and _selected(name, spec, include)}
    specs = {name: merge_draft(drafts.get(name), spec) for name, spec in imported.items()}
    added = [name for name in imported if name not in drafts]
    # An operation the document still has but Crank cannot call now stays as it was (never deleted for it).
    removed = sorted(earlier - set(imported) - {skipped.name for skipped in read.skipped})
    changed, unchanged = [], []
    for name in imported:
        if name in drafts:
            change = compare_operations(name, drafts[name], specs[name])
            if change is None:
                unchanged.append(name)
            else:
                changed.append(change)
    breaking = _breakages(registry.agents(workspace), changed, removed)
    touched = {change.operation for change in changed} | set(removed)
    check = CheckAndLint(egress=egress)
    versions = registry.update_operations(
        workspace,
        {name: spec for name, spec in specs.items() if spec != drafts.get(name)},
        delete=removed,
        republish=touched if republish else (),
        check=check,
        dry_run=dry_run,
    )
    published = {agent: version for agent, (version, new) in versions.items() if new}
    findings = {agent: check.findings[agent] for agent in published}
    return ImportReport(workspace, added, removed, changed, unchanged, breaking, published, list(imported),
                        findings, dry_run, first=not earlier, skipped=read.skipped)  # fmt: skip


def republish_operation(
    registry: Registry, workspace: str, operation: str, *, egress: EgressPolicy | None = None
) -> RepublishReport:
    """Publish, in one transaction, every published agent that binds the operation (seed 003 section 9:
    an edited operation becomes a new published version of each agent that serves it)."""
    registry.operation(workspace, operation)  # 404 for an unknown one
    check = CheckAndLint(egress=egress)
    versions = registry.update_operations(workspace, {}, republish={operation}, check=check)
    published = {agent: version for agent, (version, new) in versions.items() if new}
    unchanged = [agent for agent, (_, new) in versions.items() if not new]
    return RepublishReport(operation, published, unchanged, {agent: check.findings[agent] for agent in published})


def _title(document: JSONObject) -> str | None:
    info = document.get("info")
    title = info.get("title") if isinstance(info, dict) else None
    return title if isinstance(title, str) else None


def _from(spec: JSONObject, kind: str, title: str | None) -> bool:
    source = spec.get("source")
    if not isinstance(source, dict) or source.get("kind") != kind:
        return False
    return "document" not in source or source["document"] == title


def _selected(name: str, spec: JSONObject, include: Sequence[str] | None) -> bool:
    """Whether `include` selects an existing draft, by the same keys the importer matches."""
    source: JSONObject = spec.get("source") or {}
    keys = [source.get("operation_id") or "", *(source.get("tags") or [])]
    if "method" in source and "path" in source:
        keys.append(f"{source['method']} {source['path']}")
    return Matcher(include).keep(name, source, [str(key) for key in keys])


def _breakages(agents: Iterable[JSONObject], changed: list[OperationChange], removed: list[str]) -> list[Breakage]:
    reasons: dict[str, list[str]] = {name: ["operation removed from the document (the tool is removed)"]
                                     for name in removed}  # fmt: skip
    for change in changed:
        if change.breaking:
            reasons[change.operation] = list(change.breaking)
    found = []
    for agent in agents:
        for binding in agent["bindings"]:
            operation = binding.get("operation")
            for reason in reasons.get(operation, []):
                found.append(Breakage(agent["slug"], tool_name_of(binding), operation, reason))
    return found
