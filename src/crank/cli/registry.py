"""The registry's commands: workspace, operation, import, agent, publish, versions, rollback and apply, acting
on the registry the settings name as the admin HTTP API does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from crank.cli.common import (
    INCLUDE_HELP,
    clear_errors,
    echo_json,
    egress_policy,
    open_registry,
    progress_bar,
    read_definition,
    scheme_credentials,
    upstream_auth,
)
from crank.cli.group import main

# -- the registry ----------------------------------------------------------------------------------


@main.group()
def workspace() -> None:
    """Workspaces (tenants)."""


@workspace.command("list")
def workspace_list() -> None:
    """List the workspaces."""
    echo_json(open_registry().workspaces())


@workspace.command("create")
@click.argument("slug")
@click.option("--name", default=None, help="Display name (default: the slug).")
@click.option("--language", default="en", show_default=True, help="Default language of tool texts.")
def workspace_create(slug: str, name: str | None, language: str) -> None:
    """Create a workspace, or update its name and language."""
    from crank.admin.models import WorkspaceRef

    with clear_errors():
        checked = _validated(WorkspaceRef, {"slug": slug, "name": name or slug, "default_language": language})
        open_registry().put_workspace(checked.slug, checked.name, checked.default_language)
    click.echo(f"workspace {slug} ready")


@workspace.command("oauth")
@click.argument("slug")
@click.option("--issuer", "issuers", multiple=True, help="An issuer whose access tokens the workspace trusts.")
@click.option("--audience", default=None, help="Public base URL of its endpoints (default: CRANK_PUBLIC_URL).")
@click.option("--credentials", type=click.Choice(["keys", "oauth", "both"]), default="both", show_default=True)
@click.option(
    "--sign-in", type=click.Choice(["always", "calls"]), default="always", show_default=True,
    help="calls: initialize and tools/list need no token; a call asks for one (401).",
)  # fmt: skip
@click.option("--agent-scope", "agent_scopes", multiple=True, metavar="AGENT=SCOPE[,SCOPE]",
              help="Scopes every request to an agent needs ('*' for every agent).")  # fmt: skip
@click.option("--tool-scope", "tool_scopes", multiple=True, metavar="TOOL=SCOPE[,SCOPE]",
              help="Scopes a call needs besides its agent's: a tool name, or read, write, destructive.")  # fmt: skip
@click.option("--introspection-client", default=None, metavar="CLIENT_ID=env:NAME",
              help="Introspect opaque tokens (RFC 7662) as this client, its secret by reference.")  # fmt: skip
@click.option("--sign-in-client", default=None, metavar="CLIENT_ID=env:NAME",
              help="Sign users in on the connect page as this client of the first --issuer (its secret by "
              "reference; redirect URI CRANK_PUBLIC_URL/connect/WORKSPACE/_/signed-in): users' own connections need "
              "it.")  # fmt: skip
@click.option("--off", is_flag=True, help="Take API keys only again.")
@click.option("--show", is_flag=True, help="Print the policy and change nothing.")
def workspace_oauth(slug: str, issuers: tuple[str, ...], audience: str | None, credentials: str, sign_in: str,
                    agent_scopes: tuple[str, ...], tool_scopes: tuple[str, ...], introspection_client: str | None,
                    sign_in_client: str | None, off: bool, show: bool) -> None:  # fmt: skip
    """Let a workspace take OAuth access tokens (docs/security.md, OAuth): the issuers it trusts, the scopes its
    agents and tools need. Replicas apply it when they reload, as after a publish."""
    from crank.registry.runtime import OAuthPolicy

    registry = open_registry()
    with clear_errors():
        if show:
            policy = registry.workspace_oauth_policy(slug)
            echo_json(None if policy is None else policy.model_dump(mode="json", exclude_defaults=True))
            return
        if off:
            registry.set_workspace_oauth(slug, None)
            click.echo(f"workspace {slug}: API keys only")
            return
        data: dict[str, Any] = {"issuers": issuers, "audience": audience, "credentials": credentials,
                                "sign_in": sign_in, "agent_scopes": _scope_pairs(agent_scopes),
                                "tool_scopes": _scope_pairs(tool_scopes)}  # fmt: skip
        if introspection_client is not None:
            client_id, _, secret = introspection_client.partition("=")
            data["introspection"] = {"client_id": client_id, "client_secret": secret}
        if sign_in_client is not None:
            client_id, _, secret = sign_in_client.partition("=")
            first = issuers[0] if issuers else ""
            data["sign_in_client"] = {"issuer": first, "client_id": client_id, "client_secret": secret}
        policy = _validated(OAuthPolicy, data)
        registry.set_workspace_oauth(slug, policy)
    click.echo(f"workspace {slug}: takes {credentials} ({', '.join(policy.issuers)})")


@workspace.command("credential")
@click.argument("slug")
@click.argument("scheme", required=False)
@click.argument("reference", required=False)
@click.option(
    "--client-id", default=None, help="OAuth 2 client credentials: the client's id (the secret is REFERENCE)."
)
@click.option("--origin", "origins", multiple=True, metavar="URL",
              help="Where the credential may be sent: the API's origin (https://api.example.com), and for OAuth 2 "
              "the token URL's too (repeatable; at least one).")  # fmt: skip
@click.option("--token-exchange", "exchange_url", default=None, metavar="TOKEN_URL",
              help="Act as the signed-in user: exchange the user's access token at this token endpoint (RFC 8693) "
              "for one of the API; Crank's own client there is --client-id and REFERENCE.")  # fmt: skip
@click.option("--issuer", default=None, metavar="URL", help="With --token-exchange: the issuer of the users' tokens "
              "(one of the workspace's OAuth issuers, whose token endpoint TOKEN_URL is).")  # fmt: skip
@click.option("--audience", default=None, help="With --token-exchange: the API as its authorization server names it.")
@click.option("--resource", default=None, help="With --token-exchange: the API's URL (RFC 8707), instead of or "
              "beside --audience.")  # fmt: skip
@click.option("--scope", "scopes", multiple=True, help="With --token-exchange or --connect: a scope to ask for "
              "(repeatable).")  # fmt: skip
@click.option("--connect", is_flag=True, help="Act as the signed-in user through their own connection: each user "
              "connects their account once (OAuth authorization code with PKCE; Crank's own client there is "
              "--client-id and REFERENCE).")  # fmt: skip
@click.option("--authorization-url", default=None, metavar="URL", help="With --connect: the authorization endpoint, "
              "when the API description declares no authorization code flow (with --token-url).")  # fmt: skip
@click.option("--token-url", default=None, metavar="URL", help="With --connect: the token endpoint (with "
              "--authorization-url).")  # fmt: skip
@click.option("--remove", is_flag=True, help="Take the scheme's credential away.")
def workspace_credential(
    slug: str, scheme: str | None, reference: str | None, client_id: str | None, origins: tuple[str, ...],
    exchange_url: str | None, issuer: str | None, audience: str | None, resource: str | None, scopes: tuple[str, ...],
    connect: bool, authorization_url: str | None, token_url: str | None, remove: bool,
) -> None:  # fmt: skip
    """Give the workspace a credential for a security scheme of its API descriptions, by reference (env:NAME or
    file:/path: a token, an API key, user:password for basic, an OAuth 2 client secret). Every operation that
    requires the scheme and has no credential of its own takes it at its agents' next publish. With
    --token-exchange, the scheme's calls act as the signed-in user instead of one account (docs/gateway.md, Acting
    as the user). Without SCHEME, list the workspace's credentials (references, never values)."""
    from crank.registry.runtime import SchemeCredential

    registry = open_registry()
    with clear_errors():
        if scheme is None:
            echo_json({name: given.model_dump(exclude_none=True)
                        for name, given in registry.workspace_credentials(slug).items()})  # fmt: skip
            return
        if remove:
            registry.set_workspace_credential(slug, scheme, None)
            click.echo(f"workspace {slug}: no credential for {scheme}")
            return
        if reference is None:
            raise click.UsageError("give the credential's REFERENCE (env:NAME or file:/path), or --remove")
        data: dict[str, Any] = {"secret": reference, "client_id": client_id, "origins": origins}
        if exchange_url is not None:
            data["exchange"] = {"issuer": issuer, "token_url": exchange_url, "audience": audience,
                                "resource": resource, "scopes": scopes}  # fmt: skip
            if connect:
                raise click.UsageError("a credential acts as the user through --token-exchange or --connect, not both")
        elif connect:
            data["connection"] = {"authorization_url": authorization_url, "token_url": token_url, "scopes": scopes}
        elif issuer or audience or resource or scopes:
            raise click.UsageError("--issuer, --audience, --resource and --scope describe a --token-exchange")
        if (authorization_url or token_url) and not connect:
            raise click.UsageError("--authorization-url and --token-url describe a --connect")
        credential = _validated(SchemeCredential, data)
        registry.set_workspace_credential(slug, scheme, credential)
    click.echo(f"workspace {slug}: {scheme} uses {reference} (publish its agents to apply it)")


