"""`WorkspacePolicies`: each workspace's OAuth policy as a replica knows it, read when a request first names the
workspace and the most recently read held.

A replica loads no policy at start. The first request for a workspace's agents (or its connect page) reads that
workspace's policy, and its limits, from the registry: one read however many requests wait for it, within a budget
of reads a second (a quarter of it for one client address; past it, 503 with `Retry-After`). A workspace that has
no published agent is answered without a read (it takes no token: no agent there to serve). The `size` most
recently read workspaces are held, those without a policy too (most of them), so that a workspace's next requests
cost one dictionary look-up (`known`; the oldest read goes first, and is read again on its next request). A reload
reads again the held policies its changes name; a read that overlapped a reload keeps nothing (the reload is
newer).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Final

from crank.exceptions import DependencyUnavailableError
from crank.registry import Changes, Registry, WorkspaceOAuth
from crank.sources.registry_reads import registry_read
from crank.wire.budgets import SharedBudget

__all__ = ["DEFAULT_POLICY_CACHE", "POLICY_READS_PER_SECOND", "UNKNOWN", "Unknown", "WorkspacePolicies"]

DEFAULT_POLICY_CACHE: Final = 10_000
"""Workspaces whose policy (or its absence) a replica holds, the most recently read."""
POLICY_READS_PER_SECOND: Final = 100.0
"""Registry reads of workspaces' policies a replica makes a second on requests, a quarter of them for one client."""
_READ_CHUNK: Final = 500  # workspaces one registry read asks for (a reload of every held policy)
_READ_ATTEMPTS: Final = 3  # reads of one policy when reloads overlap them
_BUSY_RETRY_AFTER: Final = 1


class Unknown(enum.Enum):
    """The policy of a workspace this replica does not hold: read it (`WorkspacePolicies.read`)."""

    UNKNOWN = "unknown"


UNKNOWN: Final = Unknown.UNKNOWN


class WorkspacePolicies:
    """The OAuth policies of a registry's workspaces, as a replica holds them. `held` is the look-up on every
    request; `read` the registry's answer for a workspace not held; `update` the reload's."""

    def __init__(
        self,
        registry: Registry,
        published: Callable[[str], bool],
        *,
        size: int = DEFAULT_POLICY_CACHE,
        reads_per_second: float = POLICY_READS_PER_SECOND,
    ) -> None:
        """`published(workspace)`: whether the workspace has an agent published (the replica's index)."""
        self.registry = registry
        self.size = size
        self._published = published
        self._held: OrderedDict[str, WorkspaceOAuth | None] = OrderedDict()
        self.known: Mapping[str, WorkspaceOAuth | None] = self._held
        """The policies held, by workspace: the authenticator's look-up on every request (`UNKNOWN` when missing)."""
        self._lock = threading.Lock()  # a reload (in a thread) against a read adding its answer
        self._epoch = 0  # bumped when a reload starts and ends: a read that overlapped one keeps nothing
        self._budget = SharedBudget(reads_per_second)
        self._reading: dict[str, asyncio.Future[WorkspaceOAuth | None]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def held(self, workspace: str) -> WorkspaceOAuth | None | Unknown:
        """The workspace's policy (None: it takes API keys only), or `UNKNOWN` when it is not held here."""
        found = self._held.get(workspace, UNKNOWN)
        return None if found is UNKNOWN and not self._published(workspace) else found

    async def read(self, workspace: str, client: Hashable = "") -> WorkspaceOAuth | None:
        """The workspace's policy, read from the registry when it is not held: once however many requests ask (a
        request that leaves does not cancel it). A new read takes one from the budget (`client`: the address that
        asks; 503 past it), and a registry that fails it is 503."""
        found = self.held(workspace)
        if not isinstance(found, Unknown):
            return found
        running = self._reading.get(workspace)
        if running is None:
            if not self._budget.take(client):
                raise DependencyUnavailableError(
                    "registry", "This server is reading many workspaces at once; retry in a moment.",
                    retry_after=_BUSY_RETRY_AFTER,
                )  # fmt: skip
            running = self._reading[workspace] = asyncio.ensure_future(self._read(workspace))
            running.add_done_callback(functools.partial(self._finished, workspace))
        return await asyncio.shield(running)

    def read_now(self, workspace: str) -> WorkspaceOAuth | None:
        """`read` in a worker thread (a reload rebuilding an agent whose workspace's policy is no longer held)."""
        found = self.held(workspace)
        if not isinstance(found, Unknown):
            return found
        policy = _served(self.registry.workspace_oauth([workspace]).get(workspace))
        self._keep(workspace, policy, self._epoch)  # the reload's own thread: no reload overlaps it
        return policy

    def update(self, changes: Changes) -> None:
        """Follow `changes` (the reload's thread): the held policies of the workspaces they name read again."""
        with self._lock:
            self._epoch += 1  # a read running now may have read the registry before these changes
            touched = list(self._held) if changes.everything else [ws for ws in changes.workspaces if ws in self._held]
        read = dict(self._read_all(touched))
        with self._lock:
            self._epoch += 1
            for workspace in touched:
                if workspace in self._held:
                    self._held[workspace] = read.get(workspace)

    def _read_all(self, workspaces: list[str]) -> Iterable[tuple[str, WorkspaceOAuth | None]]:
        for start in range(0, len(workspaces), _READ_CHUNK):
            for workspace, held in self.registry.workspace_oauth(workspaces[start : start + _READ_CHUNK]).items():
                yield workspace, _served(held)

    async def _read(self, workspace: str) -> WorkspaceOAuth | None:
        """The registry's policy, read again when a reload overlapped the read (the policy may have changed: the
        requests that joined this read, even after the reload, get what it applied)."""
        for _ in range(_READ_ATTEMPTS):
            epoch = self._epoch
            found = await registry_read(self.registry.workspace_oauth, [workspace], what="read a workspace's policy")
            policy = _served(found.get(workspace))
            if self._keep(workspace, policy, epoch):
                return policy
        return policy  # reloads overlapped every read: the last one started after the others, and is kept by none

    def _keep(self, workspace: str, policy: WorkspaceOAuth | None, epoch: int) -> bool:
        """Hold a read's answer, unless a reload ran meanwhile (False: read it again)."""
        with self._lock:
            if self._epoch != epoch:
                return False
            self._held[workspace] = policy
            while len(self._held) > self.size:
                self._held.popitem(last=False)
        return True

    def _finished(self, workspace: str, done: asyncio.Future[WorkspaceOAuth | None]) -> None:
        del self._reading[workspace]
        if not done.cancelled():
            done.exception()  # retrieved: a read no request waits for any more is no error


def _served(held: WorkspaceOAuth | None) -> WorkspaceOAuth | None:
    """A policy that takes API keys only is no policy at all here: no token is checked, no metadata served."""
    return held if held is not None and held.policy.credentials != "keys" else None
