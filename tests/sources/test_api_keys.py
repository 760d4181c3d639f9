"""`ApiKeys`: API keys looked up by their digest when first used, held in a bounded cache, read again when a change
touches them, and trusted only while the registry confirms them."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection

import pytest
from sqlalchemy import Engine

from crank.exceptions import DependencyUnavailableError
from crank.registry import Changes, KeyScope, Registry, key_digest
from crank.registry.runtime import Limits, RateLimit
from crank.sources.api_keys import ApiKeys, KeyCacheLimits

pytestmark = pytest.mark.anyio


class CountingKeys(Registry):
    """The registry, noting each key lookup (by digest) and each read of several keys."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.lookups: list[str] = []
        self.reads: list[list[str]] = []
        self.hold: threading.Event | None = None
        self.held_read = threading.Event()

    def api_key(self, digest: str) -> KeyScope | None:
        self.lookups.append(digest)
        hold, self.hold = self.hold, None
        found = super().api_key(digest)
        if hold is not None:  # the next lookup, once it has read, waits for the test
            self.held_read.set()
            hold.wait(timeout=30)
        return found

    def api_keys(self, digests: Collection[str] | None = None) -> dict[str, KeyScope]:
        self.reads.append(sorted(digests) if digests is not None else ["*"])
        return super().api_keys(digests)


@pytest.fixture
def counting(registry: Registry) -> CountingKeys:
    """The test's registry (SQLite and PostgreSQL), counting its key reads."""
    return CountingKeys(registry.engine)


def trusted(registry: Registry, limits: KeyCacheLimits | None = None) -> ApiKeys:
    """A replica's keys after its first reload."""
    keys = ApiKeys(registry, limits)
    keys.update(Changes(registry.generation(), everything=True))
    keys.confirmed()
    return keys


async def known(keys: ApiKeys, key: str, client: str = "192.0.2.1") -> KeyScope | None:
    """Who the key is, as a request finds out: held, else looked up."""
    return keys.authenticate(key) or await keys.confirm(key, client)


async def test_a_cache_never_confirmed_or_confirmed_too_long_ago_refuses_every_key_and_says_so_once_an_episode(
    sqlite_registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_registry.create_workspace("acme", "ACME")
    key = sqlite_registry.create_api_key("acme")
    keys = ApiKeys(sqlite_registry, list_max_age=0.0)
    with pytest.raises(DependencyUnavailableError):  # never confirmed
        keys.authenticate(key)
    with pytest.raises(DependencyUnavailableError):  # nor looked up
        await keys.confirm(key)
    keys.confirmed()  # trusted for 0 s: stale at once, a new episode
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="crank.gateway"):
        for _ in range(3):
            with pytest.raises(DependencyUnavailableError) as refused:
                keys.authenticate(key)
    assert refused.value.retry_after > 0
    assert len([r for r in caplog.records if "has not confirmed the API keys" in r.getMessage()]) == 1
    assert keys.authenticate(None) is None  # no key: nothing to refuse (the authenticator asks for one)


async def test_no_key_is_read_at_start_and_each_is_looked_up_once_by_its_digest(counting: CountingKeys) -> None:
    counting.create_workspace("acme", "ACME")
    support, everything = counting.create_api_key("acme", ["support"]), counting.create_api_key("acme")
    keys = trusted(counting)
    assert counting.reads == [] and len(keys) == 0  # a replica's start reads no key, however many there are
    assert keys.authenticate(support) is None  # not held: the request goes on to `confirm`
    for _ in range(3):
        found = await known(keys, support)
        assert found is not None and found.workspace == "acme" and found.agents == frozenset({"support"})
    everyone = await known(keys, everything)
    assert everyone is not None and everyone.agents is None
    assert len(counting.lookups) == 2 and len(keys) == 2  # once each: then held


async def test_more_keys_than_the_cache_holds_are_all_served_in_turn_and_the_cache_stays_bounded(
    counting: CountingKeys,
) -> None:
    counting.create_workspace("acme", "ACME")
    made = [counting.create_api_key("acme") for _ in range(8)]
    keys = trusted(counting, KeyCacheLimits(size=3))
    for _ in range(2):
        for key in made:
            found = await known(keys, key)
            assert found is not None and found.workspace == "acme"
            assert len(keys) <= 3
    assert len(counting.lookups) == 16  # each pushed out before its turn came again: looked up again
    assert keys.authenticate(made[-1]) is not None  # the most recently used are held
    assert keys.authenticate(made[0]) is None