def _scope_pairs(pairs: tuple[str, ...]) -> dict[str, list[str]]:
    scopes: dict[str, list[str]] = {}
    for pair in pairs:
        name, equals, listed = pair.partition("=")
        if not equals:
            raise click.BadParameter(f"{pair!r}: expected NAME=SCOPE[,SCOPE]")
        scopes.setdefault(name, []).extend(scope for scope in listed.split(",") if scope)
    return scopes


def _validated(model: Any, data: Any) -> Any:
    from pydantic import ValidationError

    from crank.admin.models import problems

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise click.ClickException(problems(exc, whole="value")) from None


@main.group()
def operation() -> None:
    """Operation drafts of a workspace."""


@operation.command("list")
@click.argument("workspace")
def operation_list(workspace: str) -> None:
    """List a workspace's operation drafts: name, protocol, method and URL."""
    with clear_errors():
        operations = open_registry().operations(workspace)
    for name, spec in operations.items():
        target = spec.get("target") or {}
        click.echo(f"{name}\t{spec.get('protocol')}\t{target.get('method', '')} {target.get('url', '')}")


@operation.command("show")
@click.argument("workspace")
@click.argument("name")
def operation_show(workspace: str, name: str) -> None:
    """Print an operation draft as JSON."""
    with clear_errors():
        echo_json(open_registry().operation(workspace, name))


