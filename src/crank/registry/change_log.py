"""The change log: what each generation changed, so that a replica reloads that and nothing else.

Every write that replicas serve bumps the generation (`RegistryBase._bump`) and records here what it changed:
an agent published or rolled back, a workspace whose OAuth policy or limits changed, an API key made, limited or
revoked. A replica at generation G asks `changes_since(G)` and reads back only those agents, workspaces and keys,
so a publish costs every replica the same whatever the number of tenants.

The log keeps the last `CHANGE_LOG_GENERATIONS` generations. A replica further behind (or starting, or one whose
registry was upgraded after it last read) is told `everything`, and reloads all, as it did before the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from sqlalchemy import delete, distinct, func, insert, select, update
from sqlalchemy.orm import Session

from crank.registry.models import RegistryChange, RegistryState

__all__ = ["CHANGE_LOG_GENERATIONS", "MAX_CHANGES_READ", "Change", "Changes", "read_since", "record"]

CHANGE_LOG_GENERATIONS: Final = 10_000
"""Generations the log keeps; a replica further behind reloads everything."""
MAX_CHANGES_READ: Final = 500
"""Changes a replica reads back one by one; past it (a burst of publishes, a bulk import), reloading everything
costs no more than naming each."""
_PRUNE_EVERY: Final = 100  # generations between two prunings of the log (one DELETE, by the generation's index)

ChangeKind = Literal["agent", "workspace", "key"]


@dataclass(frozen=True, slots=True)
class Change:
    """One thing a write changed: an agent (`name`: its slug), a workspace's policy or limits (no name), or an API
    key (`name`: its digest), in `workspace` (a slug)."""

    kind: ChangeKind
    workspace: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed after a replica's generation, up to `generation`: `everything`, or these agents (workspace,
    slug), workspaces (slug) and keys (digest)."""

    generation: int
    everything: bool = False
    agents: frozenset[tuple[str, str]] = frozenset()
    workspaces: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()

    def touches_agent(self, workspace: str, agent: str) -> bool:
        """Whether the agent's served catalog may differ: it was published, or its workspace's policy changed."""
        return self.everything or workspace in self.workspaces or (workspace, agent) in self.agents

    def touches_key(self, digest: str, workspace: str) -> bool:
        """Whether the key's scope may differ: it was made, limited or revoked, or its workspace's limits changed."""
        return self.everything or workspace in self.workspaces or digest in self.keys


def record(session: Session, generation: int, changes: tuple[Change, ...]) -> None:
    """Log what `generation` changed (at least one row: a generation with none is one an older Crank bumped, and
    makes its readers reload everything), in the transaction that bumped it; now and then, forget the oldest."""
    rows = [{"generation": generation, "kind": c.kind, "workspace": c.workspace, "name": c.name} for c in changes]
    session.execute(insert(RegistryChange), rows)
    if generation % _PRUNE_EVERY == 0 and generation > CHANGE_LOG_GENERATIONS:
        oldest = generation - CHANGE_LOG_GENERATIONS
        session.execute(delete(RegistryChange).where(RegistryChange.generation <= oldest))
        session.execute(update(RegistryState).where(RegistryState.id == 1).values(changes_from=oldest))


def read_since(session: Session, since: int) -> Changes:
    """The changes after generation `since`, up to the current one (read in this order: a change logged after the
    generation is read belongs to a later reload). `everything` when the log does not reach back that far."""
    state = session.execute(select(RegistryState.generation, RegistryState.changes_from).filter_by(id=1)).one()
    generation, changes_from = int(state[0]), int(state[1])
    if since < changes_from or since > generation:  # too far behind, or a registry that was reset
        return Changes(generation, everything=True)
    logged = session.scalar(
        select(func.count(distinct(RegistryChange.generation))).where(
            RegistryChange.generation > since, RegistryChange.generation <= generation
        )
    )
    if logged != generation - since:  # a generation bumped by a Crank without the log (a rolling upgrade)
        return Changes(generation, everything=True)
    query = (
        select(RegistryChange.kind, RegistryChange.workspace, RegistryChange.name)
        .where(RegistryChange.generation > since, RegistryChange.generation <= generation)
        .limit(MAX_CHANGES_READ + 1)
    )
    rows = session.execute(query).all()
    if len(rows) > MAX_CHANGES_READ:
        return Changes(generation, everything=True)
    agents = frozenset((row[1], row[2]) for row in rows if row[0] == "agent" and row[2] is not None)
    workspaces = frozenset(row[1] for row in rows if row[0] == "workspace")
    keys = frozenset(row[2] for row in rows if row[0] == "key" and row[2] is not None)
    return Changes(generation, agents=agents, workspaces=workspaces, keys=keys)
