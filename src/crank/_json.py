"""One place for JSON encoding, so the fast library can be swapped in one line.

orjson is used everywhere: it is several times faster than the stdlib on the hot paths
(see docs/benchmarks.md), emits compact UTF-8 bytes and rejects NaN/Infinity the way JSON does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, Final

import orjson

__all__ = [
    "MAX_DEPTH",
    "ORJSON_DEPTH_MESSAGE",
    "ORJSON_MAX_DEPTH",
    "JSONDecodeError",
    "JSONDepthError",
    "as_text",
    "dumps",
    "dumps_pretty",
    "dumps_sorted",
    "loads",
    "loads_bounded",
]

JSONDecodeError = orjson.JSONDecodeError

_PRETTY = orjson.OPT_INDENT_2
_NON_STR_KEYS = orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes. Non-string keys (`{1: "a"}`) become strings, as `json` does."""
    try:
        # Without OPT_NON_STR_KEYS orjson is about twice as fast; only a dict with such keys pays the retry.
        return orjson.dumps(value)
    except TypeError:
        return orjson.dumps(value, option=_NON_STR_KEYS)


def dumps_pretty(value: Any) -> bytes:
    """JSON indented by two spaces."""
    return orjson.dumps(value, option=_PRETTY | _NON_STR_KEYS)


def dumps_sorted(value: Any) -> bytes:
    """Compact JSON with sorted keys: equal values give equal bytes."""
    return orjson.dumps(value, option=_NON_STR_KEYS | orjson.OPT_SORT_KEYS)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


MAX_DEPTH: Final = 64
"""The deepest nesting of arrays and objects a request may carry (orjson reads up to 1,024 levels but
writes only 255: a deeper request could be read and never answered)."""

ORJSON_MAX_DEPTH: Final = 1024
"""The deepest nesting orjson reads; deeper is its `JSONDecodeError` with `ORJSON_DEPTH_MESSAGE`.
`loads_bounded` relies on both (tests/test_json.py pins them: an orjson that changes either fails there)."""
ORJSON_DEPTH_MESSAGE: Final = "depth limit exceeded"

# How `loads_bounded` checks the depth, by cost (docs/benchmarks.md, "The depth check"): counting brackets costs
# about 0.3 us per KiB and walking the parsed value about 0.75 us per array or object, while orjson's own limit,
# moved down by wrapping the body, costs a fixed ~90 us. A body up to _COUNTED_BYTES is counted; one with up to
# _WALKED_BRACKETS brackets is walked; any other body is wrapped, whatever its size or shape.
_COUNTED_BYTES: Final = 128 * 1024
_WALKED_BRACKETS: Final = 128


class JSONDepthError(ValueError):
    """JSON nested deeper than allowed; the message says the limit."""


def loads_bounded(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """`loads`, refusing values nested more than `max_depth` levels (less than `ORJSON_MAX_DEPTH`) with
    `JSONDepthError`, at a cost bounded by the body's size, never by how many arrays and objects it holds.

    A body with fewer brackets than the limit cannot be that deep: the common request pays one length check
    or two byte counts; a few brackets are walked after parsing; anything else is parsed inside as many
    arrays as orjson's own limit leaves, so that orjson refuses it past `max_depth`."""
    if not 0 < max_depth < ORJSON_MAX_DEPTH:
        raise ValueError(f"max_depth must be between 1 and {ORJSON_MAX_DEPTH - 1}")
    size = len(data)
    # Deeper than the limit takes more than that many brackets, each opened and closed: a shorter body, or one
    # with fewer brackets, cannot be.
    if size <= 2 * max_depth:
        return orjson.loads(data)
    if size <= _COUNTED_BYTES:
        brackets = data.count(b"[") + data.count(b"{")
        if brackets <= max_depth:
            return orjson.loads(data)
        if brackets <= _WALKED_BRACKETS:
            return _walked(data, max_depth)
    return _wrapped(data, max_depth)


def _walked(data: bytes, max_depth: int) -> Any:
    value = orjson.loads(data)
    if _depth_over(value, max_depth):
        raise JSONDepthError(f"JSON nested more than {max_depth} levels deep")
    return value


def _wrapped(data: bytes, max_depth: int) -> Any:
    """The body parsed inside `ORJSON_MAX_DEPTH - max_depth` arrays: orjson refuses it when the body itself is
    nested more than `max_depth` levels. Each added array must hold exactly one value, the next one in: a body
    that is not one JSON value (`1],[2`) cannot pass for one. One parse, whatever the body: a refusal is told
    from orjson's error, never by parsing again."""
    opening, closing = _wrap(max_depth)
    try:
        value = orjson.loads(b"".join((opening, data, closing)))
    except orjson.JSONDecodeError as refused:
        raise _unwrapped(refused, len(opening), max_depth) from None
    for _ in range(len(opening)):
        if value.__class__ is not list or len(value) != 1:
            raise orjson.JSONDecodeError("the body is not one JSON value", "", 0)
        value = value[0]
    return value


def _unwrapped(refused: orjson.JSONDecodeError, padding: int, max_depth: int) -> ValueError:
    """orjson's error about a wrapped body, about the body: too deep, or its message at the body's own position
    (at the body's end when the error is past it)."""
    if refused.msg == ORJSON_DEPTH_MESSAGE:
        return JSONDepthError(f"JSON nested more than {max_depth} levels deep")
    doc: str = refused.doc
    body = doc[padding : len(doc) - padding] if len(doc) >= 2 * padding else doc
    return orjson.JSONDecodeError(refused.msg, body, min(max(refused.pos - padding, 0), len(body)))


@functools.cache  # one pair per depth limit, of which there are fewer than ORJSON_MAX_DEPTH
def _wrap(max_depth: int) -> tuple[bytes, bytes]:
    padding = ORJSON_MAX_DEPTH - max_depth
    return b"[" * padding, b"]" * padding


def _depth_over(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def as_text(value: Any) -> str:
    """A JSON value written as text, where a path, a query, a header or a plain result needs one: strings
    as they are, booleans as JSON writes them (`true`, not Python's `True`), null as nothing, numbers as
    their digits, objects and arrays as compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, int | float):
        return str(value)
    return dumps(value).decode()
