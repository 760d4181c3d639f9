"""The gateway's audit trail of tool calls: each agent's catalog tells it every finished call (its `observer`), and a
thread of its own writes them to the registry in batches (`crank.registry.audit.AuditLog`), off the request path.

A call costs the request its record's JSON (a digest of the arguments, about 3 µs in all) and an append to a bounded
buffer (`capacity`, `CRANK_AUDIT_BUFFER`); the writer's thread takes what is buffered every `interval` seconds, or
sooner once a batch is waiting, and writes it as one row per workspace. When the registry does not answer, what was
buffered stays and is written once it answers again. When the buffer is full, a new record is dropped: counted
(`crank_audit_dropped_total`) and logged, never silently. `close` writes what is left before the process ends.
"""

from __future__ import annotations

import collections
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.exc import DataError, IntegrityError

from crank import _json, tracing
from crank.exceptions import ToolError
from crank.wire.auth import Principal
from crank.wire.notices import ThrottledLog

if TYPE_CHECKING:  # annotations only: `crank.settings` imports this module for its default, at every command's start
    from crank.registry.audit import AuditLog
    from crank.telemetry import Observe

__all__ = ["DEFAULT_AUDIT_BUFFER", "AuditTrail", "audit_key", "principal_fields"]

logger = logging.getLogger("crank.audit")

DEFAULT_AUDIT_BUFFER: Final = 10_000
"""Records waiting to be written at most; past it, new ones are dropped and counted."""
_BATCH: Final = 500
_NAMES: Final = 4_096  # callers whose fields are kept; past it, they are named again
_INTERVAL: Final = 0.2


