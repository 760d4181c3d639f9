"""`TenantCaches`: a cache that one tenant cannot fill for the others, nor make them lose.

A process that serves many workspaces keeps things per token (validated claims, principals). One shared cache
bounded by a count is a cache any tenant can empty: enough of its own entries and every other tenant's are gone.
Here each tenant has a least-recently-used cache of its own, bounded in bytes, and the caches together are bounded
too: past that total, the largest tenant's oldest entries go first, so a tenant within its share never loses one
to another's flood.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

__all__ = ["TenantCaches"]

V = TypeVar("V")


class TenantCaches(Generic[V]):
    """Values by tenant and key; `size(key, value)` is what an entry costs in bytes (roughly)."""

    def __init__(self, per_tenant: int, total: int, size: Callable[[Hashable, V], int]) -> None:
        self.per_tenant = per_tenant
        self.total = total
        self._size = size
        self._caches: dict[Hashable, LRUCache[Hashable, tuple[V, int]]] = {}
        self._bytes = 0.0  # every tenant's together, kept as entries come and go (cachetools counts in floats)

    def get(self, tenant: Hashable, key: Hashable) -> V | None:
        cache = self._caches.get(tenant)
        if cache is None:
            return None
        try:  # a hit costs two of cachetools' frames, not the four of `cache.get` (which asks `in` first)
            return cache[key][0]
        except KeyError:
            return None

    def put(self, tenant: Hashable, key: Hashable, value: V) -> None:
        """Keep `value`; an entry larger than a tenant's share is not kept."""
        size = self._size(key, value)
        if size > self.per_tenant:
            return
        cache = self._caches.get(tenant)
        if cache is None:
            cache = self._caches[tenant] = LRUCache(maxsize=self.per_tenant, getsizeof=_entry_size)
        before = cache.currsize
        cache[key] = (value, size)  # past the tenant's share, its own least recently used go
        self._bytes += cache.currsize - before
        while self._bytes > self.total:
            self._evict_from(self._largest(tenant))

    def _largest(self, inserting: Hashable) -> Hashable:
        """The tenant holding the most, the one inserting when it is among them (a tie never costs another)."""
        most = max(cache.currsize for cache in self._caches.values())
        if self._caches[inserting].currsize >= most:
            return inserting
        return next(name for name, cache in self._caches.items() if cache.currsize >= most)

    def _evict_from(self, tenant: Hashable) -> None:
        cache = self._caches[tenant]
        before = cache.currsize
        cache.popitem()
        self._bytes -= before - cache.currsize
        if not cache:
            del self._caches[tenant]

    def pop(self, tenant: Hashable, key: Hashable) -> None:
        cache = self._caches.get(tenant)
        if cache is not None and key in cache:
            before = cache.currsize
            del cache[key]
            self._bytes -= before - cache.currsize

    def clear(self, tenant: Hashable) -> None:
        """Forget every entry of `tenant`."""
        cache = self._caches.pop(tenant, None)
        if cache is not None:
            self._bytes -= cache.currsize

    def bytes(self, tenant: Hashable | None = None) -> int:
        """What one tenant's entries cost, or (None) every tenant's."""
        if tenant is None:
            return int(self._bytes)
        cache = self._caches.get(tenant)
        return 0 if cache is None else int(cache.currsize)

    def __len__(self) -> int:
        return sum(len(cache) for cache in self._caches.values())


def _entry_size(entry: tuple[object, int]) -> int:
    return entry[1]
