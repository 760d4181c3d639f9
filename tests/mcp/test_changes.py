"""The list-change hub: listener identities, and a stream that ends once its caller is no longer admitted."""

from __future__ import annotations

import asyncio

import pytest

from crank.mcp import Catalog
from crank.mcp.changes import ListChanges, TooManyListenersError, listener_owner, relay_changes
from crank.wire.auth import Principal

pytestmark = pytest.mark.anyio


def test_catalogs_without_labels_never_share_their_listeners() -> None:
    first, second = Catalog([]), Catalog([])
    assert first.identity != second.identity
    labeled = Catalog([], labels={"workspace": "acme", "agent": "desk"}, version="1")
    assert labeled.identity == Catalog([], labels={"agent": "desk", "workspace": "acme"}, version="2").identity
    changes = ListChanges()
    mine, theirs = changes.listen(first.identity, ("-", "a")), changes.listen(second.identity, ("-", "b"))
    changes.changed(first.identity, ["tools"])
    assert mine._pending == {"tools"} and not theirs._pending


async def test_a_stream_ends_at_the_first_wake_after_its_caller_is_no_longer_admitted() -> None:
    changes = ListChanges()
    listener = changes.listen("agent", ("acme", "owner"))
    admitted, told, beats = [True], [], []

    async def still() -> bool:
        return admitted[0]

    async def tell(kind: str) -> None:
        told.append(kind)

    async def beat() -> None:
        beats.append(1)

    relaying = asyncio.create_task(relay_changes(listener, frozenset({"tools"}), tell, beat, 60.0, still))
    changes.changed("agent", ["tools"])
    for _ in range(100):
        if told:
            break
        await asyncio.sleep(0.01)
    assert told == ["tools"]
    admitted[0] = False  # a key revoked: no list changed, so the hub asks everyone to check again
    changes.recheck()
    await asyncio.wait_for(relaying, 5)
    assert told == ["tools"] and not beats


def test_a_workspaces_streams_are_bounded_and_the_largest_group_gives_way_at_the_process_bound() -> None:
    changes = ListChanges(max_listeners=6, max_per_owner=2, max_per_group=4)
    hostile = [changes.listen("agent", ("mallory", f"mallory:key-{n % 2}")) for n in range(4)]
    with pytest.raises(TooManyListenersError, match="This workspace holds 4"):
        changes.listen("agent", ("mallory", "mallory:key-9"))  # its workspace's bound, whoever asks
    with pytest.raises(TooManyListenersError, match="per client"):
        changes.listen("agent", ("other", "mallory:key-0"))  # (an owner's bound holds first)
    others = [changes.listen("other", ("other", f"other:{n}")) for n in range(2)]
    assert len(changes) == 6  # the process's bound: the next one takes the place of the largest group's oldest
    victim = changes.listen("v", ("victim", "victim:key"))
    assert hostile[0].closed and not any(listener.closed for listener in [*hostile[1:], *others, victim])
    assert len(changes) == 6
    changes.close(hostile[0])  # its stream's own close, after the eviction: nothing more changes
    assert len(changes) == 6


def test_the_anonymous_callers_of_a_workspace_are_one_owner_whatever_their_addresses() -> None:
    anonymous = Principal("mallory", method="anonymous", id="mallory|anonymous|10.0.0.1")
    elsewhere = Principal("mallory", method="anonymous", id="mallory|anonymous|10.0.0.2")
    assert listener_owner(anonymous, ("10.0.0.1", 1)) == listener_owner(elsewhere, ("10.0.0.2", 2))
    assert listener_owner(anonymous, ("10.0.0.1", 1)) == ("mallory", "mallory:anonymous")
    assert listener_owner(Principal("acme", id="key-1"), None) == ("acme", "acme:key-1")
    assert listener_owner(None, ("10.0.0.3", 1)) == ("-", "address:10.0.0.3")  # no authentication at all
