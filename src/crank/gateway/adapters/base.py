"""What every adapter does: send a mapped request, return the upstream's decoded answer or raise a
structured error (`crank.exceptions.ExternalServiceError` and friends)."""

from __future__ import annotations

from typing import Any

from crank.gateway.mapping import RequestParts

__all__ = ["Adapter"]


class Adapter:
    timeout: float = 10.0
    """Seconds one attempt may take."""
    retries: int = 0
    """Attempts after the first (idempotent operations only)."""

    async def call(self, parts: RequestParts) -> Any:
        raise NotImplementedError
