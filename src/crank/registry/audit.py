"""The audit trail: every tool call, kept in the registry's database, chained by hash per workspace.

A record holds when (microseconds since the epoch), which agent and tool, who (the principal's method, id,
subject, client id and issuer), a SHA-256 digest of the arguments (never the arguments themselves), the outcome
(`ok`, or the error code the client got), the latency, the request id and the trace id; `seq` numbers a
workspace's records from 1.

Records are written in batches, one row per workspace and batch (`audit_batches`): the records' JSON array as
written (a record's `seq` is its place: the batch's `first_seq` plus its index), and `hash`, SHA-256 over the hash
before it, the workspace, `first_seq` and that text. One row and one hash per batch
keep a record's cost to what writing its JSON costs (docs/benchmarks.md, "Issue 41"). The workspace's head row
(`audit_heads`) holds its last record's `seq` and its last batch's hash; appends lock it (PostgreSQL `SELECT ...
FOR UPDATE`), so replicas writing one workspace's trail take turns and the chain never forks.

`verify` walks a workspace's batches in order and reports the first that does not follow from the one before
(changed, removed or inserted), records whose numbers do not follow, and a head that does not match the last
batch (batches removed at the end). A trail cut short together with a rewritten head is found only against a head
kept elsewhere: `crank audit verify` prints each head, to be kept by whoever needs that.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from crank import _json
from crank.registry.models import AuditBatch, AuditHead

__all__ = ["GENESIS", "MAX_RECORDS_READ", "AuditLog", "ChainBreak", "StoredRecord", "iso_time", "time_of"]

GENESIS: Final = "0" * 64
"""The `prev_hash` of a workspace's first batch."""
MAX_RECORDS_READ: Final = 10_000
"""Records one read returns at most (`AuditLog.records`)."""
MAX_BATCHES_READ: Final = 20_000
"""Batches one read looks through at most, newest first: a filter that matches little stops there."""
_PAGE: Final = 100  # batches read at a time


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as stored, with its workspace."""

    workspace: str
    fields: Mapping[str, Any]

    @property
    def seq(self) -> int:
        return int(self.fields["seq"])

    def to_json(self) -> dict[str, Any]:
        """The record with its time in ISO 8601 (UTC), as `crank audit list` prints it."""
        return {"workspace": self.workspace, **self.fields, "at": iso_time(int(self.fields["at"]))}


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """Where a workspace's chain stops following from itself (the first record of the batch at fault), and why."""

    workspace: str
    seq: int
    reason: str


