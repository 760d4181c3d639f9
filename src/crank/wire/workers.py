"""`crank serve --workers N`: N worker processes answering on one listening socket.

The socket is bound once, by the parent (`bind_listener`), before any worker exists; each worker is a fork
of the parent made after that, so every worker accepts connections on the same socket and the port is never
free in between. A worker is a whole server of its own: it builds its app (registry engine, upstream pool,
event loop) after the fork, so no connection, loop or thread is shared between processes. That is also why
the parent must not open any of them before `run_workers`: a forked copy of an open connection is two
processes talking over one socket.

The parent only supervises, telling a bad start from a bad request:
- each worker's event loop writes a heartbeat into memory it shares with the parent (`beat`, from
  `serve_on`'s server, every tick of uvicorn's main loop: 0.1 s), once it serves; a worker *serves* while its
  heartbeats come;
- a worker that exits or dies (a crash, the OOM killer, `kill -9`) is started again, and its cause is logged:
  at once when it had served `START_GRACE` seconds, else after a pause that doubles with each quick death of
  that worker in a row (0.1 s, 0.2 s, ... at most `MAX_RESTART_PAUSE`), while the others keep serving;
- only when no worker serves do quick deaths count as a failed start: after `MAX_FAILED_STARTS` in a row (a
  setting that cannot work, a registry that refuses) it stops the others and exits with 1 rather than loop.
  A request that kills the workers that take it, one after another, costs restarts, never the healthy ones;
- a worker whose heartbeats stop for `liveness_timeout` seconds (`CRANK_WORKER_TIMEOUT`: a stopped process, a
  deadlock, an event loop held by one call), or that does not serve within `START_TIMEOUT` of its start, is
  killed (SIGKILL) and replaced;
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
import mmap
import os
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_LIVENESS_TIMEOUT",
    "DEFAULT_WORKERS",
    "MAX_FAILED_STARTS",
    "MAX_WORKERS",
    "START_GRACE",
    "WORKERS_VARIABLE",
    "beat",
    "run_workers",
]

logger = logging.getLogger("crank.server")

DEFAULT_WORKERS = 1
MAX_WORKERS = 64
"""At most this many workers: each holds its own registry connections (up to 15, SQLAlchemy's pool), its
upstream pool and its memory; past a worker per core they only compete for the cores (docs/deployment.md)."""
WORKERS_VARIABLE = "CRANK_WORKERS"
START_GRACE = 5.0
"""Seconds a worker must serve for its exit to count as a crash rather than a quick death."""
MAX_FAILED_STARTS = 5
MAX_RESTART_PAUSE = 30.0
STOP_TIMEOUT = 30.0
"""Seconds the workers have to finish their requests after SIGTERM before they are killed."""
DEFAULT_LIVENESS_TIMEOUT = 30.0
"""Seconds without a heartbeat after which a serving worker is taken for hung and replaced (gunicorn's
`--timeout` is 30 s too): its event loop is held, so every request it has waits anyway."""
START_TIMEOUT = 120.0
"""Seconds a worker may take from its fork to serving (building its app: loading the registry's agents)."""
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
_BEAT = struct.Struct("d")  # a worker's last heartbeat, `time.monotonic()` (one clock for every process)

_heartbeat: tuple[mmap.mmap, int] | None = None  # in a worker: the shared memory and its place in it


def beat() -> None:
    """A worker's heartbeat (`serve_on`'s server calls it every tick of its event loop); nothing elsewhere."""
    if _heartbeat is not None:
        _BEAT.pack_into(_heartbeat[0], _heartbeat[1], time.monotonic())


@dataclass
class _Worker:
    """One place among the N: the process in it now, if any, and its record of quick deaths."""

    slot: int
    pid: int | None = None
    started: float = 0.0  # monotonic
    quick_deaths: int = 0  # in a row
    restart_at: float = 0.0  # when to start it again (pid None)


@dataclass
class _Supervisor:
    count: int
    serve: Callable[[], None]
    liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT
    workers: list[_Worker] = field(default_factory=list)
    failed_starts: int = 0  # quick deaths in a row while no worker served
    beats: mmap.mmap = field(default_factory=lambda: mmap.mmap(-1, _BEAT.size * MAX_WORKERS))

    def run(self) -> int:
        os.environ[WORKERS_VARIABLE] = str(self.count)  # inherited by every fork
        self.workers = [_Worker(slot) for slot in range(self.count)]
        for worker in self.workers:
            self._fork(worker)
        while True:
            received = signal.sigtimedwait(_SIGNALS, 0.2)
            if received is not None and received.si_signo in (signal.SIGTERM, signal.SIGINT):
                return self._stop(0)
            if not self._reap():
                return self._stop(1)
            self._check_liveness()
            now = time.monotonic()
            for worker in self.workers:
                if worker.pid is None and now >= worker.restart_at:
                    self._fork(worker)

    def _fork(self, worker: _Worker) -> None:
        global _heartbeat
        parent = os.getpid()
        _BEAT.pack_into(self.beats, worker.slot * _BEAT.size, 0.0)
        sys.stdout.flush()  # else what the parent printed but had not written yet is written again by the fork
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _heartbeat = (self.beats, worker.slot * _BEAT.size)
            _run_worker(self.serve, parent)  # never returns
        worker.pid, worker.started = pid, time.monotonic()
        running = sum(1 for other in self.workers if other.pid is not None)
        logger.info("worker %d started (%d of %d)", pid, running, self.count)

    def _last_beat(self, worker: _Worker) -> float:
        """When the worker last beat since its start; 0.0 if it has not served yet."""
        last: float = _BEAT.unpack_from(self.beats, worker.slot * _BEAT.size)[0]
        return last if last >= worker.started else 0.0

    def _serving(self, now: float) -> bool:
        return any(
            worker.pid is not None and now - self._last_beat(worker) < self.liveness_timeout for worker in self.workers
        )

    def _reap(self) -> bool:
        """Collect the workers that ended and plan their restart; False once they keep failing at start."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return True
            worker = next((worker for worker in self.workers if worker.pid == pid), None)
            if worker is not None and not self._ended(worker, status):
                return False

    def _ended(self, worker: _Worker, status: int) -> bool:
        now = time.monotonic()
        last = self._last_beat(worker)
        quick = not last or now - worker.started < START_GRACE
        pid, worker.pid = worker.pid, None
        worker.quick_deaths = worker.quick_deaths + 1 if quick else 0
        pause = min(0.1 * 2 ** (worker.quick_deaths - 1), MAX_RESTART_PAUSE) if quick else 0.0
        worker.restart_at = now + pause
        serving = self._serving(now)
        self.failed_starts = self.failed_starts + 1 if quick and not serving else 0
        how = f"within {START_GRACE:g} s of its start" if quick else "after serving"
        logger.warning("worker %d %s %s; starting another in %g s%s", pid, _describe(status), how, pause,
                       "" if serving or not quick else " (no worker serves)")  # fmt: skip
        if self.failed_starts >= MAX_FAILED_STARTS:
            logger.error("%d workers in a row ended within %g s of their start and none serves: stopping",
                         self.failed_starts, START_GRACE)  # fmt: skip
            return False
        return True

    def _check_liveness(self) -> None:
        now = time.monotonic()
        for worker in self.workers:
            if worker.pid is None:
                continue
            last = self._last_beat(worker)
            if last and now - last > self.liveness_timeout:
                logger.error("worker %d has not answered for %.0f s (CRANK_WORKER_TIMEOUT is %g s): killed and "
                             "replaced", worker.pid, now - last, self.liveness_timeout)  # fmt: skip
            elif not last and now - worker.started > START_TIMEOUT:
                logger.error("worker %d did not start serving within %g s: killed and replaced", worker.pid,
                             START_TIMEOUT)  # fmt: skip
            else:
                continue
            _signal(worker.pid, signal.SIGKILL)  # reaped and replaced as any dead worker

    def _stop(self, code: int) -> int:
        started = {worker.pid for worker in self.workers if worker.pid is not None}
        for pid in started:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while started and time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                signal.sigtimedwait({signal.SIGCHLD}, 0.1)
            else:
                started.discard(pid)
        for pid in started:
            logger.warning("worker %d did not stop within %g s: killed", pid, STOP_TIMEOUT)
            _signal(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        return code


def run_workers(count: int, serve: Callable[[], None], *, liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT) -> int:
    """Run `serve` (one worker's whole life: build the app, serve on the inherited socket until stopped) in
    `count` forked processes, supervised as the module says; returns the parent's exit code."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # delivered through sigtimedwait, in order
    try:
        return _Supervisor(count, serve, liveness_timeout).run()
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
