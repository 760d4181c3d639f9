"""Request ids: one per call, written to the log, shown to a client only where an error says so."""

from __future__ import annotations

import uuid

__all__ = ["new_request_id"]


def new_request_id() -> str:
    return uuid.uuid4().hex
