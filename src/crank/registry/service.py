"""`Registry`: drafts, publishing, versions and rollback; and the runtime view the MCP side reads.

A publish is one transaction: it reads the agent's draft and the drafts of the operations it binds,
builds the runtime view (a `crank.registry.runtime.RuntimeView`: only the runtime fields of seed 003
section 6, typed), lets the caller check it (the gateway compiles the catalog, so a bad tool fails the
publish, not a request), writes an immutable version, points the agent at it and bumps the registry
generation. A failure anywhere rolls all of it back: the previous version keeps serving and nothing is
half-written.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, TypeVar

from pydantic import ValidationError
from sqlalchemy import Engine, event, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from crank.exceptions import ConfigurationError, RegistryConflictError, RegistryError, RegistryNotFoundError
from crank.registry.changes import POSTGRES_CHANNEL
from crank.registry.models import Agent, AgentVersion, ApiKey, Operation, RegistryState, Workspace
from crank.registry.runtime import (
    DEFAULT_AGENT_MODE,
    DEFAULT_LANGUAGE,
    AgentInfo,
    Limits,
    OAuthPolicy,
    RuntimeTool,
    RuntimeView,
    SchemeCredential,
    WorkspaceInfo,
    load_runtime,
    tool_from_spec,
)
from crank.schema import problems_of
from crank.schema.compact import compact_tool, policy_of, shorten
from crank.types import JSONObject
from crank.wire.auth import Principal

__all__ = [
    "API_KEY_PREFIX",
    "RUNTIME_OPERATION_FIELDS",
    "AgentDraft",
    "ApiKeyInfo",
    "KeyScope",
    "PublishedAgent",
    "Registry",
    "VersionInfo",
    "WorkspaceOAuth",
    "key_digest",
    "tool_name_of",
]

RUNTIME_OPERATION_FIELDS = (
    "protocol", "target", "input_schema", "output_schema", "input_mapping", "output_mapping", "execution_config",
)  # fmt: skip
"""What a published tool keeps of its operation (besides its description, hints and result format, which
the binding may override); samples, import metadata and UI fields stay in the draft."""


_Draft = TypeVar("_Draft", Operation, Agent)


def tool_name_of(binding: JSONObject) -> str:
    """The name a binding publishes its operation under: its own `tool_name`, else the operation's name."""
    return str(binding.get("tool_name") or binding.get("operation"))


API_KEY_PREFIX: Final = "crk_"
"""Every API key starts with it: an authenticator tells a key from an OAuth access token by its shape."""


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyScope(Principal):
    """A gateway principal: where its credentials are valid (one workspace, and all its agents (None) or some of
    them) and the limits the gateway holds its requests to (docs/gateway.md, Rate limits and quotas). An API
    key's, or an OAuth token's (`method` jwt or introspection, limited by `id`: its issuer and subject)."""

    limits: Limits | None = None
    """Its tool calls: a key's own limits, else its workspace's `key_limits` (a token's: per subject); None: no
    limit."""
    workspace_limits: Limits | None = None
    """Every request to the workspace, whoever sends it; None: no limit."""

    def allows(self, workspace: str, agent: str) -> bool:
        return workspace == self.workspace and (self.agents is None or agent in self.agents)


@dataclass(frozen=True)
class WorkspaceOAuth:
    """A workspace's OAuth policy as the MCP side keeps it, with the limits its token principals carry."""

    policy: OAuthPolicy
    limits: Limits | None = None
    key_limits: Limits | None = None


@dataclass(frozen=True)
class ApiKeyInfo:
    """What the registry can tell of a key without the key itself (it keeps only a digest)."""

    id: str
    workspace: str
    agents: list[str] | None
    created_at: str
    limits: JSONObject | None = None
    """The key's own limits (`Limits` as JSON); None: its workspace's `key_limits`."""


@dataclass(frozen=True)
class OperationSummary:
    """What a list of operations shows of each (`Registry.operation_summaries`)."""

    name: str
    protocol: str
    method: str | None
    url: str
    description: str


