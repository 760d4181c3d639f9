"""The gateway's audit trail (crank.sources.audit_trail) as an operator reads it: every tool call an official
client makes, whatever its outcome, is one record naming who called (an API key, an OAuth user), the tool and the
outcome, with a digest of the arguments and never the arguments; the buffer's bound drops and counts; records wait
out a registry that does not answer; `crank audit` lists them and `verify` finds a record changed in the database."""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import func, text, update

from crank import _json
from crank.cli import main
from crank.registry import Registry, key_digest, migrate, open_engine
from crank.registry.audit import AuditLog, StoredRecord
from crank.registry.models import AuditBatch
from crank.server import GatewayService
from crank.sources.audit_trail import AuditTrail, audit_key
from crank.telemetry import Metrics
from mcp import Client
from tests.gateway import upstream
from tests.gateway.test_gateway import publish_demo

pytestmark = pytest.mark.anyio
SECRET_NAME = "Zyxwvut Qponm"  # an argument value that must never reach the database


def wait_for(log: AuditLog, count: int, timeout: float = 20) -> list[StoredRecord]:
    deadline = time.monotonic() + timeout
    while True:
        records = log.records(limit=1_000)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


async def test_every_call_is_one_record_naming_who_called_and_its_outcome_never_its_arguments(
    registry: Registry, serve: Callable[..., str]
) -> None:
    publish_demo(registry, serve(upstream.app))
    key = registry.create_api_key("acme")
    scope = registry.api_keys([key_digest(key)])[key_digest(key)]
    gateway = GatewayService(registry, poll_interval=0.05, audit=True, request_state_secret="shared by the replicas")
    url = serve(gateway) + "/mcp/v1/acme/support"
    calls = [("get_user", {"id": 1}), ("get_user", {"id": "x"}), ("create_user", {"name": SECRET_NAME}),
             ("broken", {}), ("limited", {})]  # fmt: skip
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            results = [await client.call_tool(tool, arguments) for tool, arguments in calls]
    assert [result.is_error for result in results] == [False, True, False, True, True]
    log = AuditLog(registry.engine)
    records = [record.fields for record in reversed(wait_for(log, len(calls)))]
    assert [(record["tool"], record["outcome"]) for record in records] == [
        ("get_user", "ok"), ("get_user", "invalid_arguments"), ("create_user", "ok"),
        ("broken", "upstream_unavailable"), ("limited", "upstream_rate_limited"),
    ]  # fmt: skip
    assert {record.workspace for record in log.records()} == {"acme"}
    for entry, (_, arguments) in zip(records, calls, strict=True):
        assert entry["agent"] == "support"
        assert entry["principal"] == {"method": "api_key", "id": scope.id, "subject": scope.subject}
        key = audit_key("shared by the replicas")
        assert key is not None  # keyed: a guessable argument cannot be found from its digest without the key
        assert entry["arguments_digest"] == hmac.digest(key, _json.dumps_sorted(arguments), "sha256").hex()
        assert entry["latency_us"] > 0 and bool(entry["request_id"]) == (entry["outcome"] != "ok")
    failed = json.loads(results[3].content[0].text)  # type: ignore[union-attr]
    assert records[3]["request_id"] == failed["request_id"]  # the id the client was given
    with registry.engine.connect() as connection:
        stored = json.dumps([list(row) for row in connection.execute(text("SELECT * FROM audit_batches"))])
    assert SECRET_NAME not in stored and log.verify()[1] == []
    assert gateway.audit is not None
    gateway.audit.close()


