"""`bench/publish_reload.py` works: a tiny run of both reloads, no timing asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_run_times_the_reload_with_the_change_log_and_with_everything() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.publish_reload", "--tenants", "3", "--tools", "2", "--publishes", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["3 tenants, change log", "3 tenants, everything"]
    assert all("reload after a publish p50" in line for line in lines)
