"""Publishing: an agent's draft made into an immutable version (its runtime view, checked by the caller first),
rollback, and the versions kept. A publish is one transaction: a failure anywhere leaves the previous version
serving and nothing half-written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from crank.exceptions import ConfigurationError, RegistryError, RegistryNotFoundError
from crank.registry.base import RegistryBase, limits_of
from crank.registry.change_log import Change
from crank.registry.models import Agent, AgentVersion, Operation, Workspace
from crank.registry.runtime import (
    DEFAULT_AGENT_MODE,
    DEFAULT_LANGUAGE,
    AgentInfo,
    Limits,
    RuntimeTool,
    RuntimeView,
    SchemeCredential,
    WorkspaceInfo,
    check_agent_size,
    load_runtime,
    tool_from_spec,
)
from crank.schema import problems_of
from crank.schema.compact import compact_tool, policy_of, shorten
from crank.types import JSONObject

__all__ = ["RUNTIME_OPERATION_FIELDS", "Publishing", "VersionInfo", "tool_name_of"]

RUNTIME_OPERATION_FIELDS = (
    "protocol", "target", "input_schema", "output_schema", "input_mapping", "output_mapping", "execution_config",
)  # fmt: skip
"""What a published tool keeps of its operation (besides its description, hints and result format, which
the binding may override); samples, import metadata and UI fields stay in the draft."""


def tool_name_of(binding: JSONObject) -> str:
    """The name a binding publishes its operation under: its own `tool_name`, else the operation's name."""
    return str(binding.get("tool_name") or binding.get("operation"))


@dataclass(frozen=True)
class VersionInfo:
    version: int
    created_at: str
    current: bool


