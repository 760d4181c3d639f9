"""The list-change hub: listener identities, and a stream that ends once its caller is no longer admitted."""

from __future__ import annotations

import asyncio

import pytest

from crank.mcp import Catalog
from crank.mcp.changes import ListChanges, relay_changes

pytestmark = pytest.mark.anyio


def test_catalogs_without_labels_never_share_their_listeners() -> None:
    first, second = Catalog([]), Catalog([])
    assert first.identity != second.identity
    labeled = Catalog([], labels={"workspace": "acme", "agent": "desk"}, version="1")
    assert labeled.identity == Catalog([], labels={"agent": "desk", "workspace": "acme"}, version="2").identity
    changes = ListChanges()
    mine, theirs = changes.listen(first.identity, "a"), changes.listen(second.identity, "b")
    changes.changed(first.identity, ["tools"])
    assert mine._pending == {"tools"} and not theirs._pending


async def test_a_stream_ends_at_the_first_wake_after_its_caller_is_no_longer_admitted() -> None:
    changes = ListChanges()
    listener = changes.listen("agent", "owner")
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
