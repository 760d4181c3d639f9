"""Request ids: one per call, written to the log, shown to a client only where an error says so."""

from __future__ import annotations

import os
import threading

__all__ = ["new_request_id"]

_BATCH = 256  # ids drawn per system call
_lock = threading.Lock()
_random = b""
_taken = 0


def new_request_id() -> str:
    """32 hex digits from the operating system's randomness, unpredictable as `secrets.token_hex(16)` is: a caller
    that sees its own ids cannot tell another's. Drawn 256 ids at a time (one system call, where `token_hex` made
    one for each: about a microsecond on every call whose context asks for its id)."""
    global _random, _taken
    with _lock:
        if _taken == len(_random):
            _random, _taken = os.urandom(16 * _BATCH), 0
        start = _taken
        _taken += 16
        return _random[start : start + 16].hex()


def _forget() -> None:
    """A forked child draws its own: it must not hand out the ids its parent had drawn."""
    global _random, _taken
    _random, _taken = b"", 0


os.register_at_fork(after_in_child=_forget)
