"""A JSON-RPC method as registered: the callable, its settings, and its schemas (computed once)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crank.exceptions import ConfigurationError
from crank.schema import MethodSchemas

__all__ = ["MCP", "Method", "RateLimit"]

_PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(second|minute|hour|day)s?\s*$")


@dataclass(frozen=True)
class RateLimit:
    """At most `calls` calls per `seconds`, counted per method. Parse "10/minute" with `parse`."""

    calls: int
    seconds: float

    def __post_init__(self) -> None:
        if self.calls < 1 or not self.seconds > 0:
            raise ConfigurationError(f"rate limit {self.calls}/{self.seconds:g} s: at least 1 call in a window of more "
                                     "than 0 seconds")  # fmt: skip

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        match = _RATE.match(text)
        if match is None:
            raise ConfigurationError(
                f"rate limit {text!r}: expected '<calls>/<period>', e.g. '10/minute' or '100/5minutes'"
            )
        count, multiplier, period = match.groups()
        return cls(int(count), _PERIODS[period] * int(multiplier or 1))


@dataclass(frozen=True)
class MCP:
    """A method's MCP settings, kept as metadata here and read by the MCP layer's rpc source.

    Giving them at all is the method's opt-in; `enabled=False` opts out. The `*_hint` fields are MCP
    tool annotations (None: not set). `format` is a result format name (json, pretty_json, markdown,
    plain, toon). `transformer` reshapes the normalized result for MCP only (never for /rpc);
    `output_schema` (a type or a literal JSON Schema) describes what MCP clients then receive.
    """

    enabled: bool = True
    title: str | None = None
    description: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None
    format: str | None = None
    output_schema: Any = None
    transformer: Callable[[Any], Any] | None = None


@dataclass
class Method:
    name: str
    func: Callable[..., Any]
    schemas: MethodSchemas
    groups: tuple[str, ...]
    versions: tuple[str, ...]
    description: str | None = None
    deprecated: bool = False
    roles: frozenset[str] = frozenset()
    cache_ttl: float | None = None
    lock: bool = False
    rate_limit: RateLimit | None = None
    mcp: MCP | None = None
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        call = self.func if inspect.isfunction(self.func) else type(self.func).__call__
        self.is_async = inspect.iscoroutinefunction(call)

    @property
    def text(self) -> str | None:
        """The description: the decorator's, else the docstring's summary and body."""
        if self.description:
            return self.description
        parts = [part for part in (self.schemas.summary, self.schemas.description) if part]
        return "\n\n".join(parts) or None