@dataclass(frozen=True)
class VersionInfo:
    version: int
    created_at: str
    current: bool


@dataclass(frozen=True)
class AgentDraft:
    """An agent as it will be applied: its draft spec (description and bindings)."""

    slug: str
    spec: JSONObject


@dataclass(frozen=True)
class PublishedAgent:
    workspace: str
    agent: str
    version: int
    stored: JSONObject
    """The view as its row holds it, in whatever format version wrote it."""

    @cached_property
    def runtime(self) -> RuntimeView:
        """The typed view, read on first use: a reload reads only the versions it builds, and a row that
        cannot be read fails that agent alone (`ConfigurationError`), not the whole list."""
        return load_runtime(self.stored, where=f"agent {self.workspace}/{self.agent} version {self.version}")


class Registry:
    """`announce`: told each new generation after its change commits (`crank.registry.changes.RedisAnnouncer`
    for a registry that is not PostgreSQL; PostgreSQL announces in the transaction itself)."""

    def __init__(self, engine: Engine, *, announce: Callable[[int], None] | None = None) -> None:
        self.engine = engine
        self.announce = announce
        self._notify = engine.dialect.name == "postgresql"
        # Transactions that write take SQLite's write lock when they begin (see `crank.registry.database`),
        # so a read-modify-write never loses a concurrent change; reads stay concurrent.
        self._writer = engine.execution_options(crank_write=True)

    # -- drafts ------------------------------------------------------------------------------------

    def create_workspace(
        self, slug: str, name: str, default_language: str = "en", *, created_by: str | None = None
    ) -> None:
        """A new workspace (`RegistryConflictError` if the slug is taken); `created_by`: the tool that makes it
        and may write into it later unasked (`crank serve --openapi`)."""
        with Session(self._writer) as session, session.begin():
            session.add(Workspace(slug=slug, name=name, default_language=default_language, created_by=created_by))
            try:
                session.flush()
            except IntegrityError:
                raise RegistryConflictError(f"workspace {slug!r} already exists") from None

    def put_workspace(
        self,
        slug: str,
        name: str,
        default_language: str = "en",
        token_budget: int | None = None,
        compact: JSONObject | None = None,
        limits: Limits | None = None,
        key_limits: Limits | None = None,
    ) -> None:
        """Create the workspace, or update its name, default language, token budget, `compact` settings and
        limits (of every request, and of each key without its own)."""
        with Session(self._writer) as session, session.begin():
            ws = self._put_workspace(session, slug, name, default_language, token_budget, compact)
            self._put_limits(session, ws, limits, key_limits)

    def adopt_workspace(self, slug: str, created_by: str) -> None:
        """Record `created_by` for a workspace that has none (one made before the column existed)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, slug)
            if ws.created_by is None:
                ws.created_by = created_by

    def workspaces(self) -> list[JSONObject]:
        with Session(self.engine) as session:
            rows = session.scalars(select(Workspace).order_by(Workspace.slug)).all()
            return [_workspace_info(row) for row in rows]

    def workspace(self, slug: str) -> JSONObject:
        with Session(self.engine) as session:
            return _workspace_info(self._workspace(session, slug))

    def operations(self, workspace: str) -> dict[str, JSONObject]:
        """Every operation draft of the workspace, by name."""
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            rows = session.scalars(select(Operation).filter_by(workspace_id=ws.id).order_by(Operation.name)).all()
            return {row.name: dict(row.spec) for row in rows}

    def operation_summaries(self, workspace: str) -> list[OperationSummary]:
        """Each operation draft's name, protocol, target and description, by name: read from the database
        without loading whole drafts (a workspace of a thousand operations lists in milliseconds)."""
        spec = Operation.spec
        columns = (Operation.name, spec["protocol"].as_string(), spec["target"]["method"].as_string(),
                   spec["target"]["url"].as_string(), spec["description"].as_string())  # fmt: skip
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            query = select(*columns).where(Operation.workspace_id == ws.id).order_by(Operation.name)
            rows = session.execute(query).all()
        return [OperationSummary(row[0], row[1] or "http", row[2], row[3] or "", row[4] or "") for row in rows]

    def operation_names(self) -> dict[str, str]:
        """Every operation's name by id, across workspaces (runtime views keep ids; reports show names)."""
        with Session(self.engine) as session:
            return {row[0]: row[1] for row in session.execute(select(Operation.id, Operation.name)).all()}

    def operation(self, workspace: str, name: str) -> JSONObject:
        with Session(self.engine) as session:
            return dict(self._operation(session, self._workspace(session, workspace), name).spec)

    def delete_operation(self, workspace: str, name: str) -> None:
        """Remove an operation's draft. Published versions keep their own copy and keep serving."""
        with Session(self._writer) as session, session.begin():
            session.delete(self._operation(session, self._workspace(session, workspace), name))

    def put_operations(self, workspace: str, specs: dict[str, JSONObject]) -> None:
        """Create or replace many operation drafts in one transaction (an import: all or nothing)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            for name, spec in specs.items():
                self._put_row(session, Operation, ws, {"name": name}, spec)

    def update_operations(
        self,
        workspace: str,
        put: dict[str, JSONObject],
        *,
        delete: Iterable[str] = (),
        republish: Iterable[str] = (),
        check: Callable[[RuntimeView], None] | None = None,
        dry_run: bool = False,
    ) -> dict[str, tuple[int, bool]]:
        """Write operation drafts, delete others (and every binding to them from the agent drafts), and
        publish each published agent that binds an operation named in `republish` (an unchanged runtime
        view publishes nothing), all in one transaction. Returns each such agent's served version and
        whether it is new. With `dry_run` all of it runs, checks included, and is rolled back."""
        gone, touched = set(delete), set(republish)
        with Session(self._writer) as session:
            transaction = session.begin()
            try:
                ws = self._workspace(session, workspace)
                for name, spec in put.items():
                    self._put_row(session, Operation, ws, {"name": name}, spec)
                for name in sorted(gone):
                    session.delete(self._operation(session, ws, name))
                agents = session.scalars(select(Agent).filter_by(workspace_id=ws.id).order_by(Agent.slug)).all()
                served = []
                for agent in agents:
                    bindings = list(agent.spec.get("bindings", []))
                    if agent.published_version is not None and any(b.get("operation") in touched for b in bindings):
                        served.append(agent)
                    if any(binding.get("operation") in gone for binding in bindings):
                        kept = [binding for binding in bindings if binding.get("operation") not in gone]
                        agent.spec = {**agent.spec, "bindings": kept}
                session.flush()
                versions = {agent.slug: self._publish(session, ws, agent, check, True) for agent in served}
            except BaseException:
                transaction.rollback()
                raise
            if dry_run:
                transaction.rollback()
            else:
                transaction.commit()
        return versions

    def edit_agent(self, workspace: str, slug: str, edit: Callable[[JSONObject], JSONObject]) -> None:
        """Read, change and write an agent's draft in one transaction, the row locked (PostgreSQL) or the
        database written by one writer at a time (SQLite): two concurrent edits never lose one another."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            agent = session.scalar(select(Agent).filter_by(workspace_id=ws.id, slug=slug).with_for_update())
            if agent is None:
                raise RegistryNotFoundError(f"no agent {slug!r} in workspace {ws.slug!r}")
            agent.spec = dict(edit(dict(agent.spec)))

    def agents(self, workspace: str) -> list[JSONObject]:
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            rows = session.scalars(select(Agent).filter_by(workspace_id=ws.id).order_by(Agent.slug)).all()
            return [_agent_info(row) for row in rows]

    def agent(self, workspace: str, slug: str) -> JSONObject:
        """The agent's draft (description, bindings) and the version it serves."""
        with Session(self.engine) as session:
            return _agent_info(self._agent(session, self._workspace(session, workspace), slug))

    def put_operation(self, workspace: str, name: str, spec: JSONObject) -> None:
        """Create or replace an operation's draft."""
        self._put_draft(Operation, workspace, {"name": name}, spec)

    def put_agent(self, workspace: str, slug: str, spec: JSONObject) -> None:
        """Create or replace an agent's draft (description and bindings)."""
        self._put_draft(Agent, workspace, {"slug": slug}, spec)

    def _put_draft(self, model: type[_Draft], workspace: str, key: dict[str, str], spec: JSONObject) -> None:
        with Session(self._writer) as session, session.begin():
            self._put_row(session, model, self._workspace(session, workspace), key, spec)

    @staticmethod
    def _put_row(session: Session, model: type[_Draft], ws: Workspace, key: dict[str, str], spec: JSONObject) -> None:
        row = session.scalar(select(model).filter_by(workspace_id=ws.id, **key))
        if row is None:
            session.add(model(workspace_id=ws.id, spec=dict(spec), **key))
        else:
            row.spec = dict(spec)

    def apply(
        self,
        workspace: JSONObject,
        operations: dict[str, JSONObject],
        agents: list[AgentDraft],
        check: Callable[[RuntimeView], None] | None = None,
    ) -> dict[str, tuple[int, bool]]:
        """Create or update a workspace, its operations and agents, and publish every agent whose runtime
        view changed, all in one transaction. Returns each agent's served version and whether it is new."""
        with Session(self._writer) as session, session.begin():
            language = workspace.get("default_language") or DEFAULT_LANGUAGE
            ws = self._put_workspace(
                session,
                workspace["slug"],
                workspace["name"],
                language,
                workspace.get("token_budget"),
                workspace.get("compact"),
            )
            self._put_limits(session, ws, _limits_of(workspace.get("limits")), _limits_of(workspace.get("key_limits")))
            oauth = workspace.get("oauth")
            self._put_oauth(session, ws, None if oauth is None else OAuthPolicy.model_validate(oauth))
            credentials = workspace.get("credentials")
            ws.credentials = {scheme: SchemeCredential.model_validate(given).model_dump(mode="json", exclude_none=True)
                              for scheme, given in (credentials or {}).items()} or None  # fmt: skip
            for name, spec in operations.items():
                self._put_row(session, Operation, ws, {"name": name}, spec)
            for draft in agents:
                self._put_row(session, Agent, ws, {"slug": draft.slug}, draft.spec)
            session.flush()
            return {
                draft.slug: self._publish(session, ws, self._agent(session, ws, draft.slug), check, skip_unchanged=True)
                for draft in agents
            }

    def _put_workspace(
        self,
        session: Session,
        slug: str,
        name: str,
        default_language: str,
        token_budget: int | None,
        compact: JSONObject | None = None,
    ) -> Workspace:
        ws = session.scalar(select(Workspace).filter_by(slug=slug))
        if ws is None:
            ws = Workspace(slug=slug, name=name, default_language=default_language, token_budget=token_budget)
            session.add(ws)
        ws.name, ws.default_language, ws.token_budget = name, default_language, token_budget
        settings = {key: value for key, value in (compact or {}).items() if value is not None}
        ws.compact = settings or None
        session.flush()
        return ws

    def _put_limits(self, session: Session, ws: Workspace, limits: Limits | None, key_limits: Limits | None) -> None:
        """Write the workspace's limits; a change bumps the generation, so every replica reloads its keys (which
        carry them) as it would after a publish."""
        stored = _limits_json(limits), _limits_json(key_limits)
        if (ws.limits, ws.key_limits) != stored:
            ws.limits, ws.key_limits = stored
            self._bump(session)

    # -- publishing --------------------------------------------------------------------------------

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
        if check is not None:
            check(runtime)
        if skip_unchanged and agent.published_version is not None:
            served = session.scalar(
                select(AgentVersion.runtime).filter_by(agent_id=agent.id, version=agent.published_version)
            )
            if _same_view(served, runtime):
                return agent.published_version, False
        latest = session.scalar(select(func.max(AgentVersion.version)).filter_by(agent_id=agent.id)) or 0
        session.add(AgentVersion(agent_id=agent.id, version=latest + 1, runtime=runtime.to_json()))
        agent.published_version = latest + 1
        self._bump(session)
        return latest + 1, True

    def rollback(self, workspace: str, agent_slug: str, version: int) -> None:
        """Serve an earlier published version again."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            agent = self._agent(session, ws, agent_slug)
            if session.scalar(select(AgentVersion).filter_by(agent_id=agent.id, version=version)) is None:
                raise RegistryNotFoundError(f"agent {workspace}/{agent_slug} has no version {version}")
            agent.published_version = version
            self._bump(session)

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

    # -- API keys ----------------------------------------------------------------------------------

    def create_api_key(
        self, workspace: str, agents: Iterable[str] | None = None, *, limits: Limits | None = None
    ) -> str:
        """A new key for the workspace (optionally only some agents, with limits of its own). Shown once: only
        its digest is kept."""
        return self.issue_api_key(workspace, agents, limits=limits)[1]

    def issue_api_key(
        self, workspace: str, agents: Iterable[str] | None = None, *, limits: Limits | None = None
    ) -> tuple[ApiKeyInfo, str]:
        """A new key and what the registry will know of it (its id names it in `api_key_infos` and
        `delete_api_key`)."""
        key = API_KEY_PREFIX + secrets.token_urlsafe(32)
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            scope = {"agents": sorted(agents)} if agents is not None else None
            row = ApiKey(workspace_id=ws.id, digest=key_digest(key), agents=scope, limits=_limits_json(limits))
            session.add(row)
            session.flush()
            info = _key_info(row, workspace)
            self._bump(session)
        return info, key

    def api_key_infos(self, workspace: str) -> list[ApiKeyInfo]:
        """The workspace's keys, oldest first (ids, scopes and dates; never a key)."""
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            rows = session.scalars(select(ApiKey).filter_by(workspace_id=ws.id).order_by(ApiKey.created_at))
            return [_key_info(row, workspace) for row in rows]

    def set_api_key_limits(self, workspace: str, key_id: str, limits: Limits | None) -> ApiKeyInfo:
        """Give a key limits of its own (None: its workspace's `key_limits` again); replicas hold it to them
        when they reload (like a publish)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            row = session.scalar(select(ApiKey).filter_by(workspace_id=ws.id, id=key_id))
            if row is None:
                raise RegistryNotFoundError(f"workspace {workspace!r} has no API key {key_id!r}")
            row.limits = _limits_json(limits)
            self._bump(session)
            return _key_info(row, workspace)

    def delete_api_key(self, workspace: str, key_id: str) -> None:
        """Revoke a key by its id; replicas stop accepting it when they reload (like a publish)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            row = session.scalar(select(ApiKey).filter_by(workspace_id=ws.id, id=key_id))
            if row is None:
                raise RegistryNotFoundError(f"workspace {workspace!r} has no API key {key_id!r}")
            session.delete(row)
            self._bump(session)

    def revoke_api_key(self, key: str) -> None:
        with Session(self._writer) as session, session.begin():
            row = session.scalar(select(ApiKey).filter_by(digest=key_digest(key)))
            if row is None:
                raise RegistryNotFoundError("no such API key")
            session.delete(row)
            self._bump(session)

    def api_key(self, digest: str) -> KeyScope | None:
        """One key's scope by its digest, or None when the registry has no such key."""
        query = _KEY_SCOPES.where(ApiKey.digest == digest)
        with Session(self.engine) as session:
            row: Any = session.execute(query).first()
        return None if row is None else _key_scope(*row[1:])

    def set_workspace_oauth(self, workspace: str, policy: OAuthPolicy | None) -> None:
        """Give the workspace an OAuth policy (None: API keys only again); every replica applies it when it
        reloads, as after a publish."""
        with Session(self._writer) as session, session.begin():
            self._put_oauth(session, self._workspace(session, workspace), policy)

    def _put_oauth(self, session: Session, ws: Workspace, policy: OAuthPolicy | None) -> None:
        stored = None if policy is None else policy.model_dump(mode="json", exclude_defaults=True)
        if ws.oauth != stored:
            ws.oauth = stored
            self._bump(session)

    def set_workspace_credential(self, workspace: str, scheme: str, credential: SchemeCredential | None) -> None:
        """Give the workspace a credential for a security scheme (None: take it away). Agents pick it up at their
        next publish (`crank publish`, or `crank operation republish` for every agent of an operation)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            credentials = dict(ws.credentials or {})
            if credential is None:
                credentials.pop(scheme, None)
            else:
                credentials[scheme] = credential.model_dump(mode="json", exclude_none=True)
            ws.credentials = credentials or None

    def workspace_credentials(self, workspace: str) -> dict[str, SchemeCredential]:
        """The workspace's credentials by scheme (references, never values)."""
        with Session(self.engine) as session:
            stored = self._workspace(session, workspace).credentials or {}
        return {scheme: SchemeCredential.model_validate(given) for scheme, given in stored.items()}

    def workspace_oauth_policy(self, workspace: str) -> OAuthPolicy | None:
        with Session(self.engine) as session:
            stored = self._workspace(session, workspace).oauth
        return None if stored is None else OAuthPolicy.model_validate(stored)

    def workspace_oauth(self) -> dict[str, WorkspaceOAuth]:
        """Every workspace's OAuth policy by slug, for those that have one (the MCP side reloads it with the
        generation)."""
        query = select(Workspace.slug, Workspace.oauth, Workspace.limits, Workspace.key_limits).where(
            Workspace.oauth.is_not(None)
        )
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(query).all())
        return {
            row[0]: WorkspaceOAuth(OAuthPolicy.model_validate(row[1]), _limits_of(row[2]), _limits_of(row[3]))
            for row in rows
            if row[1] is not None
        }

    def api_keys(self) -> dict[str, KeyScope]:
        """Every key's scope by digest (the MCP side keeps this in memory and reloads it with the generation)."""
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(_KEY_SCOPES).all())
        return {row[0]: _key_scope(*row[1:]) for row in rows}

    # -- what the MCP side reads -------------------------------------------------------------------

    def generation(self) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(RegistryState.generation).filter_by(id=1)) or 0

    def published(self) -> list[PublishedAgent]:
        """Every agent's currently published runtime view."""
        query = (
            select(Workspace.slug, Agent.slug, AgentVersion.version, AgentVersion.runtime)
            .join(Agent, Agent.workspace_id == Workspace.id)
            .join(AgentVersion, (AgentVersion.agent_id == Agent.id) & (AgentVersion.version == Agent.published_version))
        )
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(query).all())
        return [PublishedAgent(row[0], row[1], row[2], row[3]) for row in rows]

    # -- helpers -----------------------------------------------------------------------------------

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

    @staticmethod
    def _workspace(session: Session, slug: str) -> Workspace:
        ws = session.scalar(select(Workspace).filter_by(slug=slug))
        if ws is None:
            raise RegistryNotFoundError(f"no workspace {slug!r}")
        return ws

    @staticmethod
    def _agent(session: Session, ws: Workspace, slug: str) -> Agent:
        agent = session.scalar(select(Agent).filter_by(workspace_id=ws.id, slug=slug))
        if agent is None:
            raise RegistryNotFoundError(f"no agent {slug!r} in workspace {ws.slug!r}")
        return agent

    @staticmethod
    def _operation(session: Session, ws: Workspace, name: str) -> Operation:
        operation = session.scalar(select(Operation).filter_by(workspace_id=ws.id, name=name))
        if operation is None:
            raise RegistryNotFoundError(f"no operation {name!r} in workspace {ws.slug!r}")
        return operation

    def _bump(self, session: Session) -> None:
        """The next generation, announced to every replica when the transaction commits (and never when it
        rolls back): PostgreSQL delivers a NOTIFY on commit; the `announce` hook runs after it."""
        generation = session.execute(
            update(RegistryState)
            .where(RegistryState.id == 1)
            .values(generation=RegistryState.generation + 1)
            .returning(RegistryState.generation)
        ).scalar_one()
        if self._notify:
            session.execute(select(func.pg_notify(POSTGRES_CHANNEL, str(generation))))
        if self.announce is not None:
            if "crank_announce" not in session.info:  # once per transaction, with its last generation
                event.listen(session, "after_commit", self._announce_committed)
            session.info["crank_announce"] = generation

    def _announce_committed(self, session: Session) -> None:
        if self.announce is not None:
            self.announce(session.info.pop("crank_announce"))


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


