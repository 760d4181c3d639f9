"""`crank serve --workers N`: N worker processes answering on one listening socket.

The socket is bound once, by the parent (`bind_listener`), before any worker exists; each worker is a fork
of the parent made after that, so every worker accepts connections on the same socket and the port is never
free in between. A worker is a whole server of its own: it builds its app (registry engine, upstream pool,
event loop) after the fork, so no connection, loop or thread is shared between processes. That is also why
the parent must not open any of them before `run_workers`: a forked copy of an open connection is two
processes talking over one socket.

The parent only supervises:
- a worker that exits or dies (a crash, the OOM killer, `kill -9`) is started again, after a pause that
  doubles with each quick failure in a row (0.1 s, 0.2 s, ... at most `MAX_RESTART_PAUSE`);
- when `MAX_FAILED_STARTS` workers in a row exit within `START_GRACE` seconds of their start (a setting
  that cannot work, a registry that refuses), it stops the others and exits with 1 rather than loop;
- SIGTERM or SIGINT (Ctrl+C) is passed on to every worker as SIGTERM: each stops accepting, finishes the
  requests it has (uvicorn's graceful shutdown) and exits; the parent exits with 0 once all have, and
  after `STOP_TIMEOUT` seconds kills those that have not;
- a worker whose parent dies (even by SIGKILL) gets SIGTERM from the kernel (`PR_SET_PDEATHSIG`), so no
  orphan keeps serving the port.

Each worker finds `CRANK_WORKERS=N` in its environment (`WORKERS_VARIABLE`): what runs inside can tell that
other processes serve the same port (an in-process cache or lock is then per worker).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_WORKERS",
    "MAX_FAILED_STARTS",
    "MAX_WORKERS",
    "START_GRACE",
    "WORKERS_VARIABLE",
    "run_workers",
]

logger = logging.getLogger("crank.server")

DEFAULT_WORKERS = 1
MAX_WORKERS = 64
"""At most this many workers: each holds its own registry connections (up to 15, SQLAlchemy's pool), its
upstream pool and its memory; past a worker per core they only compete for the cores (docs/deployment.md)."""
WORKERS_VARIABLE = "CRANK_WORKERS"
START_GRACE = 5.0
"""Seconds a worker must live for its exit to count as a crash rather than a failed start."""
MAX_FAILED_STARTS = 5
MAX_RESTART_PAUSE = 5.0
STOP_TIMEOUT = 30.0
"""Seconds the workers have to finish their requests after SIGTERM before they are killed."""
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}


@dataclass
class _Supervisor:
    count: int
    serve: Callable[[], None]
    started: dict[int, float] = field(default_factory=dict)  # pid -> when it was started (monotonic)
    failed_starts: int = 0
    restart_at: float | None = None  # when to start the missing workers again
    missing: int = 0

    def run(self) -> int:
        os.environ[WORKERS_VARIABLE] = str(self.count)  # inherited by every fork
        for _ in range(self.count):
            self._fork()
        while True:
            received = signal.sigtimedwait(_SIGNALS, 0.2)
            if received is not None and received.si_signo in (signal.SIGTERM, signal.SIGINT):
                return self._stop(0)
            if not self._reap():
                return self._stop(1)
            if self.missing and self.restart_at is not None and time.monotonic() >= self.restart_at:
                for _ in range(self.missing):
                    self._fork()
                self.missing, self.restart_at = 0, None

    def _fork(self) -> None:
        parent = os.getpid()
        sys.stdout.flush()  # else what the parent printed but had not written yet is written again by the fork
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_worker(self.serve, parent)  # never returns
        self.started[pid] = time.monotonic()
        logger.info("worker %d started (%d of %d)", pid, len(self.started), self.count)

    def _reap(self) -> bool:
        """Collect the workers that ended and plan their restart; False once they keep failing at start."""
        while self.started:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return True
            began = self.started.pop(pid, None)
            if began is None:
                continue
            quick = time.monotonic() - began < START_GRACE
            self.failed_starts = self.failed_starts + 1 if quick else 0
            logger.warning("worker %d %s; starting another", pid, _describe(status))
            if self.failed_starts >= MAX_FAILED_STARTS:
                logger.error("%d workers in a row ended within %g s of their start: stopping", self.failed_starts,
                             START_GRACE)  # fmt: skip
                return False
            self.missing += 1
            pause = min(0.1 * 2 ** max(self.failed_starts - 1, 0), MAX_RESTART_PAUSE) if quick else 0.0
            self.restart_at = time.monotonic() + pause
        return True

    def _stop(self, code: int) -> int:
        for pid in self.started:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while self.started and time.monotonic() < deadline:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                signal.sigtimedwait({signal.SIGCHLD}, 0.1)
            else:
                self.started.pop(pid, None)
        for pid in self.started:
            logger.warning("worker %d did not stop within %g s: killed", pid, STOP_TIMEOUT)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        return code


def run_workers(count: int, serve: Callable[[], None]) -> int:
    """Run `serve` (one worker's whole life: build the app, serve on the inherited socket until stopped) in
    `count` forked processes, supervised as the module says; returns the parent's exit code."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # delivered through sigtimedwait, in order
    try:
        return _Supervisor(count, serve).run()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run_worker(serve: Callable[[], None], parent: int) -> None:
    """A forked worker: the signals back as a fresh process has them, then `serve`, then exit (never back
    into the parent's code: its stack is a copy of the parent's)."""
    code = 1
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        _die_with_parent(parent)
        serve()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the line above: nobody would signal us
            os._exit(1)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"
