"""Request ids: one per call, written to the log, shown to a client only where an error says so."""

from __future__ import annotations

import os
import random

__all__ = ["new_request_id"]

_ids = random.Random()  # seeded from the OS at import, and again in a forked child: each process draws its own
os.register_at_fork(after_in_child=_ids.seed)


def new_request_id() -> str:
    """32 hex digits, drawn from a generator seeded by the OS. An id names a call in the log and in the error a
    client gets; it proves nothing and guards nothing, so it needs no system call (`secrets.token_hex` made one
    for each, about a microsecond, on every call whose context asks for its id)."""
    return f"{_ids.getrandbits(128):032x}"
