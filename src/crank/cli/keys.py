"""`crank key`: workspace API keys for the MCP endpoints, and their limits."""

from __future__ import annotations

from typing import Any

import click

from crank import _json
from crank.cli.common import (
    clear_errors,
    open_registry,
)
from crank.cli.group import main


@main.group()
def key() -> None:
    """Workspace API keys for the MCP endpoints."""


_RATE_HELP = "Rate limit of the key's tool calls: CALLS/SECONDS (100/60: 100 calls per 60 s window)."
_QUOTA_HELP = "Quota of the key's tool calls: CALLS/PERIOD, the period hour, day or month (UTC): 10000/day."


def _key_limits(rate: str | None, quota: str | None) -> Any:
    """`--rate` and `--quota` as `Limits` (None for neither); a wrong one is a usage error naming it."""
    from pydantic import ValidationError

    from crank.registry.runtime import Limits

    data: dict[str, Any] = {}
    for option, value, second in (("rate", rate, "window"), ("quota", quota, "period")):
        if value is not None:
            calls, slash, per = value.partition("/")
            if not slash or not calls.strip().isdigit():
                raise click.BadParameter(f"{value!r}: expected CALLS/{second.upper()}", param_hint=f"--{option}")
            data[option] = {"calls": int(calls), second: per.strip()}  # the model reads "60" as 60.0
    try:
        return Limits.model_validate(data) if data else None
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise click.BadParameter(f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


@key.command("create")
@click.argument("workspace")
@click.option("--agent", "agents", multiple=True, help="Limit the key to this agent (repeatable).")
@click.option("--rate", help=_RATE_HELP)
@click.option("--quota", help=_QUOTA_HELP)
def key_create(workspace: str, agents: tuple[str, ...], rate: str | None, quota: str | None) -> None:
    """Create a key (printed once; only its digest is stored). Without --rate and --quota, the key's tool
    calls are held to its workspace's key_limits, if any."""
    limits = _key_limits(rate, quota)
    with clear_errors():
        info, key = open_registry().issue_api_key(workspace, agents or None, limits=limits)
    click.echo(key)
    click.echo(f"id {info.id} (for `crank key delete {workspace} {info.id}`)", err=True)


@key.command("revoke")
@click.argument("api_key")
def key_revoke(api_key: str) -> None:
    """Revoke a key you have (by the key itself)."""
    with clear_errors():
        open_registry().revoke_api_key(api_key)
    click.echo("revoked")


@key.command("list")
@click.argument("workspace")
def key_list(workspace: str) -> None:
    """List a workspace's keys: ids, dates, agents and own limits (never the keys)."""
    with clear_errors():
        infos = open_registry().api_key_infos(workspace)
    for info in infos:
        agents = ",".join(info.agents) if info.agents is not None else "*"
        limits = f"  {_json.dumps(info.limits).decode()}" if info.limits else ""  # none: the workspace's key_limits
        click.echo(f"{info.id}  {info.created_at}  {agents}{limits}")


@key.command("limits")
@click.argument("workspace")
@click.argument("key_id")
@click.option("--rate", help=_RATE_HELP)
@click.option("--quota", help=_QUOTA_HELP)
def key_limits(workspace: str, key_id: str, rate: str | None, quota: str | None) -> None:
    """Set a key's own rate limit and quota (by its id); with neither option, it has its workspace's
    key_limits again. Replicas apply it when they reload, as after a publish."""
    limits = _key_limits(rate, quota)
    with clear_errors():
        info = open_registry().set_api_key_limits(workspace, key_id, limits)
    click.echo(f"{info.id}: {_json.dumps(info.limits).decode() if info.limits else 'the workspace key_limits'}")


@key.command("delete")
@click.argument("workspace")
@click.argument("key_id")
def key_delete(workspace: str, key_id: str) -> None:
    """Revoke a key by its id (from `crank key list`), as the admin API's DELETE does."""
    with clear_errors():
        open_registry().delete_api_key(workspace, key_id)
    click.echo("revoked")