@operation.command("put")
@click.argument("workspace")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--republish", is_flag=True, help="Then publish every published agent that binds it.")
def operation_put(workspace: str, name: str, file: str, republish: bool) -> None:
    """Create or replace an operation draft from a JSON or YAML FILE."""
    from crank.admin.models import OperationIn

    spec = _validated(OperationIn, read_definition(file)).model_dump(exclude_none=True)
    registry = open_registry()
    with clear_errors():
        registry.put_operation(workspace, name, spec)
    click.echo(f"operation {workspace}/{name} saved (draft)")
    if republish:
        _republish(registry, workspace, name)


@operation.command("republish")
@click.argument("workspace")
@click.argument("name")
def operation_republish(workspace: str, name: str) -> None:
    """Publish, in one transaction, every published agent that binds operation NAME (its draft as it is now)."""
    _republish(open_registry(), workspace, name)


def _republish(registry: Any, workspace: str, name: str) -> None:
    from crank.admin.changes import republish_operation

    with clear_errors():
        report = republish_operation(registry, workspace, name)
    for agent, version in report.published.items():
        click.echo(f"published {workspace}/{agent} version {version}")
        for finding in report.findings[agent]:
            click.echo(f"  {finding}")
    for agent in report.unchanged:
        click.echo(f"{workspace}/{agent}: unchanged")
    if not report.published and not report.unchanged:
        click.echo(f"no published agent binds {name}")


@operation.command("delete")
@click.argument("workspace")
@click.argument("name")
def operation_delete(workspace: str, name: str) -> None:
    """Delete an operation draft."""
    with clear_errors():
        open_registry().delete_operation(workspace, name)
    click.echo(f"operation {workspace}/{name} deleted")


@main.group("import")
def import_() -> None:
    """Import operations from an API description into a workspace's drafts."""


def _confirm_by_human(registry: Any, workspace: str, names: Sequence[str], patterns: tuple[str, ...]) -> None:
    from fnmatch import fnmatchcase

    from crank.admin.actions import set_operations_confirmation

    chosen = [name for name in names if any(fnmatchcase(name, pattern) for pattern in patterns)]
    if not chosen:
        raise click.BadParameter(
            f"no imported operation matches {', '.join(patterns)}", param_hint="--human-confirmation"
        )
    set_operations_confirmation(registry, workspace, chosen, "human")
    click.echo(f"confirmed by their user on each call: {', '.join(chosen)} (publish the agents that bind them)")


