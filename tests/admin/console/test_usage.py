"""The last hour's calls and errors, from the gateway's own counters read once a minute."""

from __future__ import annotations

from crank.admin.console.usage import SAMPLE_INTERVAL, Usage
from crank.exceptions import ConfirmationError, ToolError
from crank.telemetry import Metrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_counts_cover_the_last_hour_from_the_readings_kept() -> None:
    metrics, clock = Metrics(), Clock()
    desk, other = metrics.observer("shop", "desk"), metrics.observer("acme", "desk")
    desk("search", None, 0.01, None, None, {})  # before the console counts: never in its window
    usage = Usage(metrics, clock=clock)
    failure = ToolError("upstream down", error_code="upstream_unavailable")
    for minute in range(90):  # a call a minute, every third one failed, and the minute's reading
        clock.now += SAMPLE_INTERVAL
        desk("search", failure if minute % 3 == 0 else None, 0.01, "r", None, {})
        other("search", None, 0.01, None, None, {})
        usage.sample()
    report = usage.last_hour("shop")
    assert report.seconds == 3600.0
    (row,) = report.agents
    assert (row.agent, row.calls, row.errors) == ("desk", 60, 20) and row.error_percent == 33.3


def test_before_an_hour_the_counts_run_from_the_first_reading() -> None:
    metrics, clock = Metrics(), Clock()
    usage = Usage(metrics, clock=clock)
    clock.now += 300
    metrics.observer("shop", "desk")("search", None, 0.01, None, None, {})
    report = usage.last_hour("shop")
    assert report.seconds == 300 and [(row.agent, row.calls, row.errors) for row in report.agents] == [("desk", 1, 0)]
    assert usage.last_hour("nobody").agents == []


def test_the_reading_thread_stops_when_closed() -> None:
    usage = Usage(Metrics())
    usage.start()
    usage.close()
    assert usage._thread is not None
    usage._thread.join(timeout=5)
    assert not usage._thread.is_alive()


def test_the_first_step_of_a_confirmation_is_a_call_and_not_an_error() -> None:
    """A destructive tool answers its first call with `confirmation_required` (the model repeats it with the token):
    the usage page counts that step as a call, never as a failure."""
    metrics, clock = Metrics(), Clock()
    usage = Usage(metrics, clock=clock)
    desk = metrics.observer("shop", "desk")
    desk("cancel_order", ConfirmationError("Confirm it first."), 0.01, "r1", None, {})  # the first step
    desk("cancel_order", None, 0.01, "r2", None, {})  # repeated with the token: done
    desk("cancel_order", ConfirmationError("Wrong token.", error_code="confirmation_invalid"), 0.01, "r3", None, {})
    clock.now += 60
    (row,) = usage.last_hour("shop").agents
    assert (row.calls, row.errors) == (3, 1)  # the wrong token is an error; the first step is not
