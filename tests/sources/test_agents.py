"""`AgentSource` (crank.sources.agents): the watcher that follows the registry keeps running."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from crank.gateway.client import UpstreamClient
from crank.registry import Registry
from crank.sources.agents import AgentSource

pytestmark = pytest.mark.anyio


async def test_a_watcher_that_ended_is_started_again_by_the_next_request(sqlite_registry: Registry) -> None:
    source = AgentSource(sqlite_registry, UpstreamClient(), require_keys=False, freeze_heap=False)
    scope = {"path": "/", "path_params": {"workspace": "shop", "agent": "desk"}}
    with contextlib.suppress(Exception):  # no such agent: what matters is what the request started
        source.provide(scope)
    first = source._watcher
    assert first is not None and not first.done()
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    await asyncio.sleep(0)  # the task's done callbacks run
    with contextlib.suppress(Exception):
        source.provide(scope)
    second = source._watcher
    assert second is not None and second is not first and not second.done()
    await source.aclose()
