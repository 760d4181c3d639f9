"""What every adapter does: send a mapped request, return the upstream's decoded answer or raise a
structured error (`crank.exceptions.ExternalServiceError` and friends)."""

from __future__ import annotations

from typing import Any

from crank.gateway.mapping import RequestParts
from crank.registry.runtime import DEFAULT_RETRIES, DEFAULT_TIMEOUT
from crank.wire.auth import Principal

__all__ = ["Adapter"]


class Adapter:
    timeout: float = DEFAULT_TIMEOUT
    """Seconds one attempt may take."""
    retries: int = DEFAULT_RETRIES
    """Attempts after the first (idempotent operations only)."""

    def prepared(self, caller: Principal | None = None) -> bool:
        """Whether `caller`'s credentials are at hand now (no wait): `prepare` has nothing to do."""
        return True

    async def prepare(self, caller: Principal | None = None) -> None:
        """Obtain `caller`'s credentials before anything else is spent on the call (a user who must connect their
        account first is asked before a confirmation token is used up): raises what obtaining them raises."""

    def check(self, parts: RequestParts) -> None:
        """Raise what writing the request would raise (a body that cannot be written), before anything is spent on
        the call; nothing by default."""

    async def call(self, parts: RequestParts, caller: Principal | None = None) -> Any:
        """Send the request for `caller`, who made the call (the credentials of a tool acting as the user are
        theirs); the upstream's decoded answer."""
        raise NotImplementedError
