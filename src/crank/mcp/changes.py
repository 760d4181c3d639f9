"""List changes: telling connected clients that what an endpoint offers changed (a new version was published).

A source that replaces catalogs (the gateway's published agents) calls `ListChanges.changed(identity, kinds)`;
each client listening to that catalog's identity is told, on its own stream:

- 2025-11-25: the GET stream of the endpoint (`notifications/tools/list_changed`, `.../resources/...`,
  `.../prompts/...`);
- 2026-07-28: a `subscriptions/listen` request, whose stream starts with `notifications/subscriptions/acknowledged`
  and carries only the kinds the client asked for, each tagged with the subscription's id.

A listener holds no queue: pending kinds are a set, so a client that reads slowly, or never, costs three flags,
however many versions are published meanwhile. Listeners are bounded per owner (the caller: a key, a token's
subject, the anonymous callers of a workspace together, else an address) and per group (the caller's workspace):
past either bound a new one is refused with a clear error, and the ones open go on. Past the process's bound, the
oldest listener of the largest group is closed to make room: one tenant's streams never keep another's out. Each
listening stream also marks its connection as one that `crank serve` may close at its connection cap
(`crank.wire.asgi.hold_long_stream`), the most numerous group's oldest first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Final

from crank.exceptions import RPCError
from crank.wire.auth import Principal
from crank.wire.budgets import client_address

__all__ = [
    "DEFAULT_MAX_LISTENERS",
    "DEFAULT_MAX_LISTENERS_PER_GROUP",
    "DEFAULT_MAX_LISTENERS_PER_OWNER",
    "HEARTBEAT_SECONDS",
    "LIST_KINDS",
    "ListChanges",
    "Listener",
    "TooManyListenersError",
    "list_changed_method",
    "listener_owner",
    "changed_since",
    "offer_tag",
    "relay_changes",
]

LIST_KINDS: Final = ("tools", "resources", "prompts")
DEFAULT_MAX_LISTENERS: Final = 1000
"""Listening streams one process holds open at once."""
DEFAULT_MAX_LISTENERS_PER_OWNER: Final = 8
"""Listening streams one caller (a key, a token's subject, else an address) may hold open at once."""
DEFAULT_MAX_LISTENERS_PER_GROUP: Final = 100
"""Listening streams one workspace's callers may hold open at once: a tenth of the process's and of `crank serve`'s
connections (`CRANK_MAX_CONNECTIONS`, 1,000), so that no tenant's many keys take every place."""
HEARTBEAT_SECONDS: Final = 25.0
"""An idle listening stream gets an SSE comment this often, so that proxies keep it and a gone client is noticed."""
TOO_MANY_LISTENERS: Final = -32000


def listener_owner(caller: Principal | None, client: Any) -> tuple[str, str]:
    """Whose listening stream it is: its group (the caller's workspace, `-` without one) and its owner, for the
    bounds. A signed-in caller is its workspace and id; the anonymous callers of a workspace (lazy sign-in) are one
    owner together, so that no number of addresses takes more than one caller's places; a caller without
    credentials elsewhere is its address."""
    group = caller.workspace if caller is not None and caller.workspace else "-"
    if caller is not None and caller.anonymous and group != "-":
        return group, f"{group}:anonymous"
    if caller is not None and caller.id and not caller.anonymous:
        return group, f"{group if group != '-' else ''}:{caller.id}"
    return group, f"address:{client_address({'client': client})}"


def list_changed_method(kind: str) -> str:
    return f"notifications/{kind}/list_changed"


class TooManyListenersError(RPCError):
    """Too many listening streams, in the process or for one caller."""

    default_code = TOO_MANY_LISTENERS


class Listener:
    """One client's listening stream: the kinds that changed since it last looked."""

    __slots__ = ("identity", "owner", "group", "_pending", "_event", "closed")

    def __init__(self, identity: Hashable, owner: str, group: str = "-") -> None:
        self.identity = identity
        self.owner = owner
        self.group = group
        self._pending: set[str] = set()
        self._event = asyncio.Event()
        self.closed = False

    def _tell(self, kinds: Iterable[str]) -> None:
        self._pending.update(kinds)
        self._event.set()

    async def next(self, timeout: float) -> frozenset[str]:
        """The kinds changed since the last call (waiting up to `timeout` seconds for one); empty after the
        timeout, or once the hub closed (`closed`)."""
        if not self._pending and not self.closed:
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except TimeoutError:
                return frozenset()
        self._event.clear()
        found, self._pending = frozenset(self._pending), set()
        return found


class ListChanges:
    """The listeners of one process, by catalog identity (`Catalog.identity`)."""

    def __init__(
        self,
        *,
        max_listeners: int = DEFAULT_MAX_LISTENERS,
        max_per_owner: int = DEFAULT_MAX_LISTENERS_PER_OWNER,
        max_per_group: int = DEFAULT_MAX_LISTENERS_PER_GROUP,
    ) -> None:
        self.max_listeners = max_listeners
        self.max_per_owner = max_per_owner
        self.max_per_group = max_per_group
        self._by_identity: dict[Hashable, set[Listener]] = {}
        self._per_owner: dict[str, int] = {}
        self._groups: dict[str, dict[Listener, None]] = {}  # each group's listeners, the oldest first
        self._count = 0
        self.heartbeat = HEARTBEAT_SECONDS

    def __len__(self) -> int:
        return self._count

    def listen(self, identity: Hashable, owner: tuple[str, str]) -> Listener:
        """A new listener for `owner` (`listener_owner`: its group and owner); `TooManyListenersError` past the
        owner's or the group's bound (nothing else changes). At the process's bound, the oldest listener of the
        largest group is closed to make room."""
        group, who = owner
        if self._per_owner.get(who, 0) >= self.max_per_owner:
            raise TooManyListenersError(
                f"At most {self.max_per_owner} listening streams per client; close one before opening another"
            )
        if len(self._groups.get(group, ())) >= self.max_per_group:
            raise TooManyListenersError(
                f"This workspace holds {self.max_per_group} listening streams already; close one before opening another"
            )
        if self._count >= self.max_listeners and not self._evict(group):
            raise TooManyListenersError(
                f"This server holds {self.max_listeners} listening streams already; try again later"
            )
        listener = Listener(identity, who, group)
        self._by_identity.setdefault(identity, set()).add(listener)
        self._per_owner[who] = self._per_owner.get(who, 0) + 1
        self._groups.setdefault(group, {})[listener] = None
        self._count += 1
        return listener

    def _evict(self, asking: str) -> bool:
        """Close the oldest listener of the group that holds the most (the `asking` one when it is among them: a
        tie never costs another group): its stream ends (its client may come back, within its group's bound)."""
        if not self._groups:
            return False
        most = max(len(listeners) for listeners in self._groups.values())
        own = self._groups.get(asking)
        largest = (
            own
            if own is not None and len(own) >= most
            else next(listeners for listeners in self._groups.values() if len(listeners) >= most)
        )
        oldest = next(iter(largest))
        oldest.closed = True
        oldest._event.set()
        self.close(oldest)
        return True

    def close(self, listener: Listener) -> None:
        listeners = self._by_identity.get(listener.identity)
        if listeners is None or listener not in listeners:
            return
        listeners.discard(listener)
        if not listeners:
            del self._by_identity[listener.identity]
        left = self._per_owner[listener.owner] - 1
        if left:
            self._per_owner[listener.owner] = left
        else:
            del self._per_owner[listener.owner]
        group = self._groups[listener.group]
        del group[listener]
        if not group:
            del self._groups[listener.group]
        self._count -= 1

    def changed(self, identity: Hashable, kinds: Iterable[str]) -> None:
        """Tell every listener of `identity` that these lists changed."""
        kinds = frozenset(kinds)
        if kinds:
            for listener in self._by_identity.get(identity, ()):
                listener._tell(kinds)

    def recheck(self) -> None:
        """Credentials changed (a key revoked, a policy replaced): every listener wakes with no change and its
        stream asks whether its caller is still admitted (`relay_changes`'s `admitted`). Call it on the loop."""
        for listeners in self._by_identity.values():
            for listener in listeners:
                listener._event.set()

    def close_all(self) -> None:
        """Shutting down: every listener wakes, finds itself closed, and ends its stream."""
        for listeners in self._by_identity.values():
            for listener in listeners:
                listener.closed = True
                listener._event.set()


async def relay_changes(
    listener: Listener,
    kinds: frozenset[str],
    tell: Callable[[str], Awaitable[None]],
    keep_alive: Callable[[], Awaitable[None]],
    heartbeat: float,
    admitted: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Tell a listening client each change of `kinds` (`tell(kind)`), with a heartbeat while nothing changes,
    until the hub closes (or the stream is cancelled: the client left). Each time it wakes (a change, a heartbeat,
    a `recheck`), `admitted` says whether the caller's credentials still hold; once they do not, it returns."""
    while not listener.closed:
        found = await listener.next(heartbeat)
        if listener.closed or (admitted is not None and not await admitted()):
            return
        if not found:
            await keep_alive()
        for kind in LIST_KINDS:
            if kind in found and kind in kinds:
                await tell(kind)


def offer_tag(offers: dict[str, int]) -> str:
    """The fingerprints of a catalog's lists as an event id prefix (`t1a2b3c4d.r5e6f7a8b.p9c0d1e2f`): a client that
    resumes a list-change stream sends it back, and is told exactly the lists that changed while it was away."""
    return ".".join(f"{kind[0]}{offers[kind] & 0xFFFFFFFF:08x}" for kind in LIST_KINDS)


def changed_since(last_event_id: str, offers: dict[str, int]) -> list[str]:
    """The kinds whose fingerprint differs from the one in a resuming client's `Last-Event-ID` (every kind for an
    id this server did not make)."""
    tag, _, _ = last_event_id.rpartition("-")
    then = {part[:1]: part[1:] for part in tag.split(".") if part}
    now = offer_tag(offers).split(".")
    return [kind for kind, part in zip(LIST_KINDS, now, strict=True) if then.get(kind[0]) != part[1:]]
