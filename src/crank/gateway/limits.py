"""The gateway's rate limits and quotas, per workspace, agent and API key (docs/gateway.md, Rate limits and
quotas), counted in the state store: in process, or in Redis where every replica counts in the same place.

- A workspace's limits count every request its keys send to any of its agents (the MCP endpoint and the
  plain pair, `tools/list` included), when the key is known and before the body is read: `admit_request`.
  Requests without credentials (lazy sign-in) count against the workspace's `OAuthPolicy.anonymous` limits
  instead, per workspace and per client address: never against the limits its users and keys share.
- An agent's limits count the calls of its operations (`tools/call`, or discovery's `call_operation`), all
  keys together; an API key's, the calls made with that key, to any agent: `admit_call`.

A rate limit is a fixed window that starts with its first call; a quota, a calendar period in UTC. The
limits of one check (the workspace's; or the agent's with the key's) are counted in one atomic step: a call
one of them refuses adds to none of them.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any, Final

from crank.exceptions import LimitReachedError
from crank.registry import KeyScope
from crank.registry.runtime import Limits, QuotaPeriod
from crank.state import Counter, Full, StateStore
from crank.telemetry import Metrics
from crank.wire.http import retry_after_seconds

__all__ = ["KEY_PREFIX", "CallLimits", "Limiter"]

KEY_PREFIX: Final = "limit:"
"""The state store's keys of the counts, below the store's own prefix."""
_WHOSE = {
    "workspace": "this workspace's",
    "agent": "this agent's",
    "key": "this API key's",
    "anonymous": "without credentials, this workspace's",
    "anonymous_address": "without credentials, your address's",
}
_PLANS_KEPT = 4096  # owners' plans kept (`Limiter._plan`): bounded, like every cache fed by the registry
_FULL_KEPT = 4096  # counts known to be full (`Limiter._full_until`): cleared when there are more


@dataclass(frozen=True, slots=True)
class _Check:
    name: str
    """The limit's name in errors and metrics: `{workspace|agent|key}_{rate|quota}`."""
    counter: Counter
    text: str
    """What the limit is, for the message: `this agent's rate limit (100 calls per 60 s)`."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """One owner's limits as every call checks them, made once (`Limiter._plan`): the rate's check as it is;
    the quota's with its counter's key up to the period's label, which changes with the period (`checks`)."""

    rate: _Check | None
    quota: _Check | None
    quota_period: QuotaPeriod | None

    def checks(self, now: float, whose: str = "") -> list[_Check]:
        """The checks at `now` (seconds since the epoch), of the counts of `whose` when the plan is shared by many
        owners counted apart (the addresses of a workspace's callers without credentials)."""
        rate = self.rate
        if rate is not None and whose:
            rate = _Check(rate.name, Counter(f"{rate.counter.key}:{whose}", rate.counter.limit, rate.counter.window),
                          rate.text)  # fmt: skip
        checks = [rate] if rate is not None else []
        if self.quota is not None and self.quota_period is not None:
            label, seconds_left = _period(self.quota_period, now)
            key = self.quota.counter.key + label + (f":{whose}" if whose else "")
            checks.append(
                _Check(self.quota.name, Counter(key, self.quota.counter.limit, seconds_left), self.quota.text)
            )
        return checks


def _make_plan(owner: str, key: str, limits: Limits) -> _Plan:
    whose = _WHOSE[owner]
    rate = quota = None
    if limits.rate is not None:
        calls, window = limits.rate.calls, limits.rate.window
        # The window is part of the key: a limit changed from a day to a second never waits out the old count.
        counter = Counter(f"{KEY_PREFIX}{key}:rate:{round(window * 1000)}", calls, window)
        rate = _Check(f"{owner}_rate", counter, f"{whose} rate limit ({limits.rate.words()})")
    if limits.quota is not None:
        counter = Counter(f"{KEY_PREFIX}{key}:quota:", limits.quota.calls, 0)
        quota = _Check(f"{owner}_quota", counter, f"{whose} quota ({limits.quota.words()})")
    return _Plan(rate, quota, limits.quota.period if limits.quota is not None else None)