def test_a_full_buffer_drops_and_counts_and_a_registry_away_loses_nothing(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'registry.sqlite3'}", pooled=False)  # not migrated yet: away
    metrics = Metrics()
    trail = AuditTrail(AuditLog(engine), capacity=4, interval=3600, on_drop=metrics.audit_dropped.inc)
    acme, other = trail.observer("acme", "desk"), trail.observer("other", "desk")
    for n in range(3):  # one workspace holds half the buffer at most: its third record is dropped
        acme("get_user", None, 0.001, f"r{n}", None, {"id": n})
    assert trail.dropped == 1 and b"crank_audit_dropped_total 1.0" in metrics.exposition()
    for n in range(3):  # another still has room, then the buffer is full
        other("get_user", None, 0.001, f"o{n}", None, {"id": n})
    assert trail.dropped == 2
    with pytest.raises(Exception, match="no such table"):
        trail.flush()  # the registry does not answer: every record stays, each workspace's in order
    migrate(engine)
    trail.flush()
    assert [r.fields["request_id"] for r in AuditLog(engine).records(workspace="acme")] == ["r1", "r0"]
    assert [r.fields["request_id"] for r in AuditLog(engine).records(workspace="other")] == ["o1", "o0"]
    acme("get_user", None, 0.001, "r3", None, {"id": 3})  # written: the workspace's share is free again
    trail.flush()
    assert trail.dropped == 2 and len(AuditLog(engine).records(workspace="acme")) == 3
    trail.close()


async def test_crank_audit_lists_the_calls_and_verify_finds_a_changed_record(
    registry: Registry, serve: Callable[..., str], database_url: str
) -> None:
    publish_demo(registry, serve(upstream.app))
    gateway = GatewayService(registry, poll_interval=0.05, require_api_keys=False, audit=True)
    url = serve(gateway) + "/mcp/v1/acme/support"
    async with Client(url) as client:
        for user in (1, 2):
            await client.call_tool("get_user", {"id": user})
    wait_for(AuditLog(registry.engine), 2)
    assert gateway.audit is not None
    gateway.audit.close()
    runner = CliRunner()
    environment = {"CRANK_DATABASE_URL": database_url}
    listed = runner.invoke(main, ["audit", "list", "-w", "acme", "--tool", "get_user"], env=environment)
    assert listed.exit_code == 0, listed.output
    lines = [json.loads(line) for line in listed.output.splitlines()]
    assert [line["seq"] for line in lines] == [2, 1] and lines[0]["principal"] == {"method": "none"}
    assert lines[0]["workspace"] == "acme" and lines[0]["at"].endswith("Z")
    assert runner.invoke(main, ["audit", "list", "--since", "2999-01-01"], env=environment).output == ""
    verified = runner.invoke(main, ["audit", "verify"], env=environment)
    assert verified.exit_code == 0 and verified.output.startswith("acme: 2 records, head acme:2:")
    kept = verified.output.split()[-1]
    assert runner.invoke(main, ["audit", "verify", "--head", kept], env=environment).exit_code == 0
    wrong = runner.invoke(main, ["audit", "verify", "--head", "acme:2:" + "0" * 64], env=environment)
    assert wrong.exit_code == 1 and "no batch ends at record 2 with the hash kept for it" in wrong.output
    with registry.engine.begin() as connection:
        connection.execute(
            update(AuditBatch).values(records=func.replace(AuditBatch.records, "get_user", "delete_user"))
        )
    broken = runner.invoke(main, ["audit", "verify", "-w", "acme"], env=environment)
    assert broken.exit_code == 1, broken.output
    assert broken.output.startswith("acme: broken at record 1: its batch does not match its hash")


def test_a_record_the_database_refuses_for_good_is_lost_loudly_and_the_others_are_written(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL refuses a workspace name longer than its column: that batch is logged and counted, never retried
    forever, and the other workspaces' records are written (one transaction per workspace)."""
    from tests import services

    with services.fresh_database(postgres_url, "crank_audit") as (url, _):
        engine = open_engine(url, pooled=False)
        migrate(engine)
        trail = AuditTrail(AuditLog(engine), interval=3600)
        trail.observer("w" * 65, "desk")("get_user", None, 0.001, None, None, {})
        trail.observer("acme", "desk")("get_user", None, 0.001, None, None, {})
        with caplog.at_level("ERROR", logger="crank.audit"):
            trail.flush()
        assert trail.lost == 1 and [r.workspace for r in AuditLog(engine).records()] == ["acme"]
        assert "1 audit records of workspace " + "w" * 65 + " cannot be written and are lost" in caplog.text
        trail.close()
        engine.dispose()
