"""`WorkspaceAdmission`: requests counted against their workspace's limits before their bodies are read."""

from __future__ import annotations

import pytest

from crank.exceptions import RateLimitedError
from crank.gateway.limits import Limiter
from crank.registry import KeyScope
from crank.registry.runtime import Limits, RateLimit
from crank.sources.admission import WorkspaceAdmission
from crank.state import MemoryStore
from crank.wire.auth import Principal

pytestmark = pytest.mark.anyio

ONE_A_MINUTE = Limits(rate=RateLimit(calls=1, window=60))


def scope(agent: str) -> dict[str, object]:
    return {"type": "http", "path_params": {"workspace": "acme", "agent": agent}}


async def test_a_workspace_limit_admits_then_refuses_and_then_knows_it_at_once() -> None:
    admission = WorkspaceAdmission(Limiter(MemoryStore()), lambda workspace, agent: agent == "support")
    caller = KeyScope("acme", id="k1", workspace_limits=ONE_A_MINUTE)
    pending = admission.admit(scope("support"), caller)
    if pending is not None:
        await pending
    refused = admission.admit(scope("support"), caller)
    assert refused is not None
    with pytest.raises(RateLimitedError) as limited:
        await refused
    assert limited.value.retry_after > 0
    known = admission.refused_now(scope("nope"), caller)  # known full: no count, no wait
    assert known is not None and known.data["error_code"] == "rate_limited"
    assert known.data["details"] == {"limit": "workspace_rate", "retry_after": known.retry_after}


def test_a_caller_without_workspace_limits_or_not_a_gateway_principal_is_admitted_at_once() -> None:
    admission = WorkspaceAdmission(Limiter(MemoryStore()), lambda workspace, agent: True)
    for caller in (KeyScope("acme", id="k2"), Principal("acme", id="token-subject", method="jwt")):
        assert admission.admit(scope("support"), caller) is None
        assert admission.refused_now(scope("support"), caller) is None