def _key_info(row: ApiKey, workspace: str) -> ApiKeyInfo:
    agents = list(row.agents["agents"]) if row.agents is not None else None
    return ApiKeyInfo(row.id, workspace, agents, row.created_at.isoformat(), row.limits)


def _workspace_info(row: Workspace) -> JSONObject:
    return {
        "slug": row.slug,
        "name": row.name,
        "default_language": row.default_language,
        "token_budget": row.token_budget,
        "compact": row.compact,
        "limits": row.limits,
        "key_limits": row.key_limits,
        "created_by": row.created_by,
    }


def _agent_info(row: Agent) -> JSONObject:
    return {
        "slug": row.slug,
        "description": row.spec.get("description"),
        "bindings": list(row.spec.get("bindings", [])),
        "token_budget": row.spec.get("token_budget"),
        "mode": row.spec.get("mode") or DEFAULT_AGENT_MODE,
        "compact": row.spec.get("compact"),
        "limits": row.spec.get("limits"),
        "published_version": row.published_version,
    }


# A key's scope: its digest, id, workspace, agents, own limits, and its workspace's limits and key limits.
_KEY_SCOPES = select(
    ApiKey.digest, ApiKey.id, Workspace.slug, ApiKey.agents, ApiKey.limits, Workspace.limits, Workspace.key_limits
).join(Workspace, Workspace.id == ApiKey.workspace_id)


