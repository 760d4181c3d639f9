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
    for n in range(10):
        caches.put("mallory", n, "m" * 25)
    assert caches.bytes() <= 150
    assert caches.get("victim", "a") is not None and caches.get("beta", "b") is not None  # within their shares
    assert caches.bytes("mallory") <= 100


def test_an_entry_larger_than_a_share_is_not_kept_and_entries_can_be_dropped() -> None:
    caches: TenantCaches[str] = TenantCaches(per_tenant=10, total=100, size=_size)
    caches.put("t", "big", "x" * 11)
    assert caches.get("t", "big") is None and len(caches) == 0
    caches.put("t", "small", "x")
    caches.pop("t", "small")
    assert caches.get("t", "small") is None and caches.bytes() == 0
