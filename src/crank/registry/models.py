"""The registry's tables (SQLAlchemy 2). Drafts are edited in place; a publish writes an immutable
`AgentVersion` holding the runtime view, which is all the MCP side ever reads."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "Agent", "AgentVersion", "ApiKey", "AuditBatch", "AuditHead", "Base", "Operation", "RegistryState", "VaultEntry",
    "Workspace",
]  # fmt: skip

JSONType = JSON().with_variant(JSONB(), "postgresql")


# 64-bit on PostgreSQL (one row per workspace and flush and replica would run out of 32 bits); SQLite's own
# INTEGER PRIMARY KEY is 64-bit already and must stay spelled so to be its rowid.
_BIG_ID = BigInteger().with_variant(Integer, "sqlite")


def _id() -> str:
    return uuid.uuid4().hex


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType}


class Workspace(Base):
    __tablename__ = "workspaces"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_id)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    default_language: Mapped[str] = mapped_column(String(16), default="en")
    token_budget: Mapped[int | None] = mapped_column(Integer, default=None)
    """The default token budget of the workspace's agents (an agent's own `token_budget` wins)."""
    compact: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The workspace's `compact` settings (`crank.schema.compact`); its agents' and operations' own win."""
    limits: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The rate limit and quota of every request to the workspace (`crank.registry.runtime.Limits`)."""
    key_limits: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The limits of each of its API keys' tool calls that has none of its own."""
    credentials: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """Upstream credentials by security scheme name (`crank.registry.runtime.SchemeCredential`, references only)."""
    oauth: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The workspace's OAuth policy (`crank.registry.runtime.OAuthPolicy`); null: API keys only."""
    created_by: Mapped[str | None] = mapped_column(String(64), default=None)
    """The tool that made the workspace and may write into it unasked (`crank.instant.CREATED_BY`); null: made
    by an operator (the CLI, the admin API, a catalog file)."""
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class Operation(Base):
    """A remote call recipe; `spec` holds the draft (runtime fields plus samples and import metadata)."""

    __tablename__ = "operations"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    updated_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now, onupdate=_now)


class Agent(Base):
    """A curated toolset; `spec` holds the draft description and bindings."""

    __tablename__ = "agents"
    __table_args__ = (UniqueConstraint("workspace_id", "slug"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    slug: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    published_version: Mapped[int | None] = mapped_column(Integer, default=None)
    versions: Mapped[list[AgentVersion]] = relationship(back_populates="agent", order_by="AgentVersion.version")


class AgentVersion(Base):
    """An immutable published snapshot: the runtime view of seed 003 section 6, per tool."""

    __tablename__ = "agent_versions"
    __table_args__ = (UniqueConstraint("agent_id", "version"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_id)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    runtime: Mapped[dict[str, Any]] = mapped_column()
    tools: Mapped[int] = mapped_column(Integer, default=0)
    """How many tools the view has: what building it costs, known without reading the view (a replica's index)."""
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    agent: Mapped[Agent] = relationship(back_populates="versions")


class ApiKey(Base):
    """A workspace's API key, stored as a SHA-256 digest (keys are 256-bit random tokens, so a slow
    password hash would add latency to every call without adding safety). `agents` limits the key to
    some agents of the workspace; null means all of them."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    agents: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    limits: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    """The limits of the key's tool calls (`crank.registry.runtime.Limits`); null: its workspace's `key_limits`."""
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now)


class VaultEntry(Base):
    """One user's secret for one security scheme of a workspace (`crank.registry.vault`): encrypted with AES-GCM under
    the vault key `key_id` names, its identity (workspace, scheme, issuer, subject) bound in as associated data, so
    that the database alone reveals nothing and a row copied to another user does not decrypt."""

    __tablename__ = "vault_entries"
    __table_args__ = (UniqueConstraint("workspace_id", "scheme", "issuer", "subject"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_id)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id", ondelete="CASCADE"))
    scheme: Mapped[str] = mapped_column(String(128))
    issuer: Mapped[str] = mapped_column(String(512))
    subject: Mapped[str] = mapped_column(String(256))
    key_id: Mapped[str] = mapped_column(String(16))
    nonce: Mapped[bytes] = mapped_column(LargeBinary(12))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now)
    updated_at: Mapped[datetime.datetime] = mapped_column(DateTime(timezone=True), default=_now, onupdate=_now)


class RegistryState(Base):
    """One row; `generation` grows with every change that replicas serve (a publish, a rollback, a key, a
    workspace's policy or limits), so MCP replicas notice by polling it. `changes_from`: the change log
    (`RegistryChange`) holds every change of the generations after it."""

    __tablename__ = "registry_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(Integer, default=0)
    changes_from: Mapped[int] = mapped_column(Integer, default=0)


class RegistryChange(Base):
    """What one generation changed: an agent (`kind` "agent", `name` its slug), a workspace's policy or limits
    ("workspace"), or an API key ("key", `name` its digest). Replicas reload only these (`changes_since`)."""

    __tablename__ = "registry_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    generation: Mapped[int] = mapped_column(Integer, index=True)
    kind: Mapped[str] = mapped_column(String(16))
    workspace: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(128), default=None)


class AuditBatch(Base):
    """Consecutive records of one workspace's audit trail (crank.registry.audit), written together: `records` is
    their JSON array as written, and `hash` is SHA-256 over the hash before it (`prev_hash`), the workspace,
    `first_seq` and that text, so that a change, a removal or an insertion breaks the chain. `first_at`,
    `last_at`: the earliest and latest record's time, microseconds since the epoch, for reading by time."""

    __tablename__ = "audit_batches"
    __table_args__ = (
        UniqueConstraint("workspace", "first_seq"),
        CheckConstraint("first_seq >= 1 AND last_seq >= first_seq", name="audit_batches_numbered"),
    )

    id: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    workspace: Mapped[str] = mapped_column(String(64), index=True)
    first_seq: Mapped[int] = mapped_column(BigInteger)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    first_at: Mapped[int] = mapped_column(BigInteger)
    last_at: Mapped[int] = mapped_column(BigInteger, index=True)
    records: Mapped[str] = mapped_column(Text)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditHead(Base):
    """The last record of each workspace's audit trail: its `seq` and `hash`. Appends lock this row (PostgreSQL),
    so that replicas writing the same workspace's trail take turns and the chain never forks."""

    __tablename__ = "audit_heads"

    workspace: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, default=0)
    hash: Mapped[str] = mapped_column(String(64))
