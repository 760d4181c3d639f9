"""`WorkspacePolicies`: a workspace's OAuth policy read when a request first names the workspace, held in a bounded
cache, read again when a change names it; no policy read when a replica starts."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection

import pytest
from sqlalchemy import Engine

from crank.exceptions import DependencyUnavailableError
from crank.gateway.client import UpstreamClient
from crank.mcp.catalog import Catalog
from crank.registry import Registry, WorkspaceOAuth
from crank.registry.runtime import OAuthPolicy
from crank.sources.agents import AgentSource
from crank.sources.workspace_policies import UNKNOWN, WorkspacePolicies

pytestmark = pytest.mark.anyio

POLICY = OAuthPolicy(issuers=("https://id.example",))


class CountingPolicies(Registry):
    """The registry, noting the workspaces each policy read asks for."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.reads: list[list[str]] = []
        self.hold: threading.Event | None = None  # the next read, once it has read, waits for it
        self.held_read = threading.Event()

    def workspace_oauth(self, workspaces: Collection[str] | None = None) -> dict[str, WorkspaceOAuth]:
        self.reads.append(sorted(workspaces) if workspaces is not None else ["*"])
        hold, self.hold = self.hold, None
        found = super().workspace_oauth(workspaces)
        if hold is not None:
            self.held_read.set()
            hold.wait(timeout=30)
        return found


@pytest.fixture
def counting(registry: Registry) -> CountingPolicies:
    """The test's registry (SQLite and PostgreSQL), counting its policy reads."""
    return CountingPolicies(registry.engine)


def workspaces(registry: Registry, count: int, *, policy: OAuthPolicy | None = POLICY) -> list[str]:
    slugs = [f"ws{index:02}" for index in range(count)]
    for slug in slugs:
        registry.create_workspace(slug, slug)
        if policy is not None:
            registry.set_workspace_oauth(slug, policy)
    return slugs


async def test_a_policy_is_read_once_on_the_first_request_however_many_wait_and_then_held(
    counting: CountingPolicies,
) -> None:
    (slug,) = workspaces(counting, 1)
    policies = WorkspacePolicies(counting, lambda workspace: True)
    assert policies.held(slug) is UNKNOWN and counting.reads == []  # nothing read before a request names it
    answers = await asyncio.gather(*(policies.read(slug, f"192.0.2.{index}") for index in range(5)))
    assert all(answer is not None and answer.policy.issuers == POLICY.issuers for answer in answers)
    assert counting.reads == [[slug]]
    held = policies.held(slug)
    assert held is answers[0]


async def test_a_workspace_without_published_agents_is_answered_without_a_read(counting: CountingPolicies) -> None:
    (slug,) = workspaces(counting, 1)
    policies = WorkspacePolicies(counting, lambda workspace: False)
    assert policies.held(slug) is None and await policies.read(slug) is None
    assert counting.reads == []


async def test_a_workspace_without_a_policy_or_with_keys_only_is_held_as_none(counting: CountingPolicies) -> None:
    plain, keys_only = workspaces(counting, 2, policy=None)
    counting.set_workspace_oauth(keys_only, OAuthPolicy(issuers=("https://id.example",), credentials="keys"))
    policies = WorkspacePolicies(counting, lambda workspace: True)
    assert await policies.read(plain) is None and await policies.read(keys_only) is None
    assert policies.held(plain) is None and policies.held(keys_only) is None  # held: no second read
    assert len(counting.reads) == 2


async def test_more_workspaces_than_the_cache_holds_are_all_answered_and_the_cache_stays_bounded(
    counting: CountingPolicies,
) -> None:
    slugs = workspaces(counting, 6)
    policies = WorkspacePolicies(counting, lambda workspace: True, size=2)
    for _ in range(2):
        for slug in slugs:
            found = await policies.read(slug)
            assert found is not None and len(policies) <= 2
    assert len(counting.reads) == 12  # each pushed out before its turn came again: read again
    assert policies.held(slugs[0]) is UNKNOWN and policies.held(slugs[-1]) is not UNKNOWN


