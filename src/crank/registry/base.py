"""`RegistryBase`: what every part of the registry shares: its engine (a writer that takes SQLite's write lock
when a transaction begins), the look-ups of a workspace, agent and operation that answer `RegistryNotFoundError`,
and the generation bump every change makes and announces to the replicas. `Registry` is its parts together
(`crank.registry.service`, `crank.registry.publishing`, `crank.registry.keys`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, event, func, select, update
from sqlalchemy.orm import Session

from crank.exceptions import RegistryNotFoundError
from crank.registry.change_log import Change, record
from crank.registry.changes import POSTGRES_CHANNEL
from crank.registry.models import Agent, Operation, RegistryState, Workspace
from crank.registry.runtime import Limits
from crank.types import JSONObject

__all__ = ["RegistryBase", "limits_json", "limits_of"]


class RegistryBase:
    """`announce`: told each new generation after its change commits (`crank.registry.changes.RedisAnnouncer`
    for a registry that is not PostgreSQL; PostgreSQL announces in the transaction itself)."""

    def __init__(self, engine: Engine, *, announce: Callable[[int], None] | None = None) -> None:
        self.engine = engine
        self.announce = announce
        self._notify = engine.dialect.name == "postgresql"
        # Transactions that write take SQLite's write lock when they begin (see `crank.registry.database`),
        # so a read-modify-write never loses a concurrent change; reads stay concurrent.
        self._writer = engine.execution_options(crank_write=True)

    @staticmethod
    def _workspace(session: Session, slug: str) -> Workspace:
        ws = session.scalar(select(Workspace).filter_by(slug=slug))
        if ws is None:
            raise RegistryNotFoundError(f"no workspace {slug!r}")
        return ws

    @staticmethod
    def _agent(session: Session, ws: Workspace, slug: str) -> Agent:
        return _one_in(session, ws, Agent, f"no agent {slug!r}", slug=slug)

    @staticmethod
    def _operation(session: Session, ws: Workspace, name: str) -> Operation:
        return _one_in(session, ws, Operation, f"no operation {name!r}", name=name)

    def _bump(self, session: Session, change: Change, *more: Change) -> None:
        """The next generation, with what it changes in the log (`crank.registry.change_log`), announced to every
        replica when the transaction commits (and never when it rolls back): PostgreSQL delivers a NOTIFY on
        commit; the `announce` hook runs after it. A replica reads back what changed, by the generation."""
        generation = session.execute(
            update(RegistryState)
            .where(RegistryState.id == 1)
            .values(generation=RegistryState.generation + 1)
            .returning(RegistryState.generation)
        ).scalar_one()
        record(session, generation, (change, *more))
        if self._notify:
            session.execute(select(func.pg_notify(POSTGRES_CHANNEL, str(generation))))
        if self.announce is not None:
            if "crank_announce" not in session.info:  # once per transaction, with its last generation
                event.listen(session, "after_commit", self._announce_committed)
            session.info["crank_announce"] = generation

    def _announce_committed(self, session: Session) -> None:
        if self.announce is not None:
            self.announce(session.info.pop("crank_announce"))


def limits_of(stored: Any) -> Limits | None:
    """Stored limits as the model (a row the admin models checked); None for none, or for no limit at all."""
    if stored is None:
        return None
    limits = stored if isinstance(stored, Limits) else Limits.model_validate(stored)
    return None if limits.empty else limits


def limits_json(limits: Limits | None) -> JSONObject | None:
    return None if limits is None or limits.empty else limits.model_dump(mode="json", exclude_none=True)


_InWorkspace = TypeVar("_InWorkspace", Agent, Operation)


def _one_in(session: Session, ws: Workspace, model: type[_InWorkspace], missing: str, **key: str) -> _InWorkspace:
    """The workspace's one row of `model` with `key`, or `RegistryNotFoundError` saying what is `missing` where."""
    row = session.scalar(select(model).filter_by(workspace_id=ws.id, **key))
    if row is None:
        raise RegistryNotFoundError(f"{missing} in workspace {ws.slug!r}")
    return row
