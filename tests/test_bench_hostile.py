"""`bench/hostile.py` and `bench/refusals.py` work: tiny runs with wrk and nginx, no timing asserted."""

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
    # The hostile tenant on a plan of 50 requests and calls a second: its own calls past it are refused
    # (counted apart), the honest tenant's never are.
    command = [sys.executable, str(ROOT / "bench" / "hostile.py"), "--tiny", "--hostile-limit", "50"]
    proc = subprocess.run(
        [*command, "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    assert list(report["runs"]) == ["warm-up", "alone", "hostile", "after"]
    hostile = report["runs"]["hostile"]
    assert hostile["honest"]["requests"] > 0 and hostile["hostile"]["requests"] > 0
    assert hostile["junk"]["s4xx"] > 0 and hostile["junk"]["s5xx"] == 0  # refused, never a server error
    assert all(stats["non2xx"] == stats["body_errors"] == 0 for stats in (hostile["honest"], hostile["hostile"]))
    assert hostile["hostile"]["limited"] > 0 and hostile["honest"]["limited"] == 0
    assert 0 < report["memory_kib"]["start"] <= report["memory_kib"]["peak"]
    assert "Honest tenant's p99" in (tmp_path / "latest.md").read_text()


@pytest.mark.skipif(
    not all(shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists() for tool in ("wrk", "nginx", "taskset")),
    reason="needs wrk, nginx and taskset (scripts/bench installs them)",
)
def test_a_tiny_refusal_run_measures_refusals_under_each_server() -> None:
    command = [sys.executable, str(ROOT / "bench" / "refusals.py"), "--seconds", "1", "--rounds", "1"]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-1000:]
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["crank", "uvicorn"]
    assert all("µs of gateway CPU per request" in line and "refused" in line for line in lines)


@pytest.mark.skipif(
    not all(shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists() for tool in ("wrk", "nginx", "taskset")),
    reason="needs wrk, nginx and taskset (scripts/bench installs them)",
)
@pytest.mark.parametrize("attack", ["costly-key", "prompt"])
def test_a_tiny_attack_run_refuses_the_attack_and_serves_every_valid_call(tmp_path: Path, attack: str) -> None:
    command = [sys.executable, str(ROOT / "bench" / "hostile.py"), "--tiny", "--attack", attack, "--out", str(tmp_path)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    assert report["meta"]["attack"] == attack
    hostile = report["runs"]["hostile"]
    assert hostile["honest"]["non2xx"] == hostile["honest"]["body_errors"] == 0
    attack_answers = hostile["junk"]
    assert attack_answers["s4xx"] > 0 and attack_answers["s5xx"] == 0 and attack_answers["leaks"] == 0


def test_the_key_cost_bench_measures_each_bound() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "key_cost.py"), "--checks", "3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[0].endswith("used") and lines[1].endswith("used") and "skipped" in lines[2]