def _import(kind: str, spec: str, workspace: str, base_url: str | None, include: tuple[str, ...],
            republish: bool = True, dry_run: bool = False, auth: dict[str, str] | None = None,
            credentials: dict[str, tuple[str, str | None]] | None = None, strict: bool = False,
            human: tuple[str, ...] = ()) -> None:  # fmt: skip
    from crank.admin.changes import reimport

    registry = open_registry()
    with clear_errors(), progress_bar(f"importing {Path(spec).name}") as progress:
        report = reimport(registry, workspace, kind,  # type: ignore[arg-type]
                          spec, base_url=base_url, include=include or None, progress=progress,
                          republish=republish, dry_run=dry_run, egress=egress_policy(), strict=strict)  # fmt: skip
    for skipped in report.skipped:
        click.echo(skipped.line(), err=True)
    for line in report.lines():
        click.echo(line)
    for agent, findings in report.findings.items():
        click.echo(f"  {agent}: {len(findings)} lint finding(s) (crank lint {workspace} {agent})")
    counts = f"{len(report.added)} added, {len(report.removed)} removed, {len(report.changed)} changed"
    if report.skipped:
        counts += f", {len(report.skipped)} skipped (Crank cannot call them)"
    if dry_run:
        click.echo(f"dry run: {counts}, {len(report.unchanged)} unchanged; nothing written")
    elif not report.added and not report.removed and not report.changed:
        click.echo(f"{workspace}: no changes ({len(report.unchanged)} operations as imported before)")
    else:
        click.echo(f"imported {len(report.names)} operations into {workspace}: {counts} "
                   "(drafts; bind them to an agent and publish)")  # fmt: skip
    if report.breaking:
        click.echo(f"warning: {len(report.breaking)} bound tool(s) broken by this change", err=True)
    if not dry_run:
        from crank.admin.actions import credential_gaps, give_scheme_credentials, imported_sizes, set_operations_auth

        with clear_errors():
            if auth is not None:
                set_operations_auth(registry, workspace, report.names, auth)
            if credentials:
                give_scheme_credentials(registry, workspace, report.names, credentials)
            if auth is not None or credentials:
                click.echo(f"credentials given: publish the agents that bind these operations to apply them "
                           f"(crank publish {workspace} AGENT)")  # fmt: skip
            if human:
                _confirm_by_human(registry, workspace, report.names, human)
            _echo_sizes(imported_sizes(registry, workspace, [*report.added, *(c.operation for c in report.changed)]))
            for gap in credential_gaps(registry, workspace, report.names):
                click.echo(f"credentials: {gap.scheme} ({gap.type}) is required by {len(gap.tools)} operation(s) "
                           f"({', '.join(gap.tools[:5])}{', ...' if len(gap.tools) > 5 else ''}) and not given: "
                           f"{gap.how()}", err=True)  # fmt: skip


def _echo_sizes(sizes: list[Any]) -> None:
    """Each tool's estimate after and before compaction, heaviest first, then the median and the largest."""
    import statistics

    if not sizes:
        return
    click.echo("tokens per tool, compacted (docs/gateway.md, Compaction):")
    for size in sizes:
        click.echo(f"  {size}")
    after, before = [size.tokens for size in sizes], [size.before for size in sizes]
    click.echo(f"median {statistics.median(after):g} tokens (before {statistics.median(before):g}), "
               f"largest {max(after)} (before {max(before)})")  # fmt: skip


@import_.command("openapi")
@click.argument("spec")
@click.option("--workspace", "-w", required=True)
@click.option("--base-url", default=None, help="Upstream base URL (default: the document's first server).")
@click.option("--include", multiple=True, help=INCLUDE_HELP)
@click.option("--strict", is_flag=True, help="Refuse the document when an operation cannot be called (default: "
              "skip it and say why).")  # fmt: skip
