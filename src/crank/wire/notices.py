"""`ThrottledLog`: a warning that a flood could repeat thousands of times a second (a limit hit by every
connection or call of an attack) is written at once the first time, then at most once per interval for
each kind, saying how many times it happened since; so the log says why, and an attacker cannot fill it."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["DEFAULT_LOG_INTERVAL", "ThrottledLog"]

DEFAULT_LOG_INTERVAL = 10.0
"""Seconds between two lines about the same limit."""
_MAX_KINDS = 1024  # kinds may carry a workspace and an origin: bounded, so that they cannot grow memory


class ThrottledLog:
    def __init__(self, logger: logging.Logger, interval: float = DEFAULT_LOG_INTERVAL) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}  # kind -> when its last line was written
        self._since: dict[str, int] = {}  # kind -> times it happened since, unwritten

    def forget(self) -> None:
        """Forget what was written: every kind is written at its next occurrence (a test case that must see its
        line, after another that wrote the same kind: two loopback servers can get the same port)."""
        self._last.clear()
        self._since.clear()

    def warning(self, kind: str, message: str, *args: Any, **extra: Any) -> None:
        """Log `message % args` unless `kind` was logged less than `interval` seconds ago (then only count it)."""
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            self._since[kind] = self._since.get(kind, 0) + 1
            return
        if len(self._last) >= _MAX_KINDS:
            self._last.clear()
            self._since.clear()
        self._last[kind] = now
        unwritten = self._since.pop(kind, 0)
        if unwritten:
            message += f" (and {unwritten} more times since the last such line)"
        self.logger.warning(message, *args, extra={"limit": kind.partition(":")[0], **extra})
