"""The audit trail: every tool call, kept in the registry's database, chained by hash per workspace.

Each record holds when, which agent and tool, who (the principal's method, subject, client id, key or token id,
issuer), a SHA-256 digest of the arguments (never the arguments themselves), the outcome (`ok`, or the error code
the client got), the latency, the request id and the trace id. Its `hash` is SHA-256 over the hash before it and
the record's fields in canonical JSON, and `seq` numbers the workspace's records from 1; the workspace's head row
(`audit_heads`) holds the last. Appends lock the head (PostgreSQL `SELECT ... FOR UPDATE`), so replicas writing
one workspace's trail take turns and the chain never forks.

`verify` walks a workspace's records in order and reports the first that does not follow from the one before
(changed, removed or inserted), and a head that does not match the last record (records removed at the end). A
trail cut short together with a rewritten head is found only against a head kept elsewhere: `crank audit verify`
prints each head, to be kept by whoever needs that.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from crank import _json
from crank.registry.models import AuditHead, AuditRecord

__all__ = ["GENESIS", "MAX_RECORDS_READ", "AuditEntry", "AuditLog", "ChainBreak", "StoredRecord"]

GENESIS: Final = "0" * 64
"""The `prev_hash` of a workspace's first record."""
MAX_RECORDS_READ: Final = 10_000
"""Records one read returns at most (`AuditLog.records`)."""
_VERIFY_BATCH: Final = 1_000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One finished tool call, as the gateway saw it, before it is numbered and chained."""

    at: str
    """UTC, ISO 8601 with microseconds: `2026-12-06T12:00:00.000000Z`."""
    workspace: str
    agent: str
    tool: str
    principal: dict[str, str] = field(default_factory=dict)
    arguments_digest: str = ""
    outcome: str = "ok"
    latency_us: int = 0
    request_id: str = ""
    trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as stored: the entry with its place in the chain."""

    seq: int
    entry: AuditEntry
    prev_hash: str
    hash: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, **_fields(self.entry), "prev_hash": self.prev_hash, "hash": self.hash}


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """Where a workspace's chain stops following from itself, and why."""

    workspace: str
    seq: int
    reason: str


