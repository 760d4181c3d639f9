"""`bench/rpc_shared.py` works: one 1-second run of the Redis-backed cache and rate limit, no timing asserted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("wrk", "redis-server", "taskset")),
    reason="needs wrk, redis-server and taskset (scripts/bench and scripts/install put them in place)",
)
def test_a_tiny_run_calls_the_redis_backed_cache_and_rate_limit_without_an_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "rpc_shared.py"), "--tiny", "--connections", "4",
         "--only", "redis/cached,redis/limited", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    assert set(report["runs"]) == {"redis/cached", "redis/limited"}
    assert all(run[0]["requests"] > 0 and run[0]["body_errors"] == 0 for run in report["runs"].values())
    assert "| redis/cached |" in (tmp_path / "latest.md").read_text()
