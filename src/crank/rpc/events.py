"""The rpc pipeline's events: request, response, error and post_response.

`post_response` fires after the response is sent, once per executed call (also per call in a batch),
never for an error or a cached result. `error` is always logged as well.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["EVENTS", "Event", "Events"]

logger = logging.getLogger("crank.rpc")

EventName = Literal["request", "response", "error", "post_response"]
EVENTS: tuple[EventName, ...] = ("request", "response", "error", "post_response")
Handler = Callable[["Event"], Awaitable[None] | None]


@dataclass
class Event:
    name: EventName
    method: str
    version: str
    source: Literal["rpc", "mcp"]
    request_id: str
    params: dict[str, Any]
    result: Any = None
    error: BaseException | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Events:
    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {name: [] for name in EVENTS}

    def on(self, name: EventName, handler: Handler) -> Handler:
        if name not in self._handlers:
            raise ValueError(f"unknown event {name!r}; events: {', '.join(EVENTS)}")
        self._handlers[name].append(handler)
        return handler

    def wants(self, name: EventName) -> bool:
        return bool(self._handlers[name])

    async def emit(self, event: Event) -> None:
        for handler in self._handlers[event.name]:
            outcome = handler(event)
            if inspect.isawaitable(outcome):
                await outcome
