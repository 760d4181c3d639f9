"""The gateway's rate limits and quotas, per workspace, agent and API key (docs/gateway.md, Rate limits and
quotas), counted in the state store: in process, or in Redis where every replica counts in the same place.

- A workspace's limits count every request its keys send to any of its agents (the MCP endpoint and the
  plain pair, `tools/list` included), when the key is known and before the body is read: `admit_request`.
- An agent's limits count the calls of its operations (`tools/call`, or discovery's `call_operation`), all
  keys together; an API key's, the calls made with that key, to any agent: `admit_call`.

A rate limit is a fixed window that starts with its first call; a quota, a calendar period in UTC. The
limits of one check (the workspace's; or the agent's with the key's) are counted in one atomic step: a call
one of them refuses adds to none of them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final

from crank.exceptions import LimitReachedError
from crank.registry import KeyScope
from crank.registry.runtime import Limits, QuotaPeriod
from crank.state import Counter, StateStore
from crank.telemetry import Metrics
from crank.wire.http import retry_after_seconds

__all__ = ["KEY_PREFIX", "CallLimits", "Limiter"]

KEY_PREFIX: Final = "limit:"
"""The state store's keys of the counts, below the store's own prefix."""
_WHOSE = {"workspace": "this workspace's", "agent": "this agent's", "key": "this API key's"}


@dataclass(frozen=True, slots=True)
class _Check:
    name: str
    """The limit's name in errors and metrics: `{workspace|agent|key}_{rate|quota}`."""
    counter: Counter
    text: str
    """What the limit is, for the message: `this agent's rate limit (100 calls per 60 s)`."""


def _checks(owner: str, key: str, limits: Limits, now: datetime.datetime) -> list[_Check]:
    checks = []
    whose = _WHOSE[owner]
    if limits.rate is not None:
        rate = limits.rate
        # The window is part of the key: a limit changed from a day to a second never waits out the old count.
        counter = Counter(f"{KEY_PREFIX}{key}:rate:{round(rate.window * 1000)}", rate.calls, rate.window)
        checks.append(
            _Check(f"{owner}_rate", counter, f"{whose} rate limit ({rate.calls} calls per {rate.window:g} s)")
        )
    if limits.quota is not None:
        quota = limits.quota
        label, seconds_left = _period(quota.period, now)
        counter = Counter(f"{KEY_PREFIX}{key}:quota:{label}", quota.calls, seconds_left)
        text = f"{whose} quota ({quota.calls} calls per {quota.period}, UTC)"
        checks.append(_Check(f"{owner}_quota", counter, text))
    return checks


def _period(period: QuotaPeriod, now: datetime.datetime) -> tuple[str, float]:
    """The calendar period `now` falls in (its label, part of the count's key) and the seconds left in it (the
    count's lifetime: it is gone when the period ends)."""
    if period == "hour":
        start = now.replace(minute=0, second=0, microsecond=0)
        end, label = start + datetime.timedelta(hours=1), start.strftime("%Y-%m-%dT%H")
    elif period == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        end, label = start + datetime.timedelta(days=1), start.strftime("%Y-%m-%d")
    else:
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end, label = (start + datetime.timedelta(days=32)).replace(day=1), start.strftime("%Y-%m")
    return label, max((end - now).total_seconds(), 0.001)


class Limiter:
    """Counts requests and calls against their limits in `state`; a refusal is a `LimitReachedError` and one
    `crank_rate_limited_total` in `metrics`."""

    def __init__(self, state: StateStore, metrics: Metrics | None = None) -> None:
        self.state = state
        self.metrics = metrics

    async def admit_request(self, key: KeyScope, workspace_limits: Limits, agent: str) -> None:
        """One request with `key` to `agent`, against its workspace's limits."""
        now = datetime.datetime.now(datetime.UTC)
        await self._hit(_checks("workspace", f"ws:{key.workspace}", workspace_limits, now), key.workspace, agent)

    async def admit_call(self, workspace: str, agent: str, agent_limits: Limits | None, key: KeyScope | None) -> None:
        """One call of an operation of `agent`, against the agent's limits and those of the key (if any)."""
        now = datetime.datetime.now(datetime.UTC)
        checks = []
        if agent_limits is not None:
            checks += _checks("agent", f"agent:{workspace}/{agent}", agent_limits, now)
        if key is not None and key.limits is not None:
            checks += _checks("key", f"key:{key.id}", key.limits, now)
        if checks:
            await self._hit(checks, workspace, agent)

    async def _hit(self, checks: list[_Check], workspace: str, agent: str) -> None:
        full = await self.state.hit([check.counter for check in checks])
        if full is None:
            return
        check = checks[full.counter]
        if self.metrics is not None:
            self.metrics.rate_limited.labels(workspace, agent, check.name).inc()
        retry_after = retry_after_seconds(full.retry_after)
        raise LimitReachedError(check.name, retry_after, f"The call was refused: {check.text} is used up.")


@dataclass(frozen=True, slots=True)
class CallLimits:
    """What one agent version's tools check before each call: its own limits (from its runtime view) and the
    calling key's. `applies` is the hot path's one test: no limit configured costs an attribute check."""

    limiter: Limiter
    workspace: str
    agent: str
    limits: Limits | None

    def applies(self, key: KeyScope | None) -> bool:
        return self.limits is not None or (key is not None and key.limits is not None)

    async def admit(self, key: KeyScope | None) -> None:
        await self.limiter.admit_call(self.workspace, self.agent, self.limits, key)
