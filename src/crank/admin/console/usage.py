"""Each agent's calls and errors over the last hour, for the console, from the counters the gateway of this
process keeps for `/metrics` (`crank.telemetry.Metrics`): nothing more is counted on a call's path.

The counters only grow, so a thread reads them once a minute and keeps an hour of readings: the last hour's
calls are the newest reading less the one an hour before it (less the first one, while the console has run for
less than an hour). The counts are this process's: replicas that serve MCP elsewhere are scraped by Prometheus.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from crank.telemetry import Metrics

__all__ = ["SAMPLE_INTERVAL", "WINDOW", "AgentUsage", "Usage", "UsageReport"]

SAMPLE_INTERVAL: Final = 60.0
WINDOW: Final = 3600.0
Totals = dict[tuple[str, str], tuple[int, int]]


@dataclass(frozen=True)
class AgentUsage:
    agent: str
    calls: int
    errors: int

    @property
    def error_percent(self) -> float:
        return round(100 * self.errors / self.calls, 1) if self.calls else 0.0


@dataclass(frozen=True)
class UsageReport:
    seconds: float
    """How long the counts cover: an hour, or less while the console has run for less."""
    agents: list[AgentUsage]


class Usage:
    def __init__(self, metrics: Metrics, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._metrics = metrics
        self._clock = clock
        self._readings: deque[tuple[float, Totals]] = deque(maxlen=int(WINDOW / SAMPLE_INTERVAL) + 2)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sample()

    def start(self) -> None:
        """Read the counters once a minute, in a daemon thread, until `close`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="crank-console-usage", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            self.sample()

    def sample(self) -> None:
        reading = (self._clock(), self._metrics.agent_calls())
        with self._lock:
            self._readings.append(reading)

    def last_hour(self, workspace: str) -> UsageReport:
        """The workspace's agents' calls and errors from the reading an hour ago (or the first) until now."""
        now, latest = self._clock(), self._metrics.agent_calls()
        with self._lock:
            readings = list(self._readings)
        since, before = readings[0]
        for taken, totals in readings:  # the newest reading at least an hour old, if there is one
            if taken <= now - WINDOW:
                since, before = taken, totals
        agents = []
        for (space, agent), (calls, errors) in sorted(latest.items()):
            if space == workspace:
                old_calls, old_errors = before.get((space, agent), (0, 0))
                agents.append(AgentUsage(agent, calls - old_calls, errors - old_errors))
        return UsageReport(now - since, agents)
