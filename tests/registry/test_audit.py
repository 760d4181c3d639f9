"""The audit trail's storage (crank.registry.audit): records numbered and chained per workspace, on SQLite and
PostgreSQL; replicas that append at once never fork a chain; a record changed, removed or added in the database
is found by `verify`, as is a trail cut at its end."""

from __future__ import annotations

import threading

from sqlalchemy import delete, update

from crank.registry import Registry
from crank.registry.audit import GENESIS, AuditEntry, AuditLog
from crank.registry.models import AuditRecord


def entry(workspace: str, n: int, **fields: object) -> AuditEntry:
    values: dict[str, object] = {"at": f"2026-12-06T12:00:{n % 60:02d}.000000Z", "workspace": workspace,
                                 "agent": "desk", "tool": "get_user", "principal": {"method": "api_key", "id": "k1"},
                                 "arguments_digest": "ab" * 32, "outcome": "ok", "latency_us": 1_000 + n,
                                 "request_id": f"r{n}", **fields}  # fmt: skip
    return AuditEntry(**values)  # type: ignore[arg-type]


def test_records_are_numbered_and_chained_per_workspace_and_read_newest_first(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([entry("acme", 1), entry("other", 1), entry("acme", 2, outcome="upstream_rejected")])
    log.append([entry("acme", 3, principal={"method": "oauth", "id": "i|ada", "subject": "ada"})])
    acme = log.records(workspace="acme")
    assert [record.seq for record in acme] == [3, 2, 1]
    assert acme[-1].prev_hash == GENESIS and acme[1].prev_hash == acme[2].hash and acme[0].prev_hash == acme[1].hash
    assert [record.entry.request_id for record in log.records(outcome="upstream_rejected")] == ["r2"]
    assert [record.entry.request_id for record in log.records(subject="ada")] == ["r3"]
    assert [r.seq for r in log.records(workspace="acme", since="2026-12-06T12:00:02", until="2026-12-06T12:00:03")] == [
        2
    ]
    assert log.heads() == {"acme": (3, acme[0].hash), "other": (1, log.records(workspace="other")[0].hash)}
    assert log.verify() == []


def test_replicas_appending_at_once_keep_one_chain(registry: Registry) -> None:
    """Four writers (as replicas would) append 50 batches each to one workspace: 1,000 records, one chain."""
    log = AuditLog(registry.engine)

    def write(writer: int) -> None:
        for batch in range(50):
            log.append([entry("acme", writer * 1000 + batch * 5 + n) for n in range(5)])

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert log.heads()["acme"][0] == 1_000 and log.verify() == []
    assert len({record.entry.request_id for record in log.records(workspace="acme", limit=10_000)}) == 1_000


def test_a_record_changed_removed_or_added_in_the_database_is_found(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([entry("acme", n) for n in range(1, 6)] + [entry("other", 1)])
    with registry.engine.begin() as connection:  # someone with the database's password hides a failure
        connection.execute(update(AuditRecord).where(AuditRecord.workspace == "acme", AuditRecord.seq == 3)
                           .values(outcome="ok", latency_us=1))  # fmt: skip
    (found,) = log.verify()
    assert (found.workspace, found.seq, found.reason) == ("acme", 3, "its fields do not match its hash")
    assert log.verify("other") == []

    log2 = AuditLog(registry.engine)
    with registry.engine.begin() as connection:
        connection.execute(delete(AuditRecord).where(AuditRecord.workspace == "other"))
    (cut,) = log2.verify("other")
    assert (cut.seq, cut.reason) == (1, "the head names record 1, the trail ends at 0")


def test_a_removed_record_and_a_trail_cut_at_its_end_are_found(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([entry("acme", n) for n in range(1, 6)])
    with registry.engine.begin() as connection:
        connection.execute(delete(AuditRecord).where(AuditRecord.workspace == "acme", AuditRecord.seq == 2))
    (missing,) = log.verify("acme")
    assert (missing.seq, missing.reason) == (2, "record 2 is missing")
    log.append([entry("b", n) for n in range(1, 4)])
    with registry.engine.begin() as connection:
        connection.execute(delete(AuditRecord).where(AuditRecord.workspace == "b", AuditRecord.seq == 3))
    (cut,) = log.verify("b")
    assert (cut.seq, cut.reason) == (3, "the head names record 3, the trail ends at 2")