async def test_a_reload_reads_again_only_the_held_keys_its_changes_touch_and_drops_the_revoked(
    counting: CountingKeys,
) -> None:
    counting.create_workspace("acme", "ACME")
    counting.create_workspace("globex", "Globex")
    acme, other, globex = (counting.create_api_key("acme"), counting.create_api_key("acme"),
                           counting.create_api_key("globex"))  # fmt: skip
    keys = trusted(counting)
    for key in (acme, other, globex):
        await known(keys, key)
    since = counting.generation()
    counting.revoke_api_key(acme)
    added = counting.create_api_key("acme", ["support"])
    counting.put_workspace("globex", "Globex", key_limits=Limits(rate=RateLimit(calls=5, window=60)))
    changes = counting.changes_since(since)
    counting.reads.clear()
    assert keys.update(changes) is True  # a key the changes name is gone: revoked
    # Read: the keys the changes name, and the held key of the workspace whose key limits changed; not acme's other.
    (read,) = counting.reads
    assert set(read) == set(changes.keys) | {key_digest(globex)}
    assert keys.authenticate(acme) is None and await keys.confirm(acme) is None
    held_globex = keys.authenticate(globex)
    assert held_globex is not None and held_globex.limits is not None  # its workspace's new key limits
    assert keys.authenticate(other) is not None  # kept without being read again
    assert keys.authenticate(added) is None  # a new key is not held until it is used
    assert len(keys) == 2


async def test_a_revoked_key_is_refused_once_its_change_arrives_whether_held_or_not(counting: CountingKeys) -> None:
    counting.create_workspace("acme", "ACME")
    held, dropped, spare = (counting.create_api_key("acme") for _ in range(3))
    keys = trusted(counting, KeyCacheLimits(size=1))
    await known(keys, dropped)
    await known(keys, held)  # `dropped` is pushed out
    since = counting.generation()
    counting.revoke_api_key(held)
    counting.revoke_api_key(dropped)
    assert keys.update(counting.changes_since(since)) is True
    keys.confirmed()
    for key in (held, dropped):
        assert keys.authenticate(key) is None and await keys.confirm(key) is None
    assert await known(keys, spare) is not None


async def test_a_wrong_key_repeated_costs_one_lookup_until_a_change_names_it(counting: CountingKeys) -> None:
    counting.create_workspace("acme", "ACME")
    key = counting.create_api_key("acme")
    keys = trusted(counting)
    await known(keys, key)
    since = counting.generation()
    counting.revoke_api_key(key)
    keys.update(counting.changes_since(since))
    counting.lookups.clear()
    for _ in range(5):
        assert await known(keys, key) is None  # a client repeating its revoked key
        assert await known(keys, "crk_wrong") is None
    assert len(counting.lookups) == 2


async def test_past_its_share_one_address_is_refused_with_503_and_another_still_gets_its_lookups(
    counting: CountingKeys,
) -> None:
    counting.create_workspace("acme", "ACME")
    good = counting.create_api_key("acme")
    keys = trusted(counting, KeyCacheLimits(lookups_per_second=4))  # a quarter: one a second for one address
    assert await keys.confirm("crk_wrong-0", "198.51.100.7") is None
    with pytest.raises(DependencyUnavailableError) as refused:
        await keys.confirm("crk_wrong-1", "198.51.100.7")
    assert refused.value.retry_after == 1 and "many API keys" in refused.value.message
    assert len(counting.lookups) == 1  # the refused one cost no lookup
    found = await keys.confirm(good, "192.0.2.1")  # another address: its own share of what is left
    assert found is not None and len(counting.lookups) == 2


async def test_lookups_of_different_keys_run_side_by_side_and_requests_with_one_key_share_its_lookup(
    registry: Registry,
) -> None:
    registry.create_workspace("acme", "ACME")
    made = [registry.create_api_key("acme") for _ in range(6)]
    counting = CountingKeys(registry.engine)
    keys = trusted(counting)
    answers = await asyncio.gather(*(keys.confirm(key, f"192.0.2.{index}") for index, key in enumerate(made)),
                                   *(keys.confirm(made[0], "192.0.2.0") for _ in range(4)))  # fmt: skip
    assert all(answer is not None and answer.workspace == "acme" for answer in answers)
    assert sorted(counting.lookups) == sorted(set(counting.lookups)) and len(counting.lookups) == 6


async def test_a_new_key_looked_up_while_another_workspace_reloads_is_accepted_and_read_again(
    counting: CountingKeys,
) -> None:
    """A reload that overlaps a lookup (here another workspace's new key) may carry a revocation of the key looked
    up: the key is read again, and a good key is still accepted on its first request."""
    counting.create_workspace("acme", "ACME")
    counting.create_workspace("globex", "Globex")
    key = counting.create_api_key("acme")
    keys = trusted(counting)
    counting.hold = hold = threading.Event()
    lookup = asyncio.ensure_future(keys.confirm(key))
    assert await asyncio.to_thread(counting.held_read.wait, 30)
    since = counting.generation()
    counting.create_api_key("globex")  # a change elsewhere, and the reload that follows it
    await asyncio.to_thread(keys.update, counting.changes_since(since))
    hold.set()
    found = await lookup
    assert found is not None and found.workspace == "acme"
    assert len(counting.lookups) == 2 and keys.authenticate(key) is not None  # read again, then held
