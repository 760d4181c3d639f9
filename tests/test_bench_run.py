"""`bench/run.py` reads a target's own CPU time per request, and its report divides the bare app's by each row's
(no timing asserted: the numbers are in docs/benchmarks.md)."""

from __future__ import annotations

import os
import time

from bench import run


def test_a_process_cpu_time_is_read_as_the_process_itself_counts_it() -> None:
    before, counted = run.process_cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - counted < 0.3:  # bounded: 0.3 s of this process's own CPU time
        sum(range(10_000))
    read, spent = run.process_cpu_seconds(os.getpid()) - before, time.process_time() - counted
    assert abs(read - spent) < 0.05  # /proc counts in clock ticks (10 ms here): a few ticks apart at most


def row(target: str, era: str, rps: float, cpu_us: float | None) -> run.Row:
    return run.Row(target, "tools_call", era, rps, 1.0, 2.0, [rps], {}, cpu_us)


def test_the_report_divides_the_bare_apps_least_cpu_per_request_by_each_rows() -> None:
    meta = {"date": "today", "wrk_args": "-t1", "warmup_s": 2, "repeat": 5, "client_cpu": "1", "server_cpu": "0",
            "cpu": "a CPU", "python_version": "3.11", "packages": {}, "crank_source": "src/"}  # fmt: skip
    rows = [
        row("bare", "legacy", 30_000, 20.0),
        row("bare", "modern", 29_000, 25.0),
        row("crank-fixture", "legacy", 22_000, 28.0),
        row("crank-fixture", "modern", 20_000, None),  # a run that could not read the server's CPU time
    ]
    lines = run.markdown(meta, rows, []).splitlines()
    fixture = [line for line in lines if line.startswith("| Crank conformance fixture")]
    assert fixture[0].endswith("| 0.73 | 28.0 | 0.71 |")  # 22,000 / 30,000 req/s; 20.0 / 28.0 µs
    assert fixture[1].endswith("| – | – |")
    bare = next(line for line in lines if line.startswith("| bare ASGI") and "(best)" in line)
    assert bare.endswith("| 20.0 | 1.00 |")