class AuditLog:
    """The audit trail in the registry's database (`engine`, migrated)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(crank_write=True)

    def append(self, records: Sequence[tuple[str, int, bytes]]) -> None:
        """Chain `records` after each workspace's head, one batch and one transaction per workspace (in the order of
        their names): each record is (workspace, its time in microseconds since the epoch, its JSON object as
        written). A record's `seq` is its place: the batch's first plus its index."""
        by_workspace: dict[str, list[tuple[int, bytes]]] = {}
        for workspace, at, written in records:
            by_workspace.setdefault(workspace, []).append((at, written))
        for workspace in sorted(by_workspace):
            self._append_batch(workspace, by_workspace[workspace])

    def _append_batch(self, workspace: str, batch: list[tuple[int, bytes]]) -> None:
        times = [at for at, _ in batch]
        text = (b"[" + b",".join(written for _, written in batch) + b"]").decode()
        with Session(self._writer) as session, session.begin():
            seq, previous = _locked_head(session, workspace)
            first, last = seq + 1, seq + len(batch)
            digest = batch_hash(previous, workspace, first, text)
            session.execute(insert(AuditBatch).values(
                workspace=workspace, first_seq=first, last_seq=last, first_at=min(times), last_at=max(times),
                records=text, prev_hash=previous, hash=digest,
            ))  # fmt: skip
            session.execute(update(AuditHead).where(AuditHead.workspace == workspace).values(seq=last, hash=digest))

    def records(
        self, *, workspace: str | None = None, agent: str | None = None, tool: str | None = None,
        subject: str | None = None, outcome: str | None = None, since: int | None = None, until: int | None = None,
        limit: int = 100,
    ) -> list[StoredRecord]:  # fmt: skip
        """The newest records first, filtered; at most `limit` (and `MAX_RECORDS_READ`), looking through at most
        `MAX_BATCHES_READ` batches. `since`, `until`: microseconds since the epoch (`time_of`), `until` excluded."""
        wanted = {"agent": agent, "tool": tool, "outcome": outcome}
        wanted = {name: value for name, value in wanted.items() if value is not None}
        found: list[StoredRecord] = []
        limit = max(0, min(limit, MAX_RECORDS_READ))
        if not limit:
            return found
        for batch_workspace, fields in self._newest(workspace, since, until):
            if since is not None and fields["at"] < since or until is not None and fields["at"] >= until:
                continue
            if any(fields.get(name) != value for name, value in wanted.items()):
                continue
            if subject is not None and fields["principal"].get("subject") != subject:
                continue
            found.append(StoredRecord(batch_workspace, fields))
            if len(found) >= limit:
                break
        return found

    def _newest(self, workspace: str | None, since: int | None, until: int | None) -> Iterator[tuple[str, Any]]:
        query = select(AuditBatch.id, AuditBatch.workspace, AuditBatch.first_seq, AuditBatch.records).order_by(
            AuditBatch.id.desc())  # fmt: skip
        if workspace is not None:
            query = query.where(AuditBatch.workspace == workspace)
        if since is not None:
            query = query.where(AuditBatch.last_at >= since)
        if until is not None:
            query = query.where(AuditBatch.first_at < until)
        before, read = None, 0
        with Session(self._engine) as session:
            while read < MAX_BATCHES_READ:
                page = query if before is None else query.where(AuditBatch.id < before)
                rows = session.execute(page.limit(_PAGE)).all()
                for row_id, batch_workspace, first, text in rows:
                    before, read = row_id, read + 1
                    written = _json.loads(text)
                    for index in range(len(written) - 1, -1, -1):
                        yield batch_workspace, {"seq": first + index, **written[index]}
                if len(rows) < _PAGE:
                    return

    def heads(self) -> dict[str, tuple[int, str]]:
        """Each workspace's last record and batch: workspace -> (seq, hash)."""
        with Session(self._engine) as session:
            return {row.workspace: (row.seq, row.hash) for row in session.scalars(select(AuditHead))}

    def verify(
        self, workspace: str | None = None, *, kept: Mapping[str, tuple[int, str]] | None = None
    ) -> tuple[dict[str, tuple[int, str]], list[ChainBreak]]:
        """Each workspace's chain (of `workspace` only, when given), up to its head as read first: batches written
        while it runs are left for the next time. Returns the heads verified and the first break of each chain.
        `kept`: heads kept elsewhere (workspace -> (seq, hash)), which the chain must still pass through: a chain
        rewritten from a point on, head and all, is found only so."""
        heads = self.heads()
        with Session(self._engine) as session:
            written = set(session.scalars(select(AuditBatch.workspace).distinct()))
        names = [workspace] if workspace is not None else sorted(set(heads) | written)
        breaks = []
        for name in names:
            found = self._verify_one(name, heads.get(name), (kept or {}).get(name))
            if found is not None:
                breaks.append(found)
        return {name: heads[name] for name in names if name in heads}, breaks

    def _verify_one(
        self, workspace: str, head: tuple[int, str] | None, kept: tuple[int, str] | None
    ) -> ChainBreak | None:
        head_seq, head_hash = head if head is not None else (0, GENESIS)
        expected, previous, after = 1, GENESIS, None
        passed_kept = kept is None
        columns = (AuditBatch.first_seq, AuditBatch.last_seq, AuditBatch.first_at, AuditBatch.last_at,
                   AuditBatch.records, AuditBatch.prev_hash, AuditBatch.hash)  # fmt: skip
        query = select(*columns).where(AuditBatch.workspace == workspace).order_by(AuditBatch.first_seq)
        with Session(self._engine) as session:
            while True:
                page = query if after is None else query.where(AuditBatch.first_seq > after)
                rows = session.execute(page.limit(_PAGE)).all()
                for first, last, first_at, last_at, text, prev_hash, digest in rows:
                    after = first
                    if head is None:
                        return ChainBreak(workspace, first, "the workspace has records but no head")
                    if first > head_seq:  # written after the head was read
                        break
                    found = _batch_break(workspace, expected, previous, first, last, first_at, last_at, text,
                                         prev_hash, digest)  # fmt: skip
                    if found is not None:
                        return found
                    expected, previous = last + 1, digest
                    if kept is not None and kept == (last, digest):
                        passed_kept = True
                if len(rows) < _PAGE or (rows and rows[-1][0] > head_seq):
                    break
        last_seq = expected - 1
        if (last_seq, previous) != (head_seq, head_hash):
            return ChainBreak(
                workspace, last_seq + 1, f"the head names record {head_seq}, the trail ends at {last_seq}"
            )
        if not passed_kept:
            assert kept is not None
            return ChainBreak(workspace, kept[0], f"no batch ends at record {kept[0]} with the hash kept for it")
        return None


