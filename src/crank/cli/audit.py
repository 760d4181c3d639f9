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
@click.option(
    "--head",
    "kept",
    multiple=True,
    metavar="WORKSPACE:SEQ:HASH",
    help="A head printed by an earlier run and kept where the database's users cannot write: the chain "
    "must still pass through it (a chain rewritten from a point on is found only so). Repeatable.",
)
def audit_verify(workspace: str | None, kept: tuple[str, ...]) -> None:
    """Check each workspace's chain of records up to its head; print the head verified (keep it to pass to --head
    later), or the first record that breaks the chain (exit 1)."""
    heads, breaks = _log().verify(workspace, kept=dict(_kept_head(value) for value in kept))
    broken = {found.workspace: found for found in breaks}
    for name in [workspace] if workspace is not None else sorted(set(heads) | set(broken)):
        if name in broken:
            click.echo(f"{name}: broken at record {broken[name].seq}: {broken[name].reason}")
        elif name in heads:
            seq, digest = heads[name]
            click.echo(f"{name}: {seq} records, head {name}:{seq}:{digest}")
        else:
            click.echo(f"{name}: no records")
    if breaks:
        sys.exit(1)


def _kept_head(value: str) -> tuple[str, tuple[int, str]]:
    name, _, rest = value.partition(":")
    seq, _, digest = rest.partition(":")
    if not name or not seq.isdigit() or len(digest) != 64:
        raise click.BadParameter(f"{value!r} is not WORKSPACE:SEQ:HASH", param_hint="--head")
    return name, (int(seq), digest)
