"""`SignInGuard`: guesses at the admin token, slowed and written down.

A generated admin token is out of any guesser's reach; one an operator chose may not be. Every wrong token sent to
the admin API or the console's sign-in form spends one of its client address's `FAILED_SIGN_INS_PER_SECOND`
(`crank.wire.budgets`: an IPv4 address, or an IPv6 /64); once they are spent, that address is answered 429 with
`Retry-After` before its token is even compared, until the budget refills. Each failure is logged, throttled
(`ThrottledLog`: the first at once, then one line per 10 s per address with the count), never with the token.
The admin API and the console share one guard, so the bound holds for both together.
"""

from __future__ import annotations

import logging
from typing import Final

from crank.types import Scope
from crank.wire.budgets import KeyedBudgets, client_address
from crank.wire.notices import ThrottledLog

__all__ = ["FAILED_SIGN_INS_PER_SECOND", "SIGN_IN_RETRY_AFTER", "TOO_MANY_ATTEMPTS", "SignInGuard"]

logger = logging.getLogger("crank.admin")

FAILED_SIGN_INS_PER_SECOND: Final = 10.0
"""Wrong admin tokens one client address may send a second (bursts of as many)."""
SIGN_IN_RETRY_AFTER: Final = 1
"""Seconds a refused address is told to wait (`Retry-After`)."""
TOO_MANY_ATTEMPTS: Final = "Too many wrong admin tokens from this address; wait a second before the next attempt"


class SignInGuard:
    """Failed sign-ins with the admin token, per client address: counted, bounded and logged."""

    def __init__(self, per_second: float = FAILED_SIGN_INS_PER_SECOND) -> None:
        self._failures = KeyedBudgets(per_second)
        self._notices = ThrottledLog(logger)

    def refused(self, scope: Scope) -> bool:
        """Whether the request's address has spent its failures: answer it 429 without looking at its token."""
        return not self._failures.left(client_address(scope))

    def failed(self, scope: Scope, where: str) -> None:
        """A wrong admin token from this request's address, through `where` (the admin API, the console)."""
        address = client_address(scope)
        self._failures.take(address)
        self._notices.warning(f"admin-sign-in:{address}", "a wrong admin token from %s through %s", address, where,
                              address=address)  # fmt: skip
