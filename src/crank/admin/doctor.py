"""`crank doctor`: what would make a published agent fail every call on this host, each with its fix.

A publish is checked where it is made; a call runs where the gateway serves it, with that process's settings and
environment. The checks here read the registry's published views and judge them with this process's: the egress
policy (a target the server may not reach), the secret references (a variable that is not set or not given to the
workspace, a file that cannot be read) and the credentials the API description requires and no one gave. Run with
the server's settings (the data folder's `crank.toml`, the same `CRANK_*` variables), it says what the server will
answer. `crank serve` runs the same checks at its start when the registry holds few agents
(`START_CHECK_AGENTS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from crank.exceptions import ConfigurationError
from crank.gateway.egress import ALLOW_VARIABLE, EgressPolicy
from crank.gateway.secrets import missing_credentials, missing_secrets
from crank.registry import Changes, Registry, RuntimeView
from crank.sources.agents import refused_targets

__all__ = ["START_CHECK_AGENTS", "Finding", "agent_findings", "published_findings"]

START_CHECK_AGENTS: Final = 200
"""`crank serve` checks every published agent at its start when there are at most this many (reading each one's
view); beyond, it says how many there are and that `crank doctor` checks them."""
_READ_CHUNK: Final = 200  # published views read at a time: a registry of thousands is never held whole


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason some calls of an agent will fail here: which agent and tools, what is wrong, and the fix."""

    agent: str
    """workspace/agent"""
    tools: tuple[str, ...]
    problem: str
    fix: str

    def line(self) -> str:
        return f"agent {self.agent}: {self.problem} (tools: {', '.join(self.tools)}); fix: {self.fix}"


def agent_findings(runtime: RuntimeView, egress: EgressPolicy) -> list[Finding]:
    """What would fail the calls of one published view on this host, grouped by cause."""
    agent = f"{runtime.workspace.slug}/{runtime.agent.slug}"
    found: list[Finding] = []
    refused: dict[tuple[str, str], list[str]] = {}
    for target in refused_targets(runtime, egress):
        refused.setdefault((target.origin, target.reason), []).append(target.tool)
    for (origin, reason), tools in refused.items():
        fix = f"allow it in egress_allow (the data folder's crank.toml, or {ALLOW_VARIABLE}) if it is yours to call"
        found.append(Finding(agent, tuple(tools), f"this server may not connect to {origin}: {reason}", fix))
    secrets: dict[tuple[str, str], list[str]] = {}
    for missing in missing_secrets(runtime):
        secrets.setdefault((missing.reference, missing.problem), []).append(missing.tool)
    for (reference, problem), tools in secrets.items():
        found.append(Finding(agent, tuple(tools), f"secret {reference} does not resolve: {problem}",
                             _secret_fix(reference, problem, runtime.workspace.slug)))  # fmt: skip
    triples = ((tool.tool_name, tool.target.url, tool.execution_config) for tool in runtime.tools)
    for gap in missing_credentials(runtime.workspace.slug, triples):
        problem = f"the API requires {gap.type} credentials ({gap.scheme}) and none are given: the upstream refuses"
        found.append(Finding(agent, gap.tools, problem, gap.how()))
    return found


def _secret_fix(reference: str, problem: str, workspace: str) -> str:
    name = reference.partition(":")[2]
    if "is not set" in problem:
        return f"set {name} in the environment of crank serve (and of this command)"
    if reference.startswith("env:"):
        return (f"give it to the workspace: secret_env_allow = \"{workspace}:{name}\" in the data folder's crank.toml "
                f"(or CRANK_SECRET_ENV_ALLOW)")  # fmt: skip
    return "put the file where secret_dirs says, in a folder named after the workspace, readable by crank serve"


def published_findings(registry: Registry, egress: EgressPolicy, agents: Iterable[tuple[str, str]] | None = None
                       ) -> Iterator[Finding]:  # fmt: skip
    """The findings of every published agent (or of `agents`), read a chunk of views at a time."""
    keys = sorted(agents if agents is not None else registry.published_versions())
    for start in range(0, len(keys), _READ_CHUNK):
        chunk = Changes(-1, agents=frozenset(keys[start : start + _READ_CHUNK]))
        for published in sorted(registry.published(chunk), key=lambda item: (item.workspace, item.agent)):
            try:
                runtime = published.runtime
            except ConfigurationError as exc:  # a row an older or newer Crank wrote: this agent alone
                agent = f"{published.workspace}/{published.agent}"
                yield Finding(agent, (), f"its published version cannot be read here: {exc}", "publish it again")
                continue
            yield from agent_findings(runtime, egress)