class AuditLog:
    """The audit trail in the registry's database (`engine`, migrated)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(crank_write=True)

    def append(self, entries: Sequence[AuditEntry]) -> None:
        """Number and chain `entries` after each workspace's head, in one transaction."""
        by_workspace: dict[str, list[AuditEntry]] = {}
        for entry in entries:
            by_workspace.setdefault(entry.workspace, []).append(entry)
        with Session(self._writer) as session, session.begin():
            for workspace in sorted(by_workspace):  # one order for every writer: no two lock heads in turn
                seq, previous = _locked_head(session, workspace)
                rows = []
                for entry in by_workspace[workspace]:
                    seq += 1
                    digest = chain_hash(previous, seq, entry)
                    rows.append({"seq": seq, **_fields(entry), "prev_hash": previous, "hash": digest})
                    previous = digest
                session.execute(insert(AuditRecord), rows)
                session.execute(
                    update(AuditHead).where(AuditHead.workspace == workspace).values(seq=seq, hash=previous)
                )

    def records(
        self, *, workspace: str | None = None, agent: str | None = None, tool: str | None = None,
        subject: str | None = None, outcome: str | None = None, since: str | None = None, until: str | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]:  # fmt: skip
        """The newest records first, filtered; at most `limit` (and `MAX_RECORDS_READ`). `since`/`until`: ISO 8601
        times, compared as the stored text (`2026-12-06` is the start of that day)."""
        query = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(max(0, min(limit, MAX_RECORDS_READ)))
        for column, value in ((AuditRecord.workspace, workspace), (AuditRecord.agent, agent),
                              (AuditRecord.tool, tool), (AuditRecord.outcome, outcome)):  # fmt: skip
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(AuditRecord.at >= since)
        if until is not None:
            query = query.where(AuditRecord.at < until)
        with Session(self._engine) as session:
            stored = [_stored(row) for row in session.scalars(query)]
        if subject is not None:  # in the principal's JSON: filtered here, the same on every database
            stored = [record for record in stored if record.entry.principal.get("subject") == subject]
        return stored

    def heads(self) -> dict[str, tuple[int, str]]:
        """Each workspace's last record: workspace -> (seq, hash)."""
        with Session(self._engine) as session:
            return {row.workspace: (row.seq, row.hash) for row in session.scalars(select(AuditHead))}

    def verify(self, workspace: str | None = None) -> list[ChainBreak]:
        """The first break of each workspace's chain (of `workspace` only, when given); empty when every chain
        holds. Reads the records in batches."""
        heads = self.heads()
        names = [workspace] if workspace is not None else sorted(heads)
        return [found for name in names if (found := self._verify_one(name, heads.get(name))) is not None]

    def _verify_one(self, workspace: str, head: tuple[int, str] | None) -> ChainBreak | None:
        expected_seq, previous, after = 1, GENESIS, 0
        with Session(self._engine) as session:
            while True:
                query = (select(AuditRecord).where(AuditRecord.workspace == workspace, AuditRecord.seq > after)
                         .order_by(AuditRecord.seq).limit(_VERIFY_BATCH))  # fmt: skip
                rows = list(session.scalars(query))
                for row in rows:
                    record = _stored(row)
                    if record.seq != expected_seq:
                        return ChainBreak(workspace, expected_seq, f"record {expected_seq} is missing")
                    if record.prev_hash != previous:
                        return ChainBreak(workspace, record.seq, "it does not name the hash of the record before it")
                    if chain_hash(previous, record.seq, record.entry) != record.hash:
                        return ChainBreak(workspace, record.seq, "its fields do not match its hash")
                    previous, expected_seq, after = record.hash, expected_seq + 1, record.seq
                if len(rows) < _VERIFY_BATCH:
                    break
        last = expected_seq - 1
        if head is None and last:
            return ChainBreak(workspace, last, "the workspace's head is missing")
        if head is not None and head != (last, previous):
            return ChainBreak(workspace, last + 1, f"the head names record {head[0]}, the trail ends at {last}")
        return None


def chain_hash(previous: str, seq: int, entry: AuditEntry) -> str:
    """SHA-256 of the hash before and the record's fields (its `seq` among them) in canonical JSON."""
    content = _json.dumps_sorted({"seq": seq, **_fields(entry)})
    return hashlib.sha256(previous.encode() + b"\n" + content).hexdigest()


def _fields(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at": entry.at, "workspace": entry.workspace, "agent": entry.agent, "tool": entry.tool,
        "principal": entry.principal, "arguments_digest": entry.arguments_digest, "outcome": entry.outcome,
        "latency_us": entry.latency_us, "request_id": entry.request_id, "trace_id": entry.trace_id,
    }  # fmt: skip


def _stored(row: AuditRecord) -> StoredRecord:
    entry = AuditEntry(
        at=row.at, workspace=row.workspace, agent=row.agent, tool=row.tool, principal=dict(row.principal),
        arguments_digest=row.arguments_digest, outcome=row.outcome, latency_us=row.latency_us,
        request_id=row.request_id, trace_id=row.trace_id,
    )  # fmt: skip
    return StoredRecord(row.seq, entry, row.prev_hash, row.hash)


def _locked_head(session: Session, workspace: str) -> tuple[int, str]:
    """The workspace's head (seq, hash), made when missing, locked until the transaction ends."""
    dialect = session.get_bind().dialect.name
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(upsert(AuditHead).values(workspace=workspace, seq=0, hash=GENESIS)
                    .on_conflict_do_nothing(index_elements=["workspace"]))  # fmt: skip
    head = session.execute(select(AuditHead.seq, AuditHead.hash).where(AuditHead.workspace == workspace)
                           .with_for_update()).one()  # fmt: skip
    return int(head[0]), str(head[1])
