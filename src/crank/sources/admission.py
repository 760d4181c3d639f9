"""`WorkspaceAdmission`: every gateway request with credentials, counted against its workspace's limits before its
body is read (`crank.gateway.limits`), as the MCP endpoint's `EndpointAccess.admit` and `refused_now`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from crank.exceptions import (
    DependencyUnavailableError,
    LimitReachedError,
    RateLimitedError,
    StateStoreFullError,
    StateStoreUnavailableError,
)
from crank.gateway.limits import Limiter
from crank.ids import new_request_id
from crank.registry import KeyScope
from crank.registry.runtime import Limits
from crank.types import Scope
from crank.wire.auth import Principal

__all__ = ["UNKNOWN_AGENT_LABEL", "WorkspaceAdmission", "rate_limited"]

logger = logging.getLogger("crank.gateway")

UNKNOWN_AGENT_LABEL: Final = "-"
"""The `agent` label of a workspace limit's refusal for a path that names no published agent."""


def rate_limited(limited: LimitReachedError) -> RateLimitedError:
    """A workspace's refused request: 429 carrying the structured `rate_limited` error as its data."""
    payload = limited.to_payload(new_request_id())
    return RateLimitedError(limited.message, retry_after=limited.retry_after, data=payload)


class WorkspaceAdmission:
    """The workspace limits of requests, counted by `limiter` (a gateway principal's, `KeyScope`: another principal
    has none). `serves(workspace, agent)` says whether a path names
    a published agent: only such a name becomes a metrics label, never whatever a client puts in the path."""

    def __init__(self, limiter: Limiter, serves: Callable[[str, str], bool]) -> None:
        self.limiter = limiter
        self.serves = serves

    def admit(self, scope: Scope, caller: Principal) -> Awaitable[None] | None:
        """Every request with credentials, before its body is read: its workspace's limits. None when the
        workspace has none or the count is taken at once (the hot path: no coroutine made); else the check, which
        raises `RateLimitedError` (429) carrying the structured `rate_limited` error as its data."""
        if not isinstance(caller, KeyScope) or caller.workspace_limits is None:
            return None
        limits = caller.workspace_limits
        if self.limiter.admit_request_now(caller, limits):
            return None
        return self._admit(caller, limits, self._agent_label(scope, caller))

    def refused_now(self, scope: Scope, caller: Principal) -> RateLimitedError | None:
        """What `admit` would refuse the request with, when that is known without the state store or counting: its
        workspace's count is known to be full (`Limiter.refused_now`). None otherwise, and then `admit` decides.
        The answer the HTTP protocol gives from a request's head (`GatewayService.answer_early`)."""
        if not isinstance(caller, KeyScope) or caller.workspace_limits is None:
            return None
        limited = self.limiter.refused_now(caller, caller.workspace_limits, self._agent_label(scope, caller))
        return None if limited is None else rate_limited(limited)

    def _agent_label(self, scope: Scope, caller: KeyScope) -> str:
        agent: str = scope.get("path_params", {}).get("agent", "")
        return agent if self.serves(caller.workspace or "", agent) else UNKNOWN_AGENT_LABEL

    async def _admit(self, caller: KeyScope, limits: Limits, agent: str) -> None:
        try:
            await self.limiter.admit_request(caller, limits, agent)
        except LimitReachedError as limited:
            raise rate_limited(limited) from None
        except (StateStoreUnavailableError, StateStoreFullError) as unavailable:  # uncounted is not admitted: 503
            retry_after = StateStoreUnavailableError.RETRY_AFTER
            raise DependencyUnavailableError("state", unavailable.message, retry_after=retry_after) from None
        except Exception:  # anything else: still a 503 the client can read, and the cause in the log
            logger.exception("counting a request against its workspace's limits failed")
            message = "This server cannot count requests against the workspace's limits right now; retry later."
            retry_after = StateStoreUnavailableError.RETRY_AFTER
            raise DependencyUnavailableError("state", message, retry_after=retry_after) from None
