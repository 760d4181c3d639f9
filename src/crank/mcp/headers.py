"""2026-07-28 routing headers: the base64 sentinel, and `Mcp-Param-*` headers declared by `x-mcp-header`.

A tool may mark a top-level-reachable string, integer or boolean property of its inputSchema with
`"x-mcp-header": "Name"`; clients then mirror that argument into an `Mcp-Param-Name` header so that
intermediaries can route on it. A server that reads the body MUST reject a header that disagrees
with it (transports §Custom Headers): 400 with -32020.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crank import _json
from crank.exceptions import ConfigurationError
from crank.types import JSONObject
from crank.wire.http import is_token

__all__ = ["HeaderParam", "decode_header_value", "find_header_params", "param_header_mismatch"]

_HEADER_TYPES = frozenset({"string", "integer", "boolean"})
_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")


def decode_header_value(value: str | None) -> str | None:
    """Undo the `=?base64?...?=` sentinel; None for a malformed (or non-canonical) payload."""
    if value is None:
        return None
    value = value.strip()
    if not value.startswith("=?"):
        return value  # the common case: no sentinel, no regex
    match = _SENTINEL.match(value)
    if match is None:
        return value
    payload = match["payload"]
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded).decode() != payload:
            return None
        return decoded.decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


@dataclass(frozen=True, slots=True)
class HeaderParam:
    path: tuple[str, ...]
    header: str  # lowercase `mcp-param-<token>`
    display: str  # as declared, for messages
    type: str


def find_header_params(schema: JSONObject, *, tool_name: str) -> tuple[HeaderParam, ...]:
    """Every `x-mcp-header` declaration on the chain of `properties` from the root; checked at build time."""
    found: list[HeaderParam] = []
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        token = node.get("x-mcp-header")
        if token is not None and path:
            where = f"tool {tool_name!r}, property {'.'.join(path)!r}"
            if not isinstance(token, str) or not is_token(token):
                raise ConfigurationError(f"{where}: x-mcp-header must be an HTTP header token, got {token!r}")
            if node.get("type") not in _HEADER_TYPES:
                raise ConfigurationError(f"{where}: x-mcp-header is only allowed on string, integer or boolean")
            name = f"Mcp-Param-{token}"
            if any(param.header == name.lower() for param in found):
                raise ConfigurationError(f"{where}: x-mcp-header {token!r} is declared twice")
            found.append(HeaderParam(path, name.lower(), name, node["type"]))
        for key, child in (node.get("properties") or {}).items():
            stack.append(((*path, key), child))
    return tuple(found)


def _render(value: Any) -> str | None:
    """A scalar as its header text; None for anything a header cannot carry."""
    if isinstance(value, str | int | float):  # bool is an int
        return _json.as_text(value)
    return None


def _value_at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def param_header_mismatch(
    params: tuple[HeaderParam, ...], arguments: Mapping[str, Any], headers: Mapping[str, str]
) -> str | None:
    """Why the `Mcp-Param-*` headers disagree with the arguments, or None when they agree."""
    for param in params:
        raw = headers.get(param.header)
        value = _value_at(arguments, param.path)
        argument = ".".join(param.path)
        if value is None:
            if raw is not None:
                return f"{param.display} header is present but argument {argument!r} is absent"
            continue
        if raw is None:
            return f"{param.display} header is missing but argument {argument!r} is present"
        decoded = decode_header_value(raw)
        if decoded is None:
            return f"{param.display} header carries a malformed base64 value"
        if not _matches(param.type, value, decoded):
            return f"{param.display} header does not match argument {argument!r}"
    return None


def _matches(kind: str, value: Any, decoded: str) -> bool:
    if kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(decoded) == float(value)
        except ValueError:
            return False
    return decoded == _render(value)
