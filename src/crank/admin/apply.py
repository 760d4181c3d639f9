"""`crank apply FILE`: a declarative catalog kept in git, applied in one transaction.

The file names one workspace, operations imported from OpenAPI/OpenRPC `sources` and/or written
inline, and agents binding them. Applying creates or updates all of it and publishes every agent
whose runtime view changed (an unchanged agent keeps its version). Everything is checked before
anything is written: a mistake anywhere applies nothing. `${NAME}` and `${NAME:-default}` in string
values are replaced from the environment, so one file serves several environments; secrets stay
references (`env:NAME`) that the gateway resolves when it calls.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from crank import _yaml
from crank.admin.actions import CheckAndLint, ImportFormat, imported_specs
from crank.admin.documents import DOCUMENT_EXECUTION_KEYS, is_url, load_document
from crank.admin.lint import Finding
from crank.admin.models import CatalogFile, OperationIn, SourceIn
from crank.exceptions import ApplyError, SpecError
from crank.gateway.egress import EgressPolicy
from crank.registry import AgentDraft, Registry
from crank.schema import problems_of
from crank.types import JSONObject

__all__ = ["ApplyError", "ApplyReport", "apply_catalog", "load_catalog_file"]

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class ApplyReport:
    workspace: str
    operations: list[str]
    versions: dict[str, tuple[int, bool]]  # agent -> (served version, newly published)
    findings: dict[str, list[Finding]]  # agent -> what the linter says of it


def load_catalog_file(path: str | Path, *, variables: Mapping[str, str] | None = None) -> CatalogFile:
    """Read and check a catalog file (YAML or JSON). `${NAME}` comes from `variables`, then the environment."""
    path = Path(path)
    lookup = {**os.environ, **(variables or {})}
    try:
        raw = _yaml.load(path.read_text())
    except OSError as exc:
        raise ApplyError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ApplyError(f"{path}:{where} not valid YAML: {getattr(exc, 'problem', exc)}") from None
    try:
        return CatalogFile.model_validate(_substitute(raw, path, lookup))
    except ValidationError as exc:
        raise ApplyError(f"{path}: invalid catalog file:\n{_describe(exc)}") from None


def apply_catalog(
    registry: Registry,
    catalog: CatalogFile,
    *,
    base_dir: Path = Path("."),
    progress: Callable[[int, int], None] | None = None,
    egress: EgressPolicy | None = None,
) -> ApplyReport:
    """Create or update the workspace, operations and agents, and publish what changed: all or nothing.
    `egress`: the policy for source URLs and the published targets (`CRANK_EGRESS_ALLOW` when not given)."""
    operations: dict[str, JSONObject] = {}
    for index, source in enumerate(catalog.sources):
        try:
            kind, location = _source(source, index)
            reference = location if is_url(location) else str(base_dir / location)
            imported = imported_specs(kind, load_document(reference, egress=egress), base_url=source.base_url,
                                      include=source.include, progress=progress, strict=True)  # fmt: skip
            operations.update(imported.specs)
        except SpecError as exc:
            raise ApplyError(f"sources[{index}]: {exc}") from None
    for name, patch in catalog.operations.items():
        operations[name] = _merged(name, operations.get(name, {}), patch.model_dump(exclude_unset=True))
    agents = [
        AgentDraft(slug, agent.model_dump(exclude_none=True, exclude_defaults=False))
        for slug, agent in catalog.agents.items()
    ]
    check = CheckAndLint(egress=egress)
    versions = registry.apply(catalog.workspace.model_dump(), operations, agents, check=check)
    return ApplyReport(catalog.workspace.slug, sorted(operations), versions, check.findings)


def _merged(name: str, imported: JSONObject, patch: JSONObject) -> JSONObject:
    """An inline operation, or an imported one with the fields the file gives replaced. An `execution_config` the
    file gives replaces the imported one, except for what the document says of the operation (`requires`, `body`),
    which the file's own keys may still replace: a timeout set in the file leaves a form body a form."""
    merged = {**imported, **patch}
    imported_config, patched_config = imported.get("execution_config"), patch.get("execution_config")
    if isinstance(imported_config, dict) and isinstance(patched_config, dict):
        documents = {key: imported_config[key] for key in DOCUMENT_EXECUTION_KEYS if key in imported_config}
        merged["execution_config"] = {**documents, **patched_config}
    try:
        return OperationIn.model_validate(merged).model_dump(exclude_none=True)
    except ValidationError as exc:
        where = "" if imported else " (not imported by any source, so it needs protocol and target)"
        raise ApplyError(f"operations.{name}{where}:\n{_describe(exc)}") from None


def _source(source: SourceIn, index: int) -> tuple[ImportFormat, str]:
    if (source.openapi is None) == (source.openrpc is None):
        raise ApplyError(f"sources[{index}]: give exactly one of 'openapi' or 'openrpc'")
    if source.openapi is not None:
        return "openapi", source.openapi
    assert source.openrpc is not None
    return "openrpc", source.openrpc


def _substitute(value: Any, path: Path, lookup: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: _variable(match, path, lookup), value)
    if isinstance(value, list):
        return [_substitute(item, path, lookup) for item in value]
    if isinstance(value, dict):
        return {key: _substitute(item, path, lookup) for key, item in value.items()}
    return value


def _variable(match: re.Match[str], path: Path, lookup: Mapping[str, str]) -> str:
    name, default = match.group(1), match.group(2)
    value = lookup.get(name, default)
    if value is None:
        raise ApplyError(f"{path}: ${{{name}}} is used but the environment variable {name} is not set")
    return value


def _describe(error: ValidationError) -> str:
    return "\n".join(f"  {problem.place}: {problem.message}" for problem in problems_of(error))
