"""`Registry`: workspaces, drafts, their OAuth policies and credentials, and what the MCP side reads; with its
parts, publishing (`crank.registry.publishing`) and API keys (`crank.registry.keys`), on one base
(`crank.registry.base`).

A publish is one transaction: it reads the agent's draft and the drafts of the operations it binds,
builds the runtime view (a `crank.registry.runtime.RuntimeView`: only the runtime fields of seed 003
section 6, typed), lets the caller check it (the gateway compiles the catalog, so a bad tool fails the
publish, not a request), writes an immutable version, points the agent at it and bumps the registry
generation. A failure anywhere rolls all of it back: the previous version keeps serving and nothing is
half-written.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Select, or_, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from crank.exceptions import RegistryConflictError, RegistryNotFoundError
from crank.registry.base import limits_json, limits_of
from crank.registry.change_log import Change, Changes, read_since
from crank.registry.keys import ApiKeyStore
from crank.registry.models import Agent, AgentVersion, Operation, RegistryState, Workspace
from crank.registry.publishing import Publishing
from crank.registry.runtime import (
    DEFAULT_AGENT_MODE,
    DEFAULT_LANGUAGE,
    Limits,
    OAuthPolicy,
    RuntimeView,
    SchemeCredential,
    load_runtime,
)
from crank.types import JSONObject

__all__ = ["AgentDraft", "OperationSummary", "PublishedAgent", "Registry", "WorkspaceOAuth"]

_Draft = TypeVar("_Draft", Operation, Agent)


@dataclass(frozen=True)
class WorkspaceOAuth:
    """A workspace's OAuth policy as the MCP side keeps it, with the limits its token principals carry."""

    policy: OAuthPolicy
    limits: Limits | None = None
    key_limits: Limits | None = None


@dataclass(frozen=True)
class OperationSummary:
    """What a list of operations shows of each (`Registry.operation_summaries`)."""

    name: str
    protocol: str
    method: str | None
    url: str
    description: str


@dataclass(frozen=True)
class AgentDraft:
    """An agent as it will be applied: its draft spec (description and bindings)."""

    slug: str
    spec: JSONObject


class PublishedVersion(NamedTuple):
    """An agent's published version in a replica's index: what may be built, and what building it costs."""

    version: int
    tools: int


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


class Registry(Publishing, ApiKeyStore):
    """The registry of one database: its drafts here, its publishing and API keys from their parts, its engine and
    generation from `RegistryBase` (`Registry(engine, announce=...)`)."""

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
            self._put_limits(session, ws, limits_of(workspace.get("limits")), limits_of(workspace.get("key_limits")))
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
        stored = limits_json(limits), limits_json(key_limits)
        if (ws.limits, ws.key_limits) != stored:
            ws.limits, ws.key_limits = stored
            self._bump(session, Change("workspace", ws.slug))

    def set_workspace_oauth(self, workspace: str, policy: OAuthPolicy | None) -> None:
        """Give the workspace an OAuth policy (None: API keys only again); every replica applies it when it
        reloads, as after a publish."""
        with Session(self._writer) as session, session.begin():
            self._put_oauth(session, self._workspace(session, workspace), policy)

    def _put_oauth(self, session: Session, ws: Workspace, policy: OAuthPolicy | None) -> None:
        stored = None if policy is None else policy.model_dump(mode="json", exclude_defaults=True)
        if ws.oauth != stored:
            ws.oauth = stored
            self._bump(session, Change("workspace", ws.slug))

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

    def workspace_oauth(self, workspaces: Collection[str] | None = None) -> dict[str, WorkspaceOAuth]:
        """The OAuth policy of each of these workspaces (every workspace without `workspaces`) that has one, with
        its limits, by slug (a replica reads a workspace's when a request first names it)."""
        query = select(Workspace.slug, Workspace.oauth, Workspace.limits, Workspace.key_limits).where(
            Workspace.oauth.is_not(None)
        )
        if workspaces is not None:
            query = query.where(Workspace.slug.in_(workspaces))
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(query).all())
        return {
            row[0]: WorkspaceOAuth(OAuthPolicy.model_validate(row[1]), limits_of(row[2]), limits_of(row[3]))
            for row in rows
            if row[1] is not None
        }

    def generation(self) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(RegistryState.generation).filter_by(id=1)) or 0

    def changes_since(self, generation: int) -> Changes:
        """What changed after `generation`, up to the current one (`crank.registry.change_log`)."""
        with Session(self.engine) as session:
            return read_since(session, generation)

    def published_versions(self, changes: Changes | None = None) -> dict[tuple[str, str], PublishedVersion]:
        """The published version of every published agent by (workspace, agent) and its number of tools, without
        their views (a replica's index of what it may build); with `changes`, of the agents they may change only."""
        query = (
            select(Workspace.slug, Agent.slug, AgentVersion.version, AgentVersion.tools)
            .join(Agent, Agent.workspace_id == Workspace.id)
            .join(AgentVersion, (AgentVersion.agent_id == Agent.id) & (AgentVersion.version == Agent.published_version))
        )
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(_changed_agents(query, changes)).all())
        return {(row[0], row[1]): PublishedVersion(row[2], row[3]) for row in rows}

    def published(self, changes: Changes | None = None) -> list[PublishedAgent]:
        """Every agent's currently published runtime view; with `changes`, of the agents they may change only
        (those published or rolled back, and every agent of a workspace whose policy changed)."""
        query = (
            select(Workspace.slug, Agent.slug, AgentVersion.version, AgentVersion.runtime)
            .join(Agent, Agent.workspace_id == Workspace.id)
            .join(AgentVersion, (AgentVersion.agent_id == Agent.id) & (AgentVersion.version == Agent.published_version))
        )
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(_changed_agents(query, changes)).all())
        return [PublishedAgent(row[0], row[1], row[2], row[3]) for row in rows]

    # -- helpers -----------------------------------------------------------------------------------


_Query = TypeVar("_Query", bound="Select[*tuple[Any, ...]]")  # a select of any row shape


def _changed_agents(query: _Query, changes: Changes | None) -> _Query:
    """`query` (over workspaces and agents) limited to the agents `changes` may change: those named, and every
    agent of a workspace named; all of them without changes, or when they are `everything`."""
    if changes is None or changes.everything:
        return query
    # A row-value IN, not an OR of pairs: SQLite refuses an expression deeper than 1,000 terms.
    named = tuple_(Workspace.slug, Agent.slug).in_(sorted(changes.agents))
    return query.where(or_(Workspace.slug.in_(changes.workspaces), named))


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
