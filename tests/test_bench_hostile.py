"""`bench/hostile.py` works: a tiny run (1-second phases) with wrk and nginx, no timing asserted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    not all(shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists() for tool in ("wrk", "nginx", "taskset")),
    reason="needs wrk, nginx and taskset (scripts/bench installs them)",
)
def test_a_tiny_hostile_run_serves_every_valid_call_and_reports_memory(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "hostile.py"), "--tiny", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    assert list(report["runs"]) == ["warm-up", "alone", "hostile", "after"]
    hostile = report["runs"]["hostile"]
    assert hostile["honest"]["requests"] > 0 and hostile["hostile"]["requests"] > 0
    assert hostile["junk"]["s4xx"] > 0 and hostile["junk"]["s5xx"] == 0  # refused, never a server error
    assert all(stats["non2xx"] == stats["body_errors"] == 0 for stats in (hostile["honest"], hostile["hostile"]))
    assert 0 < report["memory_kib"]["start"] <= report["memory_kib"]["peak"]
    assert "Honest tenant's p99" in (tmp_path / "latest.md").read_text()