async def test_a_reload_reads_again_only_the_held_policies_its_changes_name(counting: CountingPolicies) -> None:
    held, other, cold = workspaces(counting, 3)
    policies = WorkspacePolicies(counting, lambda workspace: True)
    policies.update(counting.changes_since(-1))  # a replica's first reload: nothing held, nothing read
    assert counting.reads == []
    await policies.read(held)
    await policies.read(other)
    since = counting.generation()
    tighter = OAuthPolicy(issuers=("https://id.example",), agent_scopes={"*": ("tools:admin",)})
    counting.set_workspace_oauth(held, tighter)
    counting.set_workspace_oauth(cold, tighter)
    counting.reads.clear()
    policies.update(counting.changes_since(since))
    assert counting.reads == [[held]]  # `cold` is not held: its next request reads it; `other` did not change
    now = policies.held(held)
    assert now is not None and not isinstance(now, type(UNKNOWN)) and now.policy.agent_needs("x") == {"tools:admin"}
    counting.set_workspace_oauth(held, None)
    policies.update(counting.changes_since(counting.generation() - 1))
    assert policies.held(held) is None  # its policy removed: it takes keys now


async def test_a_read_overlapped_by_a_reload_is_read_again_and_what_the_reload_applied_is_served(
    counting: CountingPolicies,
) -> None:
    """A request that joins a read begun before a reload (the policy changed meanwhile) gets the new policy: the
    read is made again, never the old answer kept or served to it."""
    (slug,) = workspaces(counting, 1)
    policies = WorkspacePolicies(counting, lambda workspace: True)
    counting.hold = hold = threading.Event()
    reading = asyncio.ensure_future(policies.read(slug))
    assert await asyncio.to_thread(counting.held_read.wait, 30)  # the read found the old policy ...
    since = counting.generation()
    counting.set_workspace_oauth(slug, None)  # ... the workspace takes keys only now ...
    await asyncio.to_thread(policies.update, counting.changes_since(since))  # ... and a reload came meanwhile
    joined = asyncio.ensure_future(policies.read(slug))  # a request after the reload, joining the read
    hold.set()
    assert await reading is None and await joined is None  # read again: the policy as the reload left it
    assert policies.held(slug) is None and len(counting.reads) == 2  # the first and the second (the reload: none)


async def test_past_its_share_one_address_is_refused_with_503_and_another_still_reads(
    counting: CountingPolicies,
) -> None:
    first, second, third = workspaces(counting, 3)
    policies = WorkspacePolicies(counting, lambda workspace: True, reads_per_second=4)  # one a second an address
    await policies.read(first, "198.51.100.7")
    with pytest.raises(DependencyUnavailableError) as refused:
        await policies.read(second, "198.51.100.7")
    assert refused.value.retry_after == 1
    assert await policies.read(third, "192.0.2.1") is not None
    assert await policies.read(first, "198.51.100.7") is not None  # held: no read, no budget
    assert len(counting.reads) == 2


async def test_a_replica_starts_without_reading_any_policy_and_reads_one_with_its_workspace_first_agent(
    counting: CountingPolicies,
) -> None:
    slugs = workspaces(counting, 3)
    for slug in slugs:
        target = {"method": "GET", "url": "http://127.0.0.1:9/books"}
        counting.put_operation(slug, "get_book", {"protocol": "http", "target": target})
        counting.put_agent(slug, "desk", {"bindings": [{"operation": "get_book"}]})
        counting.publish(slug, "desk")
    source = AgentSource(counting, UpstreamClient(), require_keys=False, freeze_heap=False)
    try:
        source.reload()
        assert counting.reads == []  # however many workspaces take tokens
        scope = {"path": "/", "path_params": {"workspace": "ws01", "agent": "desk"}, "client": ("192.0.2.1", 1)}
        built = source.provide(scope)
        assert isinstance(await built if not isinstance(built, Catalog) else built, Catalog)
        served = source._catalogs.peek(("ws01", "desk"))
        assert served is not None and served.stamp[1] == POLICY  # built with its workspace's policy
        assert counting.reads == [["ws01"]]  # the policy its tools take their scopes from, read with it
    finally:
        await source.aclose()