@click.option("--republish/--no-republish", default=True, show_default=True,
              help="Publish again the agents that bind a changed or removed operation.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only report what would change; write nothing.")
@click.option(
    "--auth-bearer", default=None, metavar="REF", help="Every imported operation's bearer token, by reference."
)
@click.option("--auth-header", default=None, metavar="NAME=REF", help="A header carrying every operation's secret.")
@click.option("--auth-scheme", "auth_schemes", multiple=True, metavar="SCHEME=REF",
              help="The workspace's credential of one of the document's security schemes (repeatable): "
              "SCHEME=env:NAME, or SCHEME=CLIENT_ID:env:NAME for OAuth 2 client credentials.")  # fmt: skip
@click.option(
    "--human-confirmation",
    "human",
    multiple=True,
    metavar="GLOB",
    help="The operations whose names match (repeatable, e.g. 'delete_*') run only once their user "
    "confirms each call in their client (confirmation: human, docs/safety.md); give it on every import.",
)
def import_openapi(
    spec: str, workspace: str, base_url: str | None, include: tuple[str, ...], strict: bool, republish: bool,
    dry_run: bool, auth_bearer: str | None, auth_header: str | None, auth_schemes: tuple[str, ...],
    human: tuple[str, ...],
) -> None:  # fmt: skip
    """Import an OpenAPI 3.0/3.1 document (file or URL, JSON or YAML): one operation per path and method.

    Importing a newer version reports what was added, removed and changed, flags the changes that break
    bound tools, and republishes the agents concerned, in one transaction. The document's security schemes are
    read: each operation records what it requires, and a scheme without a credential is said before any call. An
    operation Crank cannot call (a body that is not JSON) is skipped with one line saying why (`--strict`: the
    document is refused)."""
    auth = upstream_auth(auth_bearer, auth_header)
    _import("openapi", spec, workspace, base_url, include, republish, dry_run, auth, scheme_credentials(auth_schemes),
            strict, human)  # fmt: skip


@import_.command("openrpc")
@click.argument("spec")
@click.option("--workspace", "-w", required=True)
@click.option("--url", "base_url", default=None, help="JSON-RPC endpoint URL (default: the document's server).")
@click.option("--include", multiple=True, help="Only methods whose name matches (glob).")
@click.option("--republish/--no-republish", default=True, show_default=True,
              help="Publish again the agents that bind a changed or removed operation.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only report what would change; write nothing.")
def import_openrpc(
    spec: str, workspace: str, base_url: str | None, include: tuple[str, ...], republish: bool, dry_run: bool
) -> None:
    """Import an OpenRPC document (file or URL): one jsonrpc operation per method (reported as for openapi)."""
    _import("openrpc", spec, workspace, base_url, include, republish, dry_run)


@main.group()
def agent() -> None:
    """Agents: curated toolsets bound to operations."""


@agent.command("list")
@click.argument("workspace")
def agent_list(workspace: str) -> None:
    """List a workspace's agents."""
    with clear_errors():
        echo_json(open_registry().agents(workspace))


@agent.command("show")
@click.argument("workspace")
@click.argument("slug")
def agent_show(workspace: str, slug: str) -> None:
    """Print an agent draft (description, bindings) as JSON."""
    with clear_errors():
        echo_json(open_registry().agent(workspace, slug))


@agent.command("put")
@click.argument("workspace")
@click.argument("slug")
@click.argument("file", type=click.Path(dir_okay=False))
def agent_put(workspace: str, slug: str, file: str) -> None:
    """Create or replace an agent draft (description, bindings) from a JSON or YAML FILE."""
    from crank.admin.models import AgentIn

    spec = _validated(AgentIn, read_definition(file)).model_dump(exclude_none=True)
    with clear_errors():
        open_registry().put_agent(workspace, slug, spec)
    click.echo(f"agent {workspace}/{slug} saved (draft)")


