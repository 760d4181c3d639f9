"""The audit trail's storage (crank.registry.audit): records numbered and chained per workspace in batches, on
SQLite and PostgreSQL; replicas that append at once never fork a chain; a record changed, a batch removed or
added in the database is found by `verify`, as is a trail cut at its end."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import delete, select, update

from crank import _json
from crank.registry import Registry
from crank.registry.audit import GENESIS, AuditLog, batch_hash, iso_time, time_of
from crank.registry.models import AuditBatch, AuditHead

NOON = time_of("2026-12-06T12:00")


def record(workspace: str, n: int, **fields: Any) -> tuple[str, int, bytes]:
    values = {"at": NOON + n * 1_000_000, "agent": "desk", "tool": "get_user",
              "principal": {"method": "api_key", "id": "k1"}, "arguments_digest": "ab" * 32, "outcome": "ok",
              "latency_us": 1_000 + n, "request_id": f"r{n}", "trace_id": None, **fields}  # fmt: skip
    return workspace, int(values["at"]), _json.dumps(values)


def test_records_are_numbered_and_chained_per_workspace_and_read_newest_first(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([record("acme", 1), record("other", 1), record("acme", 2, outcome="upstream_rejected")])
    log.append([record("acme", 3, principal={"method": "jwt", "id": "i|ada", "subject": "ada"})])
    acme = log.records(workspace="acme")
    assert [r.seq for r in acme] == [3, 2, 1] and [r.fields["request_id"] for r in acme] == ["r3", "r2", "r1"]
    assert acme[0].to_json()["at"] == "2026-12-06T12:00:03.000000Z" == iso_time(NOON + 3_000_000)
    assert [r.fields["request_id"] for r in log.records(outcome="upstream_rejected")] == ["r2"]
    assert [r.fields["request_id"] for r in log.records(subject="ada")] == ["r3"]
    window = log.records(workspace="acme", since=NOON + 2_000_000, until=NOON + 3_000_000)
    assert [r.seq for r in window] == [2]
    with registry.engine.connect() as connection:
        batches = connection.execute(select(AuditBatch.workspace, AuditBatch.first_seq, AuditBatch.last_seq,
                                            AuditBatch.prev_hash).order_by(AuditBatch.id)).all()  # fmt: skip
    assert [(w, first, last) for w, first, last, _ in batches] == [("acme", 1, 2), ("other", 1, 1), ("acme", 3, 3)]
    assert batches[0][3] == GENESIS and log.heads()["acme"][0] == 3
    assert log.verify()[1] == []


def test_replicas_appending_at_once_keep_one_chain(registry: Registry) -> None:
    """Four writers (as replicas would) append 50 batches each to one workspace: 1,000 records, one chain."""
    log = AuditLog(registry.engine)

    def write(writer: int) -> None:
        for batch in range(50):
            log.append([record("acme", writer * 1000 + batch * 5 + n) for n in range(5)])

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert log.heads()["acme"][0] == 1_000 and log.verify()[1] == []
    assert len({r.fields["request_id"] for r in log.records(workspace="acme", limit=10_000)}) == 1_000


def test_a_record_changed_in_the_database_is_found(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([record("acme", n) for n in range(1, 4)])
    log.append([record("acme", n) for n in range(4, 6)] + [record("other", 1)])
    with registry.engine.begin() as connection:  # someone with the database's password hides a failure
        where = (AuditBatch.first_seq == 4, AuditBatch.workspace == "acme")
        (text,) = connection.execute(select(AuditBatch.records).where(*where)).one()
        changed = _json.loads(text)
        changed[0]["outcome"] = "ok"
        changed[0]["tool"] = "delete_user"
        connection.execute(update(AuditBatch).where(*where).values(records=_json.dumps(changed).decode()))
    (found,) = log.verify()[1]
    assert (found.workspace, found.seq, found.reason) == ("acme", 4, "its batch does not match its hash")
    with registry.engine.begin() as connection:  # or renumbers a batch to hide one removed before it
        connection.execute(update(AuditBatch).where(*where).values(records=text, first_seq=3, last_seq=4))
    assert log.verify("acme")[1][0].reason == "its batch numbers records the batch before numbered"
    assert log.verify("other")[1] == []


def test_a_removed_batch_and_a_trail_cut_at_its_end_are_found(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    for n in range(1, 4):
        log.append([record("acme", n)])
    with registry.engine.begin() as connection:
        connection.execute(delete(AuditBatch).where(AuditBatch.workspace == "acme", AuditBatch.first_seq == 2))
    (missing,) = log.verify("acme")[1]
    assert (missing.seq, missing.reason) == (2, "records 2 to 2 are missing")
    for n in range(1, 4):
        log.append([record("b", n)])
    with registry.engine.begin() as connection:
        connection.execute(delete(AuditBatch).where(AuditBatch.workspace == "b", AuditBatch.first_seq == 3))
    (cut,) = log.verify("b")[1]
    assert (cut.seq, cut.reason) == (3, "the head names record 3, the trail ends at 2")


def test_verify_during_appends_checks_up_to_the_head_it_read_and_never_reports_a_false_break(
    registry: Registry,
) -> None:
    log = AuditLog(registry.engine)
    log.append([record("acme", 0)])
    stop = threading.Event()

    def write() -> None:
        n = 1
        while not stop.is_set():
            log.append([record("acme", n)])
            n += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        results = [log.verify("acme") for _ in range(20)]
    finally:
        stop.set()
        writer.join()
    assert all(breaks == [] for _, breaks in results)
    assert [heads["acme"][0] for heads, _ in results] == sorted(heads["acme"][0] for heads, _ in results)


def test_a_chain_rewritten_whole_is_found_only_against_a_head_kept_elsewhere(registry: Registry) -> None:
    """Plain hashes: whoever writes the database can recompute every batch after a change, and the head. `verify`
    then holds, and only a head printed before (`--head`) finds it."""
    log = AuditLog(registry.engine)
    for n in range(1, 4):
        log.append([record("acme", n)])
    kept, _ = log.verify("acme")
    with registry.engine.begin() as connection:
        rows = connection.execute(select(AuditBatch.id, AuditBatch.first_seq, AuditBatch.records)
                                  .order_by(AuditBatch.first_seq)).all()  # fmt: skip
        previous = GENESIS
        for row_id, first, text in rows:
            text = text.replace('"outcome":"ok"', '"outcome":"upstream_rejected"') if first == 2 else text
            digest = batch_hash(previous, "acme", first, text)
            connection.execute(update(AuditBatch).where(AuditBatch.id == row_id)
                               .values(records=text, prev_hash=previous, hash=digest))  # fmt: skip
            previous = digest
        connection.execute(update(AuditHead).where(AuditHead.workspace == "acme").values(hash=previous))
    assert log.verify("acme")[1] == []
    (found,) = log.verify("acme", kept=kept)[1]
    assert found.reason == "no batch ends at record 3 with the hash kept for it"


def test_batches_without_a_head_and_times_that_are_not_the_records_are_found(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([record("acme", 1), record("acme", 2)])
    log.append([record("ghost", 1)])
    with registry.engine.begin() as connection:
        connection.execute(delete(AuditHead).where(AuditHead.workspace == "ghost"))
        connection.execute(update(AuditBatch).where(AuditBatch.workspace == "acme").values(last_at=NOON))
    reasons = {found.workspace: found.reason for found in log.verify()[1]}
    assert reasons == {"acme": "its batch's times are not its records' times",
                       "ghost": "the workspace has records but no head"}  # fmt: skip


def test_a_trail_counts_past_32_bits(registry: Registry) -> None:
    log = AuditLog(registry.engine)
    log.append([record("acme", 1)])
    with registry.engine.begin() as connection:  # as if billions of calls came before
        connection.execute(update(AuditHead).values(seq=2**31 - 1))
        connection.execute(update(AuditBatch).values(first_seq=2**31 - 1, last_seq=2**31 - 1))
    log.append([record("acme", 2)])
    assert [r.seq for r in log.records(workspace="acme")] == [2**31, 2**31 - 1]