class Publishing(RegistryBase):
    """An agent's drafts published as versions, rolled back, and read back."""

    def publish(
        self,
        workspace: str,
        agent_slug: str,
        check: Callable[[RuntimeView], None] | None = None,
        *,
        skip_unchanged: bool = False,
    ) -> int:
        """Publish the agent's draft as a new immutable version; returns its number. With `skip_unchanged`,
        a draft whose runtime view equals the served version's publishes nothing and returns that version."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            version, _ = self._publish(session, ws, self._agent(session, ws, agent_slug), check, skip_unchanged)
        return version

    def draft_runtime(self, workspace: str, agent_slug: str, *, compact: bool = True) -> RuntimeView:
        """The runtime view the agent's draft would publish now (for checks and lint); nothing is written.
        A draft that cannot make one (a missing operation, a field of the wrong type) is a `RegistryError`.
        `compact=False`: the tools as the drafts write them, before compaction (for size reports)."""
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            return self._runtime_view(session, ws, self._agent(session, ws, agent_slug), compact=compact)

    def operations_runtime(self, workspace: str, names: list[str], *, compact: bool = True) -> RuntimeView:
        """The named operations as the tools a binding of each would publish (for the import's size report);
        nothing is written. `compact=False`: before compaction."""
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            bindings = [{"operation": name} for name in names]
            agent = Agent(id="", workspace_id=ws.id, slug="import", spec={"bindings": bindings})
            # Sizes need no credentials: none is attached, so no reference is checked where nothing is called.
            return self._runtime_view(session, ws, agent, compact=compact, credentials=False)

    def _publish(
        self,
        session: Session,
        ws: Workspace,
        agent: Agent,
        check: Callable[[RuntimeView], None] | None,
        skip_unchanged: bool,
    ) -> tuple[int, bool]:
        runtime = self._runtime_view(session, ws, agent)
        stored = runtime.to_json()
        try:  # before the check, which builds the whole catalog
            check_agent_size(stored, f"agent {ws.slug}/{agent.slug}")
        except ValueError as heavy:
            raise RegistryError(str(heavy)) from None
        if check is not None:
            check(runtime)
        if skip_unchanged and agent.published_version is not None:
            served = session.scalar(
                select(AgentVersion.runtime).filter_by(agent_id=agent.id, version=agent.published_version)
            )
            if _same_view(served, runtime):
                return agent.published_version, False
        latest = session.scalar(select(func.max(AgentVersion.version)).filter_by(agent_id=agent.id)) or 0
        session.add(AgentVersion(agent_id=agent.id, version=latest + 1, runtime=stored, tools=len(runtime.tools)))
        agent.published_version = latest + 1
        self._bump(session, Change("agent", ws.slug, agent.slug))
        return latest + 1, True

    def rollback(self, workspace: str, agent_slug: str, version: int) -> None:
        """Serve an earlier published version again."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            agent = self._agent(session, ws, agent_slug)
            if session.scalar(select(AgentVersion).filter_by(agent_id=agent.id, version=version)) is None:
                raise RegistryNotFoundError(f"agent {workspace}/{agent_slug} has no version {version}")
            agent.published_version = version
            self._bump(session, Change("agent", ws.slug, agent.slug))

    def version_runtime(self, workspace: str, agent_slug: str, version: int) -> RuntimeView:
        """One published version's runtime view, as it was published (to compare two versions, say)."""
        with Session(self.engine) as session:
            agent = self._agent(session, self._workspace(session, workspace), agent_slug)
            stored = session.scalar(select(AgentVersion.runtime).filter_by(agent_id=agent.id, version=version))
        if stored is None:
            raise RegistryNotFoundError(f"agent {workspace}/{agent_slug} has no version {version}")
        return load_runtime(stored, where=f"agent {workspace}/{agent_slug} version {version}")

    def versions(self, workspace: str, agent_slug: str) -> list[int]:
        return [info.version for info in self.version_history(workspace, agent_slug)]

    def version_history(self, workspace: str, agent_slug: str) -> list[VersionInfo]:
        with Session(self.engine) as session:
            agent = self._agent(session, self._workspace(session, workspace), agent_slug)
            return [
                VersionInfo(v.version, v.created_at.isoformat(), v.version == agent.published_version)
                for v in agent.versions
            ]

    def _runtime_view(
        self, session: Session, ws: Workspace, agent: Agent, *, compact: bool = True, credentials: bool = True
    ) -> RuntimeView:
        tools = []
        for index, binding in enumerate(agent.spec.get("bindings", [])):
            where = f"agent {ws.slug}/{agent.slug}, binding {index}"
            operation_name = binding.get("operation")
            operation = session.scalar(select(Operation).filter_by(workspace_id=ws.id, name=operation_name))
            if operation is None:
                raise RegistryError(f"{where}: no operation {operation_name!r} in workspace {ws.slug!r}")
            tools.append(_tool(ws, agent, operation, binding, compact=compact, credentials=credentials))
        names = [tool.tool_name for tool in tools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise RegistryError(f"agent {ws.slug}/{agent.slug}: tool names must be unique, repeated: {duplicates}")
        where = f"agent {ws.slug}/{agent.slug}"
        try:
            info = AgentInfo(
                id=agent.id,
                slug=agent.slug,
                description=agent.spec.get("description"),
                token_budget=agent.spec.get("token_budget") or ws.token_budget,
                mode=agent.spec.get("mode") or DEFAULT_AGENT_MODE,
                limits=_agent_limits(agent.spec.get("limits"), where),
                documents=agent.spec.get("documents") or (),
                prompts=agent.spec.get("prompts") or (),
            )
        except ValidationError as exc:  # a draft written before the admin models checked these
            problems = "; ".join(f"{problem.dotted}: {problem.message}" for problem in problems_of(exc))
            raise RegistryError(f"{where}: {problems}") from None
        workspace = WorkspaceInfo(id=ws.id, slug=ws.slug, default_language=ws.default_language or DEFAULT_LANGUAGE)
        return RuntimeView(workspace=workspace, agent=info, tools=tuple(tools))


def _tool(
    ws: Workspace, agent: Agent, operation: Operation, binding: JSONObject, *, compact: bool, credentials: bool = True
) -> RuntimeTool:
    """The binding over its operation's draft, in the flat form `tool_from_spec` reads, compacted by the
    `compact` settings of the workspace, the agent and the operation (the most specific wins)."""
    spec = operation.spec
    name = tool_name_of(binding)
    where = f"agent {ws.slug}/{agent.slug}, tool {name!r}"
    flat: JSONObject = {
        "tool_name": name,
        "workspace_id": ws.id,
        "agent_id": agent.id,
        "operation_id": operation.id,
        "tool_description": binding.get("description") or spec.get("description"),
        **{field: spec.get(field) for field in RUNTIME_OPERATION_FIELDS},
        "title": binding.get("title"),
        "translations": binding.get("translations"),
        # Hints derived at import (from the HTTP method) are the default; the binding overrides each one.
        "annotations": {**(spec.get("annotations") or {}), **(binding.get("annotations") or {})},
        "format": binding.get("format") or spec.get("format"),
        # `resource: true` takes every default; false or absent: a tool only
        "resource": {} if binding.get("resource") is True else binding.get("resource") or None,
    }
    try:
        if compact:
            _compacted(flat, policy_of(ws.compact, agent.spec.get("compact"), spec.get("compact"), where=where))
        tool = tool_from_spec(flat, where=where)
        return _with_credential(tool, ws.credentials) if credentials else tool
    except ConfigurationError as exc:
        raise RegistryError(str(exc)) from None


def _with_credential(tool: RuntimeTool, credentials: JSONObject | None) -> RuntimeTool:
    """The tool with the workspace's credential for the scheme its description requires, when it has no `auth`
    of its own and the workspace gives one (without one it is published as it is, and reported)."""
    config = tool.execution_config
    if config.auth is not None or not config.requires or not credentials:
        return tool
    for requirement in config.requires:
        stored = credentials.get(requirement.scheme)
        given = SchemeCredential.model_validate(stored) if stored is not None else None
        if given is not None and given.opens(requirement, tool.target.url):
            try:
                auth = requirement.credential(given)
            except ValidationError as exc:
                raise ConfigurationError(
                    f"tool {tool.tool_name!r}: the credential for {requirement.scheme}: {exc.errors()[0]['msg']}"
                ) from None
            return tool.model_copy(update={"execution_config": config.model_copy(update={"auth": auth})})
    return tool


def _compacted(flat: JSONObject, policy: Any) -> None:
    """Compact the tool's description and schemas in place (`crank.schema.compact`); a field of the wrong
    type is left as it is, for `tool_from_spec` to name."""
    description, inputs, outputs = (flat.get(key) for key in ("tool_description", "input_schema", "output_schema"))
    if not policy.enabled or not all(value is None or isinstance(value, kind) for value, kind in
                                     ((description, str), (inputs, dict), (outputs, dict))):  # fmt: skip
        return
    tool = compact_tool(description, inputs, outputs, policy, name=str(flat["tool_name"]))
    flat.update(tool_description=tool.description, input_schema=tool.input_schema, output_schema=tool.output_schema)
    translations = flat.get("translations")
    if isinstance(translations, dict):
        flat["translations"] = {
            language: {key: shorten(text, policy.description_chars) if key == "description" and isinstance(text, str)
                       else text for key, text in texts.items()} if isinstance(texts, dict) else texts
            for language, texts in translations.items()
        }  # fmt: skip


def _same_view(served: Any, runtime: RuntimeView) -> bool:
    """Whether the stored view serves what `runtime` would, whatever format version wrote it."""
    try:
        return load_runtime(served) == runtime
    except ConfigurationError:
        return False


def _agent_limits(stored: Any, where: str) -> Limits | None:
    """An agent draft's limits for its runtime view; a draft that holds wrong ones fails the publish."""
    try:
        return limits_of(stored)
    except ValidationError as exc:
        raise RegistryError(f"{where}: limits: {exc.errors()[0]['msg']}") from None
