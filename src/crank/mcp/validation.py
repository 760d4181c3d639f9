"""Tool arguments against the tool's inputSchema, and answers against its outputSchema: compiled once per
catalog, every violation reported with its path.

jsonschema-rs (Rust) is used for speed: `is_valid` is the hot path, `iter_errors` only runs for
input that already failed. Network `$ref`s are never fetched (2026-07-28 tools.mdx: servers MUST NOT
auto-dereference network references), so the validators are built offline.

Answers are checked as the official SDK client checks them (`jsonschema`, formats not asserted), so
that a client never refuses `structuredContent` that passed here. Their violations never quote a value
(`mask`): they are logged, and an answer's values are the upstream's data.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from crank.exceptions import ConfigurationError, Violation
from crank.schema.paths import json_path
from crank.types import JSONObject

__all__ = ["MAX_OUTPUT_VIOLATIONS", "ArgumentValidator", "OutputValidator", "Violation", "json_path"]

MAX_OUTPUT_VIOLATIONS = 20
"""The most violations an answer's check reports: a drifted list of 10,000 items fails on every item."""


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


class OutputValidator:
    """A compiled validator for one tool's `structuredContent`."""

    __slots__ = ("_validator", "is_valid")

    def __init__(self, schema: JSONObject, *, tool_name: str) -> None:
        try:
            self._validator = jsonschema_rs.validator_for(schema, offline=True, validate_formats=False, mask="value")
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
            first_line = str(exc).splitlines()[0]
            raise ConfigurationError(
                f"tool {tool_name!r}: outputSchema is not a valid JSON Schema: {first_line}"
            ) from None
        self.is_valid = self._validator.is_valid
        """`is_valid(value)`: the hot path, bound once (no attribute lookup per call)."""

    def violations(self, value: Any, *, limit: int = MAX_OUTPUT_VIOLATIONS) -> tuple[list[Violation], bool]:
        """The first `limit` violations (paths and value-free messages) and whether there were more."""
        found: list[Violation] = []
        for error in self._validator.iter_errors(value):
            found.extend(_explain(error))
            if len(found) > limit:
                return found[:limit], True
        return found, False


def _explain(error: Any) -> list[Violation]:
    """Point a violation at the property it is about, not at its parent object."""
    parent = list(error.instance_path)
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        return [Violation(json_path([*parent, kind.property]), "required property is missing")]
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
        return [Violation(json_path([*parent, name]), "unknown property") for name in kind.unexpected]
    return [Violation(json_path(parent), error.message)]
