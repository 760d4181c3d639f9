"""Budgets of work that anyone may ask for: who asks (`client_address`) and how much a second (`Budget`,
`KeyedBudgets`).

Some work is done before anyone is known (a new token's signature check, an introspection call, a guess at the
admin token). Its budget must not be one per process, or a flood from one address spends it for everybody:
each address gets a budget of its own, and the flood costs the others nothing. An address is a client's IPv4
address, or its IPv6 /64: the smallest network a provider hands one subscriber, so that the 2^64 addresses of
one network count as one.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Hashable
from typing import Any, Final

from cachetools import LRUCache

__all__ = ["DEFAULT_MAX_KEYS", "NO_ADDRESS", "Budget", "KeyedBudgets", "client_address"]

NO_ADDRESS: Final = "-"
"""The address of a request whose server does not say where it came from (a Unix socket, a test client)."""
DEFAULT_MAX_KEYS: Final = 10_000
"""Budgets `KeyedBudgets` keeps (the least recently used goes first: it is refilled or nearly so)."""
_IPV6_NETWORK = 64


def client_address(scope: Any) -> str:
    """Whose request it is, for per-address budgets and limits: the peer's IPv4 address, or its IPv6 /64 (an
    IPv4-mapped IPv6 address is the IPv4 one). Behind a reverse proxy this is the proxy's: docs/security.md."""
    client = scope.get("client") if isinstance(scope, dict) else None
    host = client[0] if isinstance(client, tuple | list) and client else None
    if not isinstance(host, str) or not host:
        return NO_ADDRESS
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return host[:64]
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, _IPV6_NETWORK), strict=False))


class Budget:
    """At most `rate` takes a second, `burst` at once (default: `rate`), refilled continuously (a token bucket)."""

    __slots__ = ("burst", "left", "rate", "refilled")

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = max(burst if burst is not None else rate, 1.0)
        self.left = self.burst
        self.refilled = time.monotonic()

    def take(self) -> bool:
        if not self.available():
            return False
        self.left -= 1
        return True

    def available(self) -> bool:
        """Whether one take would succeed now (nothing is taken)."""
        now = time.monotonic()
        self.left = min(self.burst, self.left + (now - self.refilled) * self.rate)
        self.refilled = now
        return self.left >= 1

    def spend(self, amount: float) -> None:
        """Take `amount` after the fact (work measured once done): the budget may go below zero, and is not
        `available` again until it has refilled past one."""
        self.available()
        self.left -= amount


class KeyedBudgets:
    """One `Budget` per key (an address, a workspace), at most `max_keys` kept: a key forgotten is refilled."""

    def __init__(self, rate: float, burst: float | None = None, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.rate = rate
        self.burst = burst
        self._budgets: LRUCache[Hashable, Budget] = LRUCache(maxsize=max_keys)

    def take(self, key: Hashable) -> bool:
        """One from `key`'s budget: False when it is spent."""
        budget = self._budgets.get(key)
        if budget is None:
            budget = self._budgets[key] = Budget(self.rate, self.burst)
        return budget.take()

    def left(self, key: Hashable) -> bool:
        """Whether `key`'s budget has one left (nothing is taken)."""
        budget = self._budgets.get(key)
        return budget is None or budget.available()