def _batch_break(
    workspace: str, expected: int, previous: str, first: int, last: int, first_at: int, last_at: int, text: str,
    prev_hash: str, digest: str,
) -> ChainBreak | None:  # fmt: skip
    """Why one batch does not follow from the chain before it (`expected`, `previous`), or None."""
    if first > expected:
        return ChainBreak(workspace, expected, f"records {expected} to {first - 1} are missing")
    if first < expected:
        return ChainBreak(workspace, first, "its batch numbers records the batch before numbered")
    if prev_hash != previous:
        return ChainBreak(workspace, first, "its batch does not name the hash of the batch before")
    if batch_hash(previous, workspace, first, text) != digest:
        return ChainBreak(workspace, first, "its batch does not match its hash")
    records = _json.loads(text)
    if len(records) != last - first + 1:
        return ChainBreak(workspace, first, "its batch does not hold the records it numbers")
    times = [record.get("at") for record in records]
    if (first_at, last_at) != (min(times), max(times)):
        return ChainBreak(workspace, first, "its batch's times are not its records' times")
    return None


def batch_hash(previous: str, workspace: str, first_seq: int, records: str) -> str:
    """SHA-256 over the hash before, the workspace, the batch's first `seq` and its records as written."""
    return hashlib.sha256(f"{previous}\n{workspace}\n{first_seq}\n{records}".encode()).hexdigest()


def iso_time(microseconds: int) -> str:
    """`2026-12-06T12:00:00.000000Z` for microseconds since the epoch."""
    seconds, fraction = divmod(microseconds, 1_000_000)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{fraction:06d}Z"


def time_of(text: str) -> int:
    """Microseconds since the epoch of an ISO 8601 time (`2026-12-06`, `2026-12-06T12:00`), UTC unless it says
    otherwise; `ValueError` when it is not one."""
    moment = datetime.datetime.fromisoformat(text.removesuffix("Z"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return round(moment.timestamp() * 1_000_000)


def _locked_head(session: Session, workspace: str) -> tuple[int, str]:
    """The workspace's head (seq, hash), made when missing, locked until the transaction ends."""
    dialect = session.get_bind().dialect.name
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(upsert(AuditHead).values(workspace=workspace, seq=0, hash=GENESIS)
                    .on_conflict_do_nothing(index_elements=["workspace"]))  # fmt: skip
    head = session.execute(select(AuditHead.seq, AuditHead.hash).where(AuditHead.workspace == workspace)
                           .with_for_update()).one()  # fmt: skip
    return int(head[0]), str(head[1])
