"""`bench/stream_cost.py` works: a tiny run answers both kinds of call (no timing asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_stream_cost_bench_runs_both_kinds_of_call() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "stream_cost.py"), "--calls", "20", "--rounds", "1"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["JSON", "SSE", "ratio"]
