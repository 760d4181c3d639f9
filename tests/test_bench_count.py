"""`bench/count_gateway.py` works: its requests reach the gateway and come back answered, with no I/O on the way
(what callgrind would count). No count is asserted: the instructions are measured in bench/, not here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("kind", "answer"), [("call", b'"result":{"content"'), ("list", b'"result":{"tools"')])
def test_the_counted_requests_are_answered_without_waiting_for_io(kind: str, answer: bytes) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "count_gateway.py"), kind, "20"], cwd=ROOT,
                          capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert answer in proc.stderr
