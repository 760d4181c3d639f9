"""Budgets of work that anyone may ask for: who asks (`client_address`) and how much a second (`Budget`,
`KeyedBudgets`, `SharedBudget`).

Some work is done before anyone is known (a new token's signature check, an introspection call, a guess at the
admin token). Its budget must not be one per process, or a flood from one address spends it for everybody:
each address gets a budget of its own, and the flood costs the others nothing. An address is a client's IPv4
address, or its IPv6 /64: the smallest network a provider hands one subscriber, so that the 2^64 addresses of
one network count as one.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Final

from crank.types import Scope

__all__ = ["CLIENT_SHARE", "DEFAULT_MAX_KEYS", "NO_ADDRESS", "Budget", "KeyedBudgets", "SharedBudget", "client_address"]

NO_ADDRESS: Final = "-"
"""The address of a request whose server does not say where it came from (a Unix socket, a test client)."""
DEFAULT_MAX_KEYS: Final = 10_000
"""Budgets `KeyedBudgets` keeps (the least recently used goes first, once whole again)."""
_IPV6_NETWORK = 64


def client_address(scope: Scope) -> str:
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

    def take(self, reserve: float = 0.0) -> bool:
        """One from the budget; False when fewer than one are left above `reserve` (what this take may not use)."""
        if not self.available(reserve):
            return False
        self.left -= 1
        return True

    def available(self, reserve: float = 0.0) -> bool:
        """Whether one take would succeed now, leaving `reserve` (nothing is taken)."""
        now = time.monotonic()
        self.left = min(self.burst, self.left + (now - self.refilled) * self.rate)
        self.refilled = now
        return self.left >= 1 + reserve

    def spend(self, amount: float) -> None:
        """Take `amount` after the fact (work measured once done): the budget may go below zero, and is not
        `available` again until it has refilled past one."""
        self.available()
        self.left -= amount

    def whole(self) -> bool:
        """Whether the budget has refilled to its burst (forgetting it gives nothing away)."""
        self.available()
        return self.left >= self.burst


class KeyedBudgets:
    """One `Budget` per key (an address, a workspace), at most `max_keys` kept. A key is forgotten only once its
    budget is whole again; while the least recently used one is not, new keys share one more budget of the same
    size, so that a flood of new keys (addresses) gets no fresh budget each."""

    def __init__(self, rate: float, burst: float | None = None, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._budgets: OrderedDict[Hashable, Budget] = OrderedDict()
        self._overflow = Budget(rate, burst)

    def take(self, key: Hashable, reserve: float = 0.0) -> bool:
        """One from `key`'s budget, leaving `reserve` in it: False when it is spent."""
        return self._budget(key).take(reserve)

    def left(self, key: Hashable) -> bool:
        """Whether `key`'s budget has one left (nothing is taken)."""
        return self._budget(key).available()

    def spend(self, key: Hashable, amount: float) -> None:
        """Take `amount` from `key`'s budget after the fact (`Budget.spend`)."""
        self._budget(key).spend(amount)

    def _budget(self, key: Hashable) -> Budget:
        budget = self._budgets.get(key)
        if budget is not None:
            self._budgets.move_to_end(key)
            return budget
        if len(self._budgets) >= self.max_keys:
            oldest = next(iter(self._budgets))
            if not self._budgets[oldest].whole():
                return self._overflow  # every kept key is still spending: the newcomers share one budget
            del self._budgets[oldest]
        budget = self._budgets[key] = Budget(self.rate, self.burst)
        return budget


CLIENT_SHARE: Final = 0.25
"""The share of a `SharedBudget` one client may take."""


class SharedBudget:
    """A process's budget of some work a second (a token bucket, bursts of as many), of which one client (an
    address) may take `share`: a flood from one client spends its share, never the whole."""

    __slots__ = ("_clients", "_whole")

    def __init__(self, rate: float, share: float = CLIENT_SHARE) -> None:
        self._whole = Budget(rate)
        self._clients = KeyedBudgets(max(rate * share, 1.0))

    def take(self, client: Hashable) -> bool:
        """One from the client's share and the whole; False, taking nothing, when either is spent."""
        if not (self._clients.left(client) and self._whole.take()):
            return False
        self._clients.take(client)
        return True

    def spend(self, client: Hashable, amount: float) -> None:
        """Take `amount` after the fact (work measured once done) from the client's share and the whole."""
        self._whole.spend(amount)
        self._clients.spend(client, amount)