def _key_scope(
    key_id: str,
    workspace: str,
    scope: JSONObject | None,
    limits: JSONObject | None,
    workspace_limits: JSONObject | None,
    key_limits: JSONObject | None,
) -> KeyScope:
    """A key's scope from its row: its workspace, the agents it is limited to (None: all of them), its limits
    (its own, else its workspace's for each key) and its workspace's."""
    return KeyScope(
        workspace,
        frozenset(scope["agents"]) if scope is not None else None,
        id=key_id,
        subject=key_id,
        limits=_limits_of(limits if limits is not None else key_limits),
        workspace_limits=_limits_of(workspace_limits),
    )


def _limits_of(stored: Any) -> Limits | None:
    """Stored limits as the model (a row the admin models checked); None for none, or for no limit at all."""
    if stored is None:
        return None
    limits = stored if isinstance(stored, Limits) else Limits.model_validate(stored)
    return None if limits.empty else limits


def _limits_json(limits: Limits | None) -> JSONObject | None:
    return None if limits is None or limits.empty else limits.model_dump(mode="json", exclude_none=True)


def _agent_limits(stored: Any, where: str) -> Limits | None:
    """An agent draft's limits for its runtime view; a draft that holds wrong ones fails the publish."""
    try:
        return _limits_of(stored)
    except ValidationError as exc:
        raise RegistryError(f"{where}: limits: {exc.errors()[0]['msg']}") from None