@agent.command("bind")
@click.argument("workspace")
@click.argument("slug")
@click.argument("operation_name")
@click.option("--tool-name", default=None, help="Default: the operation's name.")
@click.option("--title", default=None)
@click.option("--description", default=None)
def agent_bind(
    workspace: str, slug: str, operation_name: str, tool_name: str | None, title: str | None, description: str | None
) -> None:
    """Bind OPERATION_NAME as a tool of the agent (creating the agent if needed)."""
    from crank.admin.actions import bind_tool
    from crank.admin.models import BindingIn
    from crank.exceptions import RegistryNotFoundError

    data = {"operation": operation_name, "tool_name": tool_name, "title": title, "description": description}
    binding = _validated(BindingIn, data).model_dump(exclude_none=True)
    registry = open_registry()
    with clear_errors():
        registry.operation(workspace, operation_name)  # no such operation: refused before the agent is made
        try:
            registry.agent(workspace, slug)
        except RegistryNotFoundError:
            registry.put_agent(workspace, slug, {"bindings": []})
        bind_tool(registry, workspace, slug, binding)
    click.echo(f"bound {operation_name} as {tool_name or operation_name} in {workspace}/{slug} (draft)")


@agent.command("mode")
@click.argument("workspace")
@click.argument("slug")
@click.argument("mode", type=click.Choice(["direct", "discovery"]))
def agent_mode(workspace: str, slug: str, mode: str) -> None:
    """Serve the agent's operations as tools (direct) or through three discovery tools (discovery)."""
    with clear_errors():
        open_registry().edit_agent(workspace, slug, lambda spec: {**spec, "mode": mode})
    click.echo(f"agent {workspace}/{slug} mode {mode} (draft; publish to serve it)")


@agent.command("unbind")
@click.argument("workspace")
@click.argument("slug")
@click.argument("tool_name")
def agent_unbind(workspace: str, slug: str, tool_name: str) -> None:
    """Remove the tool TOOL_NAME from the agent's draft."""
    from crank.admin.actions import unbind_tool

    with clear_errors():
        unbind_tool(open_registry(), workspace, slug, tool_name)
    click.echo(f"removed {tool_name} from {workspace}/{slug} (draft)")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
def publish(workspace: str, agent_slug: str) -> None:
    """Publish an agent's draft as a new version (served within a second, no restart)."""
    from crank.admin.actions import publish_agent

    with clear_errors():
        report = publish_agent(open_registry(), workspace, agent_slug, egress=egress_policy())
    click.echo(f"published {workspace}/{agent_slug} version {report.version}")
    _echo_catalog_line(report.catalog)
    for size in report.tools:
        click.echo(f"  {size}")
    for finding in report.findings:  # never blocking: `crank lint` is the gate for CI
        click.echo(f"  {finding}")
    if report.catalog.over_budget:
        from crank.admin.lint import DISCOVERY_HINT

        click.echo(f"warning: over the token budget ({report.catalog.estimate} > {report.catalog.budget}); "
                   f"consider discovery mode ({DISCOVERY_HINT})", err=True)  # fmt: skip


def _echo_catalog_line(catalog: Any) -> None:
    click.echo(f"  catalog: about {catalog.estimate} of {catalog.budget} tokens")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
def versions(workspace: str, agent_slug: str) -> None:
    """List an agent's published versions; * marks the one served."""
    with clear_errors():
        history = open_registry().version_history(workspace, agent_slug)
    for info in history:
        click.echo(f"{'*' if info.current else ' '} {info.version}\t{info.created_at}")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
@click.argument("version", type=click.IntRange(min=1))
def rollback(workspace: str, agent_slug: str, version: int) -> None:
    """Serve an earlier published VERSION again."""
    with clear_errors():
        open_registry().rollback(workspace, agent_slug, version)
    click.echo(f"{workspace}/{agent_slug} now serves version {version}")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def apply(file: str) -> None:
    """Apply a declarative catalog FILE (YAML): create or update, then publish what changed."""
    from crank.admin.apply import apply_catalog, load_catalog_file

    with clear_errors():
        catalog = load_catalog_file(file)
        registry = open_registry()
        with progress_bar("importing") as progress:
            report = apply_catalog(
                registry, catalog, base_dir=Path(file).parent, progress=progress, egress=egress_policy()
            )
    click.echo(f"workspace {report.workspace}: {len(report.operations)} operations")
    for slug, (version, new) in report.versions.items():
        click.echo(f"  agent {slug}: version {version}{' (published)' if new else ' (unchanged)'}")
        for finding in report.findings.get(slug, []):
            click.echo(f"    {finding}")
