"""`crank.wire.tenant_cache.TenantCaches`: no tenant fills the cache for another, nor makes another lose entries."""

from __future__ import annotations

from collections.abc import Hashable

from crank.wire.tenant_cache import TenantCaches


def _size(key: Hashable, value: str) -> int:
    return len(value)


def test_a_tenant_past_its_share_loses_its_own_least_recently_used_entries_only() -> None:
    caches: TenantCaches[str] = TenantCaches(per_tenant=100, total=1000, size=_size)
    caches.put("victim", "session", "v" * 40)
    for n in range(50):  # a flood of the hostile tenant's own entries
        caches.put("mallory", n, "m" * 30)
    assert caches.get("victim", "session") == "v" * 40
    assert caches.bytes("mallory") <= 100 and caches.get("mallory", 49) is not None and caches.get("mallory", 0) is None


def test_past_the_total_the_largest_tenant_gives_way_first() -> None:
    caches: TenantCaches[str] = TenantCaches(per_tenant=100, total=150, size=_size)
    caches.put("victim", "a", "v" * 30)
    caches.put("beta", "b", "b" * 20)
    for n in range(10):  # 250 bytes offered: within its own share, past the total by far
        caches.put("mallory", n, "m" * 25)
    assert caches.bytes() <= 150 and caches.bytes("mallory") == 100  # the total held: mallory gave way
    assert caches.get("victim", "a") is not None and caches.get("beta", "b") is not None
    caches.put("beta", "c", "b" * 20)  # past the total again: the largest (mallory) gives way, not beta
    assert caches.bytes("beta") == 40 and caches.bytes("mallory") == 75 and caches.bytes() == 145


def test_a_tie_costs_the_tenant_that_inserts() -> None:
    caches: TenantCaches[str] = TenantCaches(per_tenant=100, total=100, size=_size)
    caches.put("victim", "a", "v" * 50)
    caches.put("mallory", "b", "m" * 50)
    caches.put("mallory", "c", "m" * 10)  # mallory 60 > victim 50: mallory's oldest goes
    assert caches.get("victim", "a") is not None and caches.get("mallory", "b") is None
    caches.put("mallory", "d", "m" * 40)  # now 50 and 50: the tie is mallory's to pay
    assert caches.get("victim", "a") is not None and caches.bytes() <= 100


def test_an_entry_larger_than_a_share_is_not_kept_and_entries_can_be_dropped() -> None:
    caches: TenantCaches[str] = TenantCaches(per_tenant=10, total=100, size=_size)
    caches.put("t", "big", "x" * 11)
    assert caches.get("t", "big") is None and len(caches) == 0
    caches.put("t", "small", "x")
    caches.pop("t", "small")
    assert caches.get("t", "small") is None and caches.bytes() == 0
