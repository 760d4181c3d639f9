"""The state stores, in process and in a real Redis: atomic claim, single-use take, expiry."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from crank.exceptions import StateStoreFullError
from crank.state import Counter, MemoryStore, RedisStore, StateStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StateStore]:
    # A fresh prefix per test: nothing depends on what an earlier run left in Redis.
    if request.param == "memory":
        chosen: StateStore = MemoryStore()
    else:
        chosen = RedisStore(request.getfixturevalue("redis_url"), prefix=f"t-{uuid.uuid4().hex}:")
    yield chosen
    await chosen.aclose()


async def test_add_claims_a_key_once(store: StateStore) -> None:
    assert await store.add("k", {"n": 1}, ttl=5)
    assert not await store.add("k", {"n": 2}, ttl=5)
    assert await store.get("k") == {"n": 1}


async def test_take_gives_the_value_to_one_taker_only(store: StateStore) -> None:
    await store.put("token", {"for": "x"}, ttl=5)
    results = await asyncio.gather(*(store.take("token") for _ in range(5)))
    assert results.count({"for": "x"}) == 1 and results.count(None) == 4


async def test_values_expire(store: StateStore) -> None:
    await store.put("short", {"v": 1}, ttl=0.05)
    assert await store.add("claim", {"v": 1}, ttl=0.05)
    await asyncio.sleep(0.15)
    assert await store.get("short") is None and await store.take("short") is None
    assert await store.add("claim", {"v": 2}, ttl=5)  # an expired claim can be made again


async def test_replace_if_touches_only_its_own_claim(store: StateStore) -> None:
    await store.add("k", {"claim": "mine", "state": "running"}, ttl=5)
    assert not await store.replace_if("k", "theirs", None, ttl=5)
    assert await store.get("k") == {"claim": "mine", "state": "running"}
    assert await store.replace_if("k", "mine", {"claim": "mine", "state": "done"}, ttl=5)
    assert await store.get("k") == {"claim": "mine", "state": "done"}
    assert await store.replace_if("k", "mine", None, ttl=5)
    assert await store.get("k") is None and not await store.replace_if("k", "mine", None, ttl=5)


async def test_a_claims_lease_lapses_without_renewal_and_the_claim_stays(store: StateStore) -> None:
    assert await store.claim("k", {"claim": "mine", "state": "running"}, ttl=5, lease=0.1)
    assert await store.inspect("k") == ({"claim": "mine", "state": "running"}, True)
    assert not await store.claim("k", {"claim": "theirs"}, ttl=5, lease=5)
    assert await store.renew("k", "mine", lease=0.1) and not await store.renew("k", "theirs", lease=5)
    await asyncio.sleep(0.3)
    assert await store.inspect("k") == ({"claim": "mine", "state": "running"}, False)  # its owner is gone
    assert not await store.renew("k", "mine", lease=5)  # a lapsed lease stays lapsed
    assert not await store.add("k", {"claim": "theirs"}, ttl=5)  # and the key is not free
    assert await store.inspect("missing") == (None, False)


async def test_replace_if_ends_the_lease_and_writes_back_a_value_that_was_lost(store: StateStore) -> None:
    assert await store.claim("k", {"claim": "mine", "state": "running"}, ttl=5, lease=5)
    assert await store.replace_if("k", "mine", {"claim": "mine", "state": "done"}, ttl=5)
    assert await store.inspect("k") == ({"claim": "mine", "state": "done"}, False)
    assert await store.replace_if("k", "mine", None, ttl=5) and await store.inspect("k") == (None, False)
    # A record the store lost (evicted, a restart) is written back, unless someone claimed the key since.
    assert await store.replace_if("k", "mine", {"claim": "mine", "state": "done"}, ttl=5)
    assert await store.get("k") == {"claim": "mine", "state": "done"}
    assert await store.claim("other", {"claim": "theirs"}, ttl=5, lease=5)
    assert not await store.replace_if("other", "mine", {"claim": "mine"}, ttl=5)
    assert await store.inspect("other") == ({"claim": "theirs"}, True)


async def test_the_memory_store_has_nothing_to_warn_about() -> None:
    assert await MemoryStore().durability_warnings() == []


async def test_renewing_a_lease_keeps_the_claim_past_its_own_time_to_live(store: StateStore) -> None:
    assert await store.claim("k", {"claim": "mine", "state": "running"}, ttl=0.2, lease=0.2)
    for _ in range(4):  # the call outlives the claim's own time to live; its owner renews the lease
        await asyncio.sleep(0.1)
        assert await store.renew("k", "mine", lease=0.2)
    assert await store.inspect("k") == ({"claim": "mine", "state": "running"}, True)
    assert not await store.add("k", {"claim": "theirs"}, ttl=5)  # never free while its owner still works


async def test_a_full_memory_store_refuses_new_records_and_keeps_the_live_ones() -> None:
    store = MemoryStore(max_items=3)
    for name in ("a", "b"):
        assert await store.add(name, {"n": name}, ttl=60)
    await store.put("short", {"n": "short"}, ttl=0.05)
    with pytest.raises(StateStoreFullError) as refused:
        await store.add("c", {"n": "c"}, ttl=60)
    assert refused.value.error_code == "state_store_full" and not refused.value.may_have_taken_effect
    assert [await store.get(name) for name in ("a", "b")] == [{"n": "a"}, {"n": "b"}]  # none dropped
    await asyncio.sleep(0.1)
    assert await store.add("c", {"n": "c"}, ttl=60)  # the expired record made room
    with pytest.raises(StateStoreFullError):
        await store.put("d", {"n": "d"}, ttl=60)


# -- hit: the gateway's rate limits and quotas ---------------------------------------------------------


async def test_hit_lets_exactly_the_limit_through_in_a_window(store: StateStore) -> None:
    counter = Counter("calls", limit=5, window=30)
    answers = await asyncio.gather(*(store.hit([counter]) for _ in range(20)))
    assert answers.count(None) == 5
    refused = [answer for answer in answers if answer is not None]
    assert len(refused) == 15 and all(full.counter == 0 and 0 < full.retry_after <= 30 for full in refused)


async def test_a_hit_refused_by_one_counter_adds_to_none(store: StateStore) -> None:
    roomy, tight = Counter("roomy", limit=3, window=30), Counter("tight", limit=1, window=30)
    assert await store.hit([roomy, tight]) is None
    full = await store.hit([roomy, tight])
    assert full is not None and full.counter == 1  # the second counter refused
    # roomy counted the first hit only: two more fit, the next does not.
    assert await store.hit([roomy]) is None and await store.hit([roomy]) is None
    assert await store.hit([roomy]) is not None


async def test_a_count_starts_again_when_its_window_ends(store: StateStore) -> None:
    counter = Counter("short", limit=1, window=0.1)
    assert await store.hit([counter]) is None
    full = await store.hit([counter])
    assert full is not None and full.retry_after <= 0.1
    await asyncio.sleep(0.25)
    assert await store.hit([counter]) is None


async def test_the_memory_store_counts_within_its_bound() -> None:
    store = MemoryStore(max_items=2)
    assert await store.hit([Counter("a", 5, 30), Counter("b", 5, 30)]) is None
    assert await store.hit([Counter("a", 5, 30)]) is None  # an existing count takes no new room
    with pytest.raises(StateStoreFullError):
        await store.hit([Counter("c", 5, 30)])


async def test_a_refused_hit_names_the_full_counter_that_resets_last(store: StateStore) -> None:
    # Retrying when the sooner one resets would be refused again by the later one.
    soon, late = Counter("soon", limit=1, window=5), Counter("late", limit=1, window=300)
    assert await store.hit([soon, late]) is None
    full = await store.hit([soon, late])
    assert full is not None and full.counter == 1 and 5 < full.retry_after <= 300


async def test_hits_of_one_turn_of_the_loop_are_each_answered_as_alone(store: StateStore) -> None:
    # Many callers at once (one script call in Redis): each hit stays atomic and the counts exact.
    pairs = [[Counter("shared", 10, 30), Counter(f"own-{n % 4}", 3, 30)] for n in range(40)]
    answers = await asyncio.gather(*(store.hit(counters) for counters in pairs))
    assert answers.count(None) == 10  # three per own counter (12) but ten for the shared one
    assert all(full.counter in (0, 1) for full in answers if full is not None)


async def test_a_hit_the_memory_store_has_no_room_for_counts_nothing() -> None:
    store = MemoryStore(max_items=2)
    assert await store.hit([Counter("a", 5, 30)]) is None
    with pytest.raises(StateStoreFullError):  # two new counts, room for one
        await store.hit([Counter("a", 5, 30), Counter("b", 5, 30), Counter("c", 5, 30)])
    for _ in range(4):  # "a" still at 1: four more fit
        assert await store.hit([Counter("a", 5, 30)]) is None
    assert await store.hit([Counter("a", 5, 30)]) is not None
