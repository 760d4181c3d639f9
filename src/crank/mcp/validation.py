"""Tool arguments against the tool's inputSchema, and answers against its outputSchema: compiled once per
catalog, every violation reported with its path.

jsonschema-rs (Rust) is used for speed: `is_valid` is the hot path, `iter_errors` only runs for
input that already failed. Network `$ref`s are never fetched (2026-07-28 tools.mdx: servers MUST NOT
auto-dereference network references), so the validators are built offline.

Answers are checked as the official SDK client checks them (`jsonschema`, formats not asserted), so
that a client never refuses `structuredContent` that passed here. Their violations never quote a value
(`mask`): they are logged, and an answer's values are the upstream's data.

Patterns (`pattern`, `patternProperties`) run on a linear-time engine (Rust's `regex`, `PATTERN_OPTIONS`): a
backtracking engine spends seconds on one string against a pattern like `^(a|aa)+\\1b$`, and the strings are
a client's (or an upstream's). A schema whose pattern that engine cannot compile (backreferences, look-around,
or a pattern over `MAX_PATTERN_BYTES` compiled) is refused when its catalog is built, that is at publish,
naming the tool and the place (`checkable_pattern` lets an importer leave such patterns out beforehand).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jsonschema_rs

from crank.exceptions import ConfigurationError, Violation
from crank.schema.paths import json_path
from crank.types import JSONObject

__all__ = [
    "MAX_OUTPUT_VIOLATIONS",
    "MAX_PATTERN_BYTES",
    "PATTERN_OPTIONS",
    "ArgumentValidator",
    "OutputValidator",
    "Violation",
    "checkable_pattern",
    "json_path",
]

MAX_OUTPUT_VIOLATIONS = 20
"""The most violations an answer's check reports: a drifted list of 10,000 items fails on every item."""
MAX_PATTERN_BYTES = 1024 * 1024
"""The most memory one compiled pattern (and its lazy DFA) may take: `(a{1000}){1000}` is refused."""
PATTERN_OPTIONS = jsonschema_rs.RegexOptions(size_limit=MAX_PATTERN_BYTES, dfa_size_limit=MAX_PATTERN_BYTES)
"""Every schema's patterns run on Rust's `regex` crate: matching takes time linear in the string's length."""
_UNCHECKABLE = (
    "cannot be checked in linear time: backreferences and look-around are not supported (a backtracking "
    f"engine can take seconds on one string), nor patterns that compile to more than {MAX_PATTERN_BYTES >> 20} "
    "MiB; rewrite it without them"
)


@lru_cache(maxsize=4096)
def checkable_pattern(pattern: str) -> bool:
    """Whether the validators can check `pattern` (`PATTERN_OPTIONS`): linear-time syntax, compiled within bounds."""
    try:
        jsonschema_rs.validator_for({"pattern": pattern}, pattern_options=PATTERN_OPTIONS, offline=True)
    except (jsonschema_rs.ValidationError, ValueError):
        return False
    return True


def _compile(schema: JSONObject, which: str, tool_name: str, **options: Any) -> Any:
    try:
        return jsonschema_rs.validator_for(schema, offline=True, pattern_options=PATTERN_OPTIONS, **options)
    except jsonschema_rs.ValidationError as exc:
        place = list(exc.instance_path)
        if place and (place[-1] == "pattern" or (len(place) > 1 and place[-2] == "patternProperties")):
            where = "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in place)
            raise ConfigurationError(f"tool {tool_name!r}: {which} pattern at {where} {_UNCHECKABLE}") from None
        first_line = str(exc).splitlines()[0]
        raise ConfigurationError(f"tool {tool_name!r}: {which} is not a valid JSON Schema: {first_line}") from None
    except (jsonschema_rs.ReferencingError, ValueError) as exc:
        first_line = str(exc).splitlines()[0]
        raise ConfigurationError(f"tool {tool_name!r}: {which} is not a valid JSON Schema: {first_line}") from None


class ArgumentValidator:
    """A compiled validator for one tool's arguments."""

    __slots__ = ("_validator",)

    def __init__(self, schema: JSONObject, *, tool_name: str) -> None:
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise ConfigurationError(f"tool {tool_name!r}: inputSchema must be a JSON Schema with type 'object'")
        self._validator = _compile(schema, "inputSchema", tool_name)

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
        self._validator = _compile(schema, "outputSchema", tool_name, validate_formats=False, mask="value")
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
