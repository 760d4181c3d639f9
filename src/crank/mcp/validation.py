"""Tool arguments against the tool's inputSchema: compiled once per catalog, every violation reported.

jsonschema-rs (Rust) is used for speed: `is_valid` is the hot path, `iter_errors` only runs for
input that already failed. Network `$ref`s are never fetched (2026-07-28 tools.mdx: servers MUST NOT
auto-dereference network references), so the validator is built offline.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from crank.exceptions import ConfigurationError, Violation
from crank.schema.paths import json_path
from crank.types import JSONObject

__all__ = ["ArgumentValidator", "Violation", "json_path"]


class ArgumentValidator:
    """A compiled validator for one tool's arguments."""

    __slots__ = ("_validator",)

    def __init__(self, schema: JSONObject, *, tool_name: str) -> None:
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise ConfigurationError(f"tool {tool_name!r}: inputSchema must be a JSON Schema with type 'object'")
        try:
            self._validator = jsonschema_rs.validator_for(schema, offline=True)
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
            first_line = str(exc).splitlines()[0]
            raise ConfigurationError(
                f"tool {tool_name!r}: inputSchema is not a valid JSON Schema: {first_line}"
            ) from None

    def violations(self, arguments: Any) -> list[Violation]:
        """Every violation, or an empty list when the arguments are valid."""
        if self._validator.is_valid(arguments):
            return []
        found: list[Violation] = []
        for error in self._validator.iter_errors(arguments):
            found.extend(_explain(error))
        return found


def _explain(error: Any) -> list[Violation]:
    """Point a violation at the property it is about, not at its parent object."""
    parent = list(error.instance_path)
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        return [Violation(json_path([*parent, kind.property]), "required property is missing")]
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
        return [Violation(json_path([*parent, name]), "unknown property") for name in kind.unexpected]
    return [Violation(json_path(parent), error.message)]
