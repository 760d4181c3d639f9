"""Work that must run after the response is on its way (seed 001's post-response event).

`MCPEndpoint` opens a list per request; a tool source appends callbacks with `call_after_response`,
and the endpoint runs them once the response body is sent. Failures are logged, never sent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

__all__ = ["call_after_response", "run_after_response", "start_after_response"]

logger = logging.getLogger("crank.mcp")

Callback = Callable[[], Awaitable[None]]
_pending: ContextVar[list[Callback] | None] = ContextVar("crank_after_response", default=None)


def start_after_response() -> list[Callback]:
    callbacks: list[Callback] = []
    _pending.set(callbacks)
    return callbacks


def call_after_response(callback: Callback) -> bool:
    """Run `callback` after this request's response is sent; False when no endpoint collects callbacks."""
    callbacks = _pending.get()
    if callbacks is None:
        return False
    callbacks.append(callback)
    return True


async def run_after_response(callbacks: list[Callback]) -> None:
    for callback in callbacks:
        try:
            await callback()
        except Exception:
            logger.exception("an after-response callback failed")
