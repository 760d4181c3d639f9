"""`crank vault` (the token vault's keys) and `crank connection` (users' connections to APIs)."""

from __future__ import annotations

from typing import Any

import click

from crank.cli.common import (
    current_settings,
    echo_json,
    migrated_engine,
)
from crank.cli.group import main


@main.group()
def vault() -> None:
    """The token vault: users' connections to APIs, encrypted (CRANK_VAULT_KEYS)."""


@vault.command("key")
def vault_key() -> None:
    """Print a new vault key (32 random bytes, base64): keep it where a reference of CRANK_VAULT_KEYS names it."""
    from crank.registry.vault import new_vault_key

    click.echo(new_vault_key())


def _vault() -> Any:
    from crank.registry.vault import Vault

    settings = current_settings()
    keys = settings.vault()
    if keys is None:
        raise click.UsageError("CRANK_VAULT_KEYS is not set: give the vault's keys (`crank vault key` makes one)")
    return Vault(migrated_engine(settings), keys)


@vault.command("check")
def vault_check() -> None:
    """Check that CRANK_VAULT_KEYS holds every key the vault's rows are encrypted with."""
    store = _vault()
    store.check()
    click.echo(f"vault: {len(store.entries())} entries, every one readable (current key {store.keys.current})")


@vault.command("rotate")
def vault_rotate() -> None:
    """Re-encrypt every row under the current (first) key of CRANK_VAULT_KEYS; then older keys may go."""
    store = _vault()
    store.check()
    click.echo(f"vault: {store.rotate()} entries re-encrypted with key {store.keys.current}")


@main.group()
def connection() -> None:
    """Users' own connections to APIs (listed and revoked without their tokens)."""


def _connections() -> Any:
    from crank.registry.vault import Vault

    settings = current_settings()
    return Vault(migrated_engine(settings), None)  # listing and removing never decrypt


@connection.command("list")
@click.argument("workspace", required=False)
@click.option("--scheme", default=None, help="Only this security scheme's connections.")
@click.option("--subject", default=None, help="Only this user's (their subject at the identity provider).")
def connection_list(workspace: str | None, scheme: str | None, subject: str | None) -> None:
    """List connections: whose, to which scheme, since when (never a token)."""
    echo_json([entry.to_json() for entry in _connections().entries(workspace, scheme=scheme, subject=subject)])


@connection.command("remove")
@click.argument("workspace")
@click.option("--scheme", default=None, help="Only this security scheme's connections.")
@click.option("--subject", default=None, help="Only this user's.")
@click.option("--all", "everyone", is_flag=True, help="Every connection of the workspace (with no other filter).")
def connection_remove(workspace: str, scheme: str | None, subject: str | None, everyone: bool) -> None:
    """Revoke connections: their users are asked to connect again on their next call (every replica stops using
    them within 30 s). Their tokens are not revoked at the API's authorization server."""
    if scheme is None and subject is None and not everyone:
        raise click.UsageError("say which: --scheme, --subject, or --all")
    removed = _connections().delete(workspace, scheme=scheme, subject=subject)
    click.echo(f"workspace {workspace}: {removed} connection(s) removed")