def _period(period: QuotaPeriod, now: float) -> tuple[str, float]:
    """The calendar period `now` falls in (its label, part of the count's key) and the seconds left in it (the
    count's lifetime: it is gone when the period ends). The current one is kept until it ends."""
    current = _current_periods.get(period)
    if current is None or not current[1] <= now < current[2]:
        current = _current_periods[period] = _bounds(period, now)
    return current[0], max(current[2] - now, 0.001)


def _bounds(period: QuotaPeriod, now: float) -> tuple[str, float, float]:
    """The label, start and end (seconds since the epoch) of the calendar period in UTC that `now` falls in."""
    moment = datetime.datetime.fromtimestamp(now, datetime.UTC)
    if period == "hour":
        start = moment.replace(minute=0, second=0, microsecond=0)
        end, label = start + datetime.timedelta(hours=1), start.strftime("%Y-%m-%dT%H")
    elif period == "day":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        end, label = start + datetime.timedelta(days=1), start.strftime("%Y-%m-%d")
    else:
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end, label = (start + datetime.timedelta(days=32)).replace(day=1), start.strftime("%Y-%m")
    return label, start.timestamp(), end.timestamp()


_current_periods: dict[QuotaPeriod, tuple[str, float, float]] = {}


class Limiter:
    """Counts requests and calls against their limits in `state`; a refusal is a `LimitReachedError` and one
    `crank_rate_limited_total` in `metrics`."""

    def __init__(self, state: StateStore, metrics: Metrics | None = None) -> None:
        self.state = state
        self.metrics = metrics
        # Each owner's plan with the limits it was made of: a reload brings new `Limits` objects, and a plan
        # is made again when its owner's limits are not the very object it was made of.
        self._plans: dict[str, tuple[Limits, _Plan]] = {}
        # Counts the store said were full, by key and limit, until they reset (monotonic seconds). A full count
        # stays full until then (it only grows in its window or period, unless Redis loses its data), so the
        # requests that the store cannot count at once (`hit_now`) of a tenant that used up its limit are
        # refused here without asking again: a flood of them costs no Redis round trip each. The limit is part
        # of the key: a limit the operator changes is asked about again at once (its count carries on).
        self._full_until: dict[tuple[str, int], float] = {}
        self._refusal_counters: dict[tuple[str, str, str], Any] = {}

    def _plan(self, owner: str, key: str, limits: Limits) -> _Plan:
        kept = self._plans.get(key)
        if kept is not None and kept[0] is limits:
            return kept[1]
        if len(self._plans) >= _PLANS_KEPT:  # bounded: as many owners as the registry has, at most this many
            self._plans.clear()
        plan = _make_plan(owner, key, limits)
        self._plans[key] = (limits, plan)
        return plan

    def _request_checks(self, key: KeyScope, workspace_limits: Limits) -> list[_Check]:
        now = time.time()
        if not key.anonymous:
            return self._plan("workspace", f"ws:{key.workspace}", workspace_limits).checks(now)
        # Without credentials (lazy sign-in): counted apart from the workspace's own limits, per workspace and per
        # client address (`crank.sources.access.anonymous_principal`), never spending its users' and keys' quota.
        checks = self._plan("anonymous", f"anon:{key.workspace}", workspace_limits).checks(now)
        if key.limits is not None:  # one plan per workspace (never per address: a client could choose those)
            checks += self._plan("anonymous_address", f"anon-address:{key.workspace}", key.limits).checks(now, key.id)
        return checks

    def _call_checks(
        self, workspace: str, agent: str, agent_limits: Limits | None, key: KeyScope | None
    ) -> list[_Check]:
        now = time.time()
        checks = []
        if agent_limits is not None:
            checks += self._plan("agent", f"agent:{workspace}/{agent}", agent_limits).checks(now)
        if key is not None and key.limits is not None:
            checks += self._plan("key", f"key:{key.id}", key.limits).checks(now)
        return checks

    async def admit_request(self, key: KeyScope, workspace_limits: Limits, agent: str) -> None:
        """One request with `key` to `agent`, against its workspace's limits."""
        await self._hit(self._request_checks(key, workspace_limits), key.workspace or "", agent)

    def admit_request_now(self, key: KeyScope, workspace_limits: Limits) -> bool:
        """`admit_request` counted at once when the store can (`StateStore.hit_now`): True when admitted; False
        when nothing was counted and `admit_request` must be awaited."""
        return self.state.hit_now([check.counter for check in self._request_checks(key, workspace_limits)])

    async def admit_call(self, workspace: str, agent: str, agent_limits: Limits | None, key: KeyScope | None) -> None:
        """One call of an operation of `agent`, against the agent's limits and those of the key (if any)."""
        checks = self._call_checks(workspace, agent, agent_limits, key)
        if checks:
            await self._hit(checks, workspace, agent)

    def admit_call_now(self, workspace: str, agent: str, agent_limits: Limits | None, key: KeyScope | None) -> bool:
        """`admit_call` counted at once when the store can: True when admitted; False when nothing was counted
        and `admit_call` must be awaited."""
        checks = self._call_checks(workspace, agent, agent_limits, key)
        return not checks or self.state.hit_now([check.counter for check in checks])

    @property
    def knows_full(self) -> bool:
        """Whether any count is known to be full: without one, `refused_now` never refuses (one test)."""
        return bool(self._full_until)

    def refused_now(self, key: KeyScope, workspace_limits: Limits, agent: str) -> LimitReachedError | None:
        """The refusal of a request with `key` whose workspace's count is known to be full, counted in the
        metrics as `admit_request` counts it, without asking the store or counting the request; None when no
        count is known full (then `admit_request_now` or `admit_request` decide). The store cannot admit such
        a request at once either: its count stays full until the time remembered, and a Redis slice is only
        granted by an answer that admitted."""
        if not self._full_until:
            return None
        checks = self._request_checks(key, workspace_limits)
        full = self._known_full(checks)
        return None if full is None else self._refusal(checks, full, key.workspace or "", agent)

    async def _hit(self, checks: list[_Check], workspace: str, agent: str) -> None:
        full = self._known_full(checks) if self._full_until else None
        if full is None:
            asked = time.monotonic()  # the store measured the time left before it answered: never remember longer
            full = await self.state.hit([check.counter for check in checks])
            if full is None:
                return
            counter = checks[full.counter].counter
            if len(self._full_until) >= _FULL_KEPT:
                self._full_until.clear()
            self._full_until[(counter.key, counter.limit)] = asked + full.retry_after
        raise self._refusal(checks, full, workspace, agent)

    def _refusal(self, checks: list[_Check], full: Full, workspace: str, agent: str) -> LimitReachedError:
        check = checks[full.counter]
        if self.metrics is not None:
            self._refusals(workspace, agent, check.name).inc()
        retry_after = retry_after_seconds(full.retry_after)
        return LimitReachedError(check.name, retry_after, f"The call was refused: {check.text} is used up.")

    def _refusals(self, workspace: str, agent: str, limit: str) -> Any:
        """The `crank_rate_limited_total` child of these labels, found once (a flood of refusals pays no lookup);
        as many as published agents times limits, cleared past `_FULL_KEPT`."""
        labels = (workspace, agent, limit)
        child = self._refusal_counters.get(labels)
        if child is None:
            assert self.metrics is not None
            if len(self._refusal_counters) >= _FULL_KEPT:
                self._refusal_counters.clear()
            child = self._refusal_counters[labels] = self.metrics.rate_limited.labels(*labels)
        return child

    def _known_full(self, checks: list[_Check]) -> Full | None:
        """The first of `checks` whose count the store said is full and has not reset since; nothing counted."""
        now = time.monotonic()
        for index, check in enumerate(checks):
            until = self._full_until.get((check.counter.key, check.counter.limit))
            if until is not None:
                if until > now:
                    return Full(index, until - now)
                del self._full_until[(check.counter.key, check.counter.limit)]
        return None


@dataclass(frozen=True, slots=True)
class CallLimits:
    """What one agent version's tools check before each call: its own limits (from its runtime view) and the
    calling key's. A call is counted when either is set (`limits`, `KeyScope.limits`): the invoker tests both
    with attribute checks, so no limit configured costs no call here."""

    limiter: Limiter
    workspace: str
    agent: str
    limits: Limits | None

    def admit_now(self, key: KeyScope | None) -> bool:
        """Counted at once (`Limiter.admit_call_now`): True when admitted; else await `admit`."""
        return self.limiter.admit_call_now(self.workspace, self.agent, self.limits, key)

    async def admit(self, key: KeyScope | None) -> None:
        await self.limiter.admit_call(self.workspace, self.agent, self.limits, key)
