"""`crank lint`, `crank catalog` and `crank check`: what a catalog costs and what it lacks (seed 004)."""

from __future__ import annotations

from typing import Any

import click

from crank.cli.common import (
    clear_errors,
    egress_policy,
    import_app,
    open_registry,
)
from crank.cli.group import main
from crank.exceptions import ConfigurationError

# -- seed 004: lint and budget --------------------------------------------------------------------


@main.command()
@click.argument("workspace", required=False)
@click.argument("agents", nargs=-1)
@click.option("--app", default=None, help="Lint an in-process app's MCP tools instead (module:attribute).")
@click.option("--app-dir", default=".", show_default=True, help="Directory added to the import path for --app.")
@click.option("--budget", type=click.IntRange(min=1), default=None, help="Token budget (default: configured, 4096).")
@click.option("--strict", is_flag=True, help="Exit with 1 on warnings too (an agent over its budget, say).")
def lint(
    workspace: str | None, agents: tuple[str, ...], app: str | None, app_dir: str, budget: int | None, strict: bool
) -> None:
    """Check agents (their drafts: what a publish would serve) against seed 004's checklist.

    Exits with 1 when any finding is an error (with --strict: any finding at all), so it can gate a team's CI.
    Going over the token budget is a warning, as seed 004 says. A draft that cannot be built at all is one
    finding of its agent; the other agents are still linted."""
    from crank.admin.lint import lint_draft

    if app is not None:
        results = _lint_app(app, app_dir, budget)
    elif workspace is None:
        raise click.UsageError("give a WORKSPACE (and optionally AGENTS), or --app module:attribute")
    else:
        registry = open_registry()
        with clear_errors():
            slugs = agents or tuple(agent["slug"] for agent in registry.agents(workspace))
            results = {slug: lint_draft(registry, workspace, slug, budget=budget) for slug in slugs}
    errors = 0
    for name, findings in results.items():
        errors += sum(strict or finding.severity == "error" for finding in findings)
        click.echo(f"{name}: {len(findings)} finding(s)")
        for finding in findings:
            click.echo(f"  {finding}")
    if errors:
        raise click.ClickException(f"{errors} {'finding' if strict else 'error'}(s)")


def _lint_app(app: str, app_dir: str, budget: int | None) -> dict[str, Any]:
    """Each MCP endpoint of an RPCService (path and API version), linted as one catalog."""
    from crank.admin.lint import lint_catalog
    from crank.sources.rpc import RPCSource

    service = import_app(app, app_dir)
    results: dict[str, Any] = {}
    if hasattr(service, "build"):
        service.build()
    for path, config in getattr(service, "mcp", {}).items():
        for version in service.rpc.versions:
            source = RPCSource(service.rpc, config, version)
            every_role = frozenset(role for method in source.methods for role in method.roles)
            catalog = source.catalog_for(every_role)  # every tool some caller can see
            results[f"{path} ({version})"] = lint_catalog(catalog, name=path, budget=budget)[0]
    if not results:
        raise click.BadParameter(f"{app} has no MCP endpoints (an RPCService with mcp=... is expected)")
    return results


@main.command()
@click.argument("workspace")
def catalog(workspace: str) -> None:
    """Each agent's token estimate against its budget, heaviest tools first, each with its size before
    compaction (drafts: the next publish).

    An agent whose draft cannot be built is reported as such and the others still are; the exit code
    is then 1."""
    from crank.admin.lint import catalog_report, tool_sizes, unbuildable

    registry = open_registry()
    broken = 0
    with clear_errors():
        for agent in registry.agents(workspace):
            try:
                runtime = registry.draft_runtime(workspace, agent["slug"])
                report = catalog_report(runtime)
                sizes = tool_sizes(runtime, registry.draft_runtime(workspace, agent["slug"], compact=False))
            except ConfigurationError as exc:
                broken += 1
                click.echo(f"{agent['slug']}: cannot be built\n  {unbuildable(exc)}")
                continue
            hint = f"crank agent mode {workspace} {agent['slug']} discovery"
            flag = f"  OVER BUDGET (or serve it in discovery mode: {hint})" if report.over_budget else ""
            click.echo(f"{agent['slug']}: about {report.estimate} of {report.budget} tokens{flag}")
            for size in sizes:
                click.echo(f"  {size}")
    if broken:
        raise click.ClickException(f"{broken} agent(s) cannot be built")


@main.command()
@click.argument("workspace")
@click.argument("agent_slug")
def check(workspace: str, agent_slug: str) -> None:
    """Call the agent's read-only tools (or each operation's sample_arguments) against the real upstreams and
    report answers that drift from the output schema (drafts: the next publish). Exit code 1 on any drift
    or error."""
    import asyncio

    from crank.admin.check import check_agent

    registry = open_registry()
    with clear_errors():
        results = asyncio.run(check_agent(registry, workspace, agent_slug, egress=egress_policy()))
    for result in results:
        click.echo(str(result))
    failed = sum(result.status in ("drift", "error") for result in results)
    if failed:
        raise click.ClickException(f"{failed} tool(s) drifted or failed")