class AuditTrail:
    def __init__(
        self, log: AuditLog, *, capacity: int = DEFAULT_AUDIT_BUFFER, interval: float = _INTERVAL,
        on_drop: Callable[[], None] | None = None, key: bytes | None = None,
    ) -> None:  # fmt: skip
        """`on_drop`: told of each record dropped because the buffer was full (the metric). `key`: what the
        arguments' digests are keyed with (HMAC-SHA-256), the same on every replica so that digests compare; a
        random one when None. Without the key, a digest of a guessable argument cannot be reversed."""
        self._log = log
        self._key = key if key is not None else os.urandom(32)
        self._capacity = capacity
        self._interval = interval
        self._on_drop = on_drop
        self._waiting: collections.deque[tuple[str, int, bytes]] = collections.deque()
        # Each workspace's records waiting, and the most one may hold: half the buffer (at least 1), so that one
        # tenant's flood cannot fill it and have the others' records dropped. Both threads count, under the lock.
        self._held: collections.Counter[str] = collections.Counter()
        self._share = max(1, capacity // 2)
        self._counting = threading.Lock()
        self._names: dict[int, tuple[Principal | None, dict[str, str]]] = {}
        self._tracing = tracing.tracer() is not None
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._notices = ThrottledLog(logger)
        self.dropped = 0
        """Records dropped because the buffer was full."""
        self.lost = 0
        """Records the registry refused for good (a value out of its range): logged as errors."""
        self._thread = threading.Thread(target=self._run, name="crank-audit", daemon=True)
        self._thread.start()

    def observer(self, workspace: str, agent: str) -> Observe:
        """The `CallObserver` that records one agent's calls. The request writes its record's JSON (a digest of the
        arguments, the caller named once per caller) and appends it: bytes, which the garbage collector never
        walks, where holding the calls' own objects until the writer runs would make every collection longer."""
        waiting, capacity, names, held, share = self._waiting, self._capacity, self._names, self._held, self._share

        def observe(
            tool: str, error: ToolError | None, seconds: float, request_id: str | None, caller: Principal | None,
            arguments: Mapping[str, Any],
        ) -> None:  # fmt: skip
            with self._counting:
                full = len(waiting) >= capacity or held[workspace] >= share
                if not full:
                    held[workspace] += 1
            if full:
                self._drop(workspace)
                return
            at = int(time.time() * 1_000_000)
            known = names.get(id(caller))
            principal = known[1] if known is not None and known[0] is caller else self._name(caller)
            written = _json.dumps({
                "at": at, "agent": agent, "tool": tool, "principal": principal,
                "arguments_digest": hmac.digest(self._key, _json.dumps_sorted(arguments), "sha256").hex(),
                "outcome": "ok" if error is None else error.error_code, "latency_us": int(seconds * 1_000_000),
                "request_id": request_id or "",
                "trace_id": tracing.current_ids().get("trace_id") if self._tracing else None,
            })  # fmt: skip
            waiting.append((workspace, at, written))
            if len(waiting) >= _BATCH:
                self._wake.set()

        return observe

    def _name(self, caller: Principal | None) -> dict[str, str]:
        """The caller's fields, kept for its next calls (with the caller itself, so that its `id` stays its own)."""
        if len(self._names) >= _NAMES:
            self._names.clear()
        principal = principal_fields(caller)
        self._names[id(caller)] = (caller, principal)
        return principal

    def _drop(self, workspace: str) -> None:
        self.dropped += 1
        if self._on_drop is not None:
            self._on_drop()
        self._notices.warning("dropped", "audit record of workspace %s dropped: the buffer of %d records, or the half "
                              "of it one workspace may hold, is full (CRANK_AUDIT_BUFFER)", workspace,
                              self._capacity)  # fmt: skip

    def flush(self) -> None:
        """Write everything buffered now (in the caller's thread); the registry's error when it does not answer."""
        while self._waiting:
            taken = [self._waiting.popleft() for _ in range(min(_BATCH, len(self._waiting)))]
            batches: dict[str, list[tuple[str, int, bytes]]] = {}
            for record in taken:
                batches.setdefault(record[0], []).append(record)
            for index, (workspace, batch) in enumerate(batches.items()):
                try:
                    self._log.append(batch)  # one transaction per workspace: one cannot stop the others
                except (DataError, IntegrityError) as refused:  # never writable: set aside, said, counted
                    self.lost += len(batch)
                    logger.error("%d audit records of workspace %s cannot be written and are lost: %s", len(batch),
                                 workspace, type(refused).__name__)  # fmt: skip
                    self._release(workspace, len(batch))
                except Exception:
                    unwritten = [record for later in list(batches.values())[index:] for record in later]
                    self._waiting.extendleft(reversed(unwritten))  # kept, each workspace's in order, for next time
                    raise
                else:
                    self._release(workspace, len(batch))

    def _release(self, workspace: str, count: int) -> None:
        with self._counting:
            self._held[workspace] -= count
            if self._held[workspace] <= 0:
                del self._held[workspace]

    def close(self, timeout: float = 10) -> None:
        """Stop the writer after it has written what is buffered."""
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # the registry is away: kept, tried again next time
                self._notices.warning("unwritten", "audit records not written yet (%d waiting): %s",
                                      len(self._waiting), type(exc).__name__)  # fmt: skip
                if self._closed.is_set():
                    logger.error("%d audit records could not be written before the process ended", len(self._waiting))
                    return
            if self._closed.is_set():
                return


def audit_key(secret: str | bytes | None) -> bytes | None:
    """The arguments' digest key of a server whose replicas share `secret` (the request-state secret), else None."""
    if secret is None:
        return None
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.digest(raw, b"crank audit arguments", "sha256")


def principal_fields(caller: Principal | None) -> dict[str, str]:
    """Who called, as the record keeps it: the method, and the subject, client id, key or token id and issuer
    that are known (never a token)."""
    if caller is None:
        return {"method": "none"}
    fields = {"method": caller.method, "id": caller.id, "subject": caller.subject, "client_id": caller.client_id,
              "issuer": caller.issuer}  # fmt: skip
    return {name: value for name, value in fields.items() if value}
