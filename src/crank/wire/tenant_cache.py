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

    def get(self, tenant: Hashable, key: Hashable) -> V | None:
        cache = self._caches.get(tenant)
        if cache is None:
            return None
        entry = cache.get(key)
        return None if entry is None else entry[0]

    def put(self, tenant: Hashable, key: Hashable, value: V) -> None:
        """Keep `value`; an entry larger than a tenant's share is not kept."""
        size = self._size(key, value)
        if size > self.per_tenant:
            return
        cache = self._caches.get(tenant)
        if cache is None:
            cache = self._caches[tenant] = LRUCache(maxsize=self.per_tenant, getsizeof=_entry_size)
        cache[key] = (value, size)
        while self.bytes() > self.total:
            largest = max(self._caches, key=lambda name: self._caches[name].currsize)
            self._caches[largest].popitem()
            if not self._caches[largest]:
                del self._caches[largest]

    def pop(self, tenant: Hashable, key: Hashable) -> None:
        cache = self._caches.get(tenant)
        if cache is not None:
            cache.pop(key, None)

    def bytes(self, tenant: Hashable | None = None) -> int:
        """What one tenant's entries cost, or (None) every tenant's."""
        if tenant is not None:
            cache = self._caches.get(tenant)
            return 0 if cache is None else int(cache.currsize)
        return sum(int(cache.currsize) for cache in self._caches.values())

    def __len__(self) -> int:
        return sum(len(cache) for cache in self._caches.values())


def _entry_size(entry: tuple[object, int]) -> int:
    return entry[1]
