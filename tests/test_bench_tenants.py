"""`bench/tenants.py` works: two tenants on `crank serve`, on SQLite and PostgreSQL, written by two seeders, two
publishes each; no timing asserted."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realapis import GITHUB, require

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server (scripts/install puts it in place)")
def test_a_tiny_run_measures_start_lists_and_a_publish_served() -> None:
    require(GITHUB)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.tenants", "--tenants", "2", "--tools", "3", "--publishes", "2",
         "--databases", "sqlite,postgresql", "--seeders", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()[-2:]
    assert [line.split(":")[0].split() for line in lines] == [
        ["this", "sqlite", "2", "tenants"],
        ["this", "postgresql", "2", "tenants"],
    ]
    for line in lines:
        assert all(part in line for part in ("ready in", "tools/list cold", "publish -> served p50", "p99", "RSS then"))
