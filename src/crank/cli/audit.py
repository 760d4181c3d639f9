"""`crank audit`: the audit trail of tool calls (crank.registry.audit), listed and verified."""

from __future__ import annotations

import sys
from typing import Any

import click

from crank.cli.common import current_settings, migrated_engine
from crank.cli.group import main


@main.group()
def audit() -> None:
    """The audit trail: every tool call the gateway served, chained by hash per workspace."""


def _log() -> Any:
    from crank.registry.audit import AuditLog

    return AuditLog(migrated_engine(current_settings()))


@audit.command("list")
@click.option("-w", "--workspace", default=None, help="Only this workspace's calls.")
@click.option("--agent", default=None)
@click.option("--tool", default=None)
@click.option("--subject", default=None, help="Only the calls of this user (an OAuth token's subject).")
@click.option("--outcome", default=None, help="ok, or an error code (upstream_rejected, invalid_arguments...).")
@click.option("--since", default=None, metavar="TIME", help="ISO 8601, UTC: 2026-12-06 or 2026-12-06T12:00.")
@click.option("--until", default=None, metavar="TIME", help="ISO 8601, UTC, not included.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
def audit_list(since: str | None, until: str | None, **filters: Any) -> None:
    """The newest calls first, as JSON lines (one record each: a SIEM reads them as they are)."""
    from crank import _json
    from crank.registry.audit import time_of

    times = {}
    for name, value in (("since", since), ("until", until)):
        if value is not None:
            try:
                times[name] = time_of(value)
            except ValueError:
                raise click.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=f"--{name}") from None
    for record in _log().records(**filters, **times):
        click.echo(_json.dumps(record.to_json()).decode())


@audit.command("verify")
@click.option("-w", "--workspace", default=None, help="Only this workspace's chain.")
def audit_verify(workspace: str | None) -> None:
    """Check each workspace's chain of records; print its head, or the first record that breaks it (exit 1)."""
    log = _log()
    breaks = {found.workspace: found for found in log.verify(workspace)}
    heads = log.heads()
    for name in [workspace] if workspace is not None else sorted(heads):
        if name in breaks:
            found = breaks[name]
            click.echo(f"{name}: broken at record {found.seq}: {found.reason}")
        elif name in heads:
            seq, digest = heads[name]
            click.echo(f"{name}: {seq} records, head {digest}")
        else:
            click.echo(f"{name}: no records")
    if breaks:
        sys.exit(1)
