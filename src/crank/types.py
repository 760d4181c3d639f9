"""Type aliases shared by every layer: ASGI callables and JSON values."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

__all__ = ["ASGIApp", "JSONObject", "JSONValue", "Message", "Receive", "Scope", "Send"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

JSONValue: TypeAlias = Any
"""Any value that JSON can carry; kept as Any because Python cannot spell a recursive JSON type cheaply."""
JSONObject: TypeAlias = dict[str, Any]
