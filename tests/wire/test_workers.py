"""`crank serve --workers N` (crank.wire.workers): N OS processes answering on one port, each a whole server,
supervised by the process that bound the port. Real processes, real signals; waits only guard against a hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from crank.cli import main
from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0

# An ASGI app that says which process answered and what CRANK_WORKERS it found.
WHOAMI = """
import json, os

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = json.dumps({"pid": os.getpid(), "workers": os.environ.get("CRANK_WORKERS")}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
"""


@contextmanager
def serving(
    *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`crank serve ARGS` on a free port: the supervisor process and the base URL, once it answers; its
    standard error goes to `log` when given."""
    port = free_port()
    environment = {**os.environ, **(env or {}), "CRANK_LISTEN": f"127.0.0.1:{port}", "CRANK_LOG_FORMAT": "text"}
    command = [sys.executable, "-m", "crank.cli", "serve", *args]
    with log.open("wb") if log is not None else open(os.devnull, "wb") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL,
                                   stderr=stderr, start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        until(lambda: answers(base), "crank serve to answer")
        yield process, base
    finally:
        with suppress(ProcessLookupError):  # the whole group: a worker left behind too
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=WAIT)


def answers(base: str, path: str = "/healthz") -> bool:
    try:
        return httpx.get(base + path, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.05)


def workers_of(process: subprocess.Popen[bytes]) -> list[int]:
    """The supervisor's child processes, from /proc."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    return sorted(int(pid) for pid in children)


def whoami(base: str) -> dict[str, object]:
    with httpx.Client() as fresh:  # a new connection each time: whichever worker accepts it answers
        answer: dict[str, object] = fresh.get(base + "/").json()
        return answer


@pytest.fixture
def whoami_dir(tmp_path: Path) -> Path:
    (tmp_path / "whoami.py").write_text(WHOAMI)
    return tmp_path


def test_two_workers_answer_on_one_port_each_with_crank_workers_set(whoami_dir: Path) -> None:
    with serving("whoami:app", "--workers", "2", "--app-dir", str(whoami_dir)) as (process, base):
        until(lambda: len(workers_of(process)) == 2, "two workers")
        first, second = workers_of(process)
        # A stopped worker accepts nothing: the other one takes every connection on the shared port.
        for stopped, serving_pid in ((first, second), (second, first)):
            os.kill(stopped, signal.SIGSTOP)
            try:
                assert [whoami(base) for _ in range(3)] == [{"pid": serving_pid, "workers": "2"}] * 3
            finally:
                os.kill(stopped, signal.SIGCONT)


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(tmp_path: Path) -> None:
    env = {"CRANK_DATA_DIR": str(tmp_path), "CRANK_ROLE": "mcp"}  # the gateway on the SQLite registry
    with serving("--workers", "2", env=env) as (process, base):
        until(lambda: len(workers_of(process)) == 2, "two workers")
        killed, survivor = workers_of(process)
        os.kill(killed, signal.SIGKILL)
        assert answers(base, "/readyz")  # the survivor answers while the supervisor starts another
        until(lambda: len(workers_of(process)) == 2 and killed not in workers_of(process), "a new worker")
        assert survivor in workers_of(process)
        assert answers(base, "/readyz") and process.poll() is None


def test_sigterm_stops_every_worker_and_the_supervisor_exits_0(whoami_dir: Path) -> None:
    with serving("whoami:app", "--workers", "3", "--app-dir", str(whoami_dir)) as (process, base):
        until(lambda: len(workers_of(process)) == 3, "three workers")
        workers = workers_of(process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=WAIT) == 0
        assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
        assert not answers(base)


def test_workers_that_keep_failing_at_start_stop_the_supervisor_with_1(tmp_path: Path) -> None:
    port = free_port()
    environment = {**os.environ, "CRANK_LISTEN": f"127.0.0.1:{port}"}
    done = subprocess.run([sys.executable, "-m", "crank.cli", "serve", "nosuch:app", "--workers", "2",
                           "--app-dir", str(tmp_path)], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=WAIT, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "ended within 5 s of their start and none serves: stopping" in done.stderr
    assert "idempotency" not in done.stderr  # an app of its own: no warning about the gateway's state


def test_a_worker_killed_at_every_start_costs_restarts_while_the_other_serves(tmp_path: Path) -> None:
    # A request that kills the fresh workers that take it, or the OOM killer: one worker dies again and again
    # right after its start; the other keeps serving, the port never refuses, and the supervisor stays.
    env = {"CRANK_DATA_DIR": str(tmp_path), "CRANK_ROLE": "mcp"}
    log = tmp_path / "serve.log"
    with serving("--workers", "2", env=env, log=log) as (process, base):
        until(lambda: len(workers_of(process)) == 2, "two workers")
        healthy = workers_of(process)[0]
        killed: set[int] = set()
        refused = 0
        deadline = time.monotonic() + 20
        while len(killed) < 6 and time.monotonic() < deadline:
            for pid in workers_of(process):
                if pid != healthy and pid not in killed:
                    os.kill(pid, signal.SIGKILL)  # right after its start
                    killed.add(pid)
            try:
                httpx.get(base + "/healthz", timeout=5)
            except httpx.ConnectError:
                refused += 1
            time.sleep(0.02)
        assert len(killed) == 6 and refused == 0
        assert process.poll() is None and healthy in workers_of(process) and answers(base, "/readyz")
    text = log.read_text()
    assert text.count("was killed by SIGKILL within 5 s of its start; starting another in") >= 5
    assert "stopping" not in text
    assert "rate-limit counts are kept per worker" in text  # --workers without Redis: the warning names limits


def test_a_worker_that_stops_answering_is_replaced(tmp_path: Path) -> None:
    env = {"CRANK_DATA_DIR": str(tmp_path), "CRANK_ROLE": "mcp", "CRANK_WORKER_TIMEOUT": "2"}
    log = tmp_path / "serve.log"
    with serving("--workers", "2", env=env, log=log) as (process, base):
        until(lambda: log.read_text().count("Application startup complete") == 2, "two workers serving")
        time.sleep(0.5)  # a few ticks of their event loops: both have sent heartbeats
        stopped, survivor = workers_of(process)
        os.kill(stopped, signal.SIGSTOP)  # hung: no heartbeat any more, and no exit either
        until(lambda: stopped not in workers_of(process) and len(workers_of(process)) == 2, "a replacement")
        assert survivor in workers_of(process) and answers(base, "/readyz")
    assert f"worker {stopped} has not answered for" in log.read_text()


def test_a_killed_supervisor_takes_its_workers_with_it(whoami_dir: Path) -> None:
    with serving("whoami:app", "--workers", "2", "--app-dir", str(whoami_dir)) as (process, base):
        until(lambda: len(workers_of(process)) == 2, "two workers")
        workers = workers_of(process)
        process.kill()  # the supervisor alone: its workers get SIGTERM from the kernel
        process.wait(timeout=WAIT)
        until(lambda: not [pid for pid in workers if _alive(pid)], "the workers to exit")
        assert not answers(base)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent (here: init) has not collected it yet


@pytest.mark.parametrize(("given", "env"), [(["--workers", "0"], {}), ([], {"CRANK_WORKERS": "65"})])
def test_a_worker_count_out_of_range_stops_the_start(given: list[str], env: dict[str, str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve", *given], env={"CRANK_DATA_DIR": str(tmp_path), **env})
    assert result.exit_code == 1
    assert "CRANK_WORKERS: Input should be" in result.output and "Traceback" not in result.output
