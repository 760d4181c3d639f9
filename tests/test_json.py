from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crank import _json


def test_non_string_keys_become_strings() -> None:
    assert _json.dumps({1: "a", "b": [{2: 3}]}) == b'{"1":"a","b":[{"2":3}]}'


def test_unserializable_values_still_fail() -> None:
    with pytest.raises(TypeError):
        _json.dumps({"a": object()})


# -- loads_bounded: the depth limit at a cost bounded by the body's size ---------------------------------------

LIMIT = _json.MAX_DEPTH


def nested(depth: int, inner: bytes = b"1") -> bytes:
    """`depth` levels of arrays and objects, alternating, around `inner`."""
    for level in range(depth):
        inner = b"[" + inner + b"]" if level % 2 else b'{"k":' + inner + b"}"
    return inner


def padded(body: bytes, size: int) -> bytes:
    """`body` inside an object with a string member making it about `size` bytes (brackets in a string
    count for nothing)."""
    return b'{"pad":"' + b"[{" * (size // 2) + b'","body":' + body + b"}"


# Each way the check takes: a short body; a counted one with a few brackets (walked); a counted one with many
# (wrapped); a large one (wrapped, whatever its brackets).
SHAPES = {
    "short": lambda body: body,
    "counted, walked": lambda body: body + b" " * 200,
    "counted, wrapped": lambda body: padded(body, 1000),
    "large": lambda body: padded(body, 300_000),
}


def test_orjson_reads_the_depth_loads_bounded_relies_on_and_no_deeper() -> None:
    assert orjson.loads(b"[" * _json.ORJSON_MAX_DEPTH + b"]" * _json.ORJSON_MAX_DEPTH)
    with pytest.raises(orjson.JSONDecodeError) as refused:
        orjson.loads(b"[" * (_json.ORJSON_MAX_DEPTH + 1) + b"]" * (_json.ORJSON_MAX_DEPTH + 1))
    assert refused.value.msg == _json.ORJSON_DEPTH_MESSAGE


def test_the_shortest_bodies_are_parsed_as_they_are_and_still_checked() -> None:
    # No body of 2 x 64 bytes or less can be deeper than 64 levels; the shortest that is, is refused.
    assert _json.loads_bounded(b"[" * LIMIT + b"]" * LIMIT) == orjson.loads(b"[" * LIMIT + b"]" * LIMIT)
    with pytest.raises(_json.JSONDepthError):
        _json.loads_bounded(b"[" * (LIMIT + 1) + b"]" * (LIMIT + 1))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_body_at_the_depth_limit_is_read_and_one_past_it_is_refused(shape: str) -> None:
    deepest = SHAPES[shape](nested(LIMIT - 1))  # in "padded", the body sits one level down
    if shape in ("short", "counted, walked"):
        deepest = SHAPES[shape](nested(LIMIT))
    assert _json.loads_bounded(deepest) == orjson.loads(deepest)
    too_deep = deepest.replace(b"1", b"[1]", 1) if b'"pad"' not in deepest else deepest.replace(b":1}", b":[1]}", 1)
    with pytest.raises(_json.JSONDepthError, match=f"more than {LIMIT} levels"):
        _json.loads_bounded(too_deep)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("broken", [b"1],[2", b"[1]]", b"[[1]", b"1 2", b'{"a":}', b"]" * 70 + b"[" * 70])
def test_a_body_that_is_not_one_json_value_is_a_decode_error_in_every_shape(shape: str, broken: bytes) -> None:
    body = SHAPES[shape](broken)
    with pytest.raises(orjson.JSONDecodeError) as refused:
        _json.loads_bounded(body)
    assert not isinstance(refused.value, _json.JSONDepthError)


@pytest.mark.parametrize(
    "body",
    [b"[" + b"[]," * 200 + b"[]],[1]", b"1],[" + b"0," * 70_000 + b"0"],
    ids=["counted", "large"],
)
def test_two_values_that_the_wrapping_arrays_would_join_are_still_not_one(body: bytes) -> None:
    # Wrapped in arrays, these parse: only the check that each wrapping array holds one value refuses them.
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)
    with pytest.raises(orjson.JSONDecodeError, match="not one JSON value"):
        _json.loads_bounded(body)


def test_a_body_past_orjsons_own_depth_is_a_depth_error_too() -> None:
    with pytest.raises(_json.JSONDepthError):
        _json.loads_bounded(b"[" * 5000 + b"]" * 5000)


def test_a_decode_error_of_a_wrapped_body_reports_the_bodys_own_position() -> None:
    body = padded(b"[1,]", 300_000)
    with pytest.raises(orjson.JSONDecodeError) as plain:
        orjson.loads(body)
    with pytest.raises(orjson.JSONDecodeError) as wrapped:
        _json.loads_bounded(body)
    assert str(wrapped.value) == str(plain.value)


def test_a_large_body_of_many_arrays_is_never_walked_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """4 MiB of empty arrays took a second to walk after a quarter second of parsing: the check must cost
    what the parse costs, whatever the body holds."""

    def walked(value: object, limit: int) -> bool:
        raise AssertionError("the parsed value was walked")

    monkeypatch.setattr(_json, "_depth_over", walked)
    body = b"[" + b"[]," * 400_000 + b"[]]"
    assert len(_json.loads_bounded(body)) == 400_001
    with pytest.raises(_json.JSONDepthError):
        _json.loads_bounded(b"[" + b"[]," * 400_000 + nested(LIMIT) + b"]")


def test_the_depth_limit_stays_below_orjsons_own() -> None:
    with pytest.raises(ValueError, match="between 1 and 1023"):
        _json.loads_bounded(b"[]", max_depth=_json.ORJSON_MAX_DEPTH)
    deepest = _json.ORJSON_MAX_DEPTH - 1
    assert _json.loads_bounded(nested(deepest), max_depth=deepest)
    with pytest.raises(_json.JSONDepthError):
        _json.loads_bounded(nested(deepest + 1), max_depth=deepest)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(alphabet='ab[]{}",:\\ ', max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=40,
)


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@given(value=json_values, wraps=st.integers(0, 8), limit=st.integers(1, 12), shape=st.sampled_from(sorted(SHAPES)))
def test_loads_bounded_reads_what_orjson_reads_or_refuses_exactly_what_is_too_deep(
    value: object, wraps: int, limit: int, shape: str
) -> None:
    for _ in range(wraps):
        value = [value]
    body = SHAPES[shape](_json.dumps(value))
    expected = orjson.loads(body)
    if depth(expected) > limit:
        with pytest.raises(_json.JSONDepthError):
            _json.loads_bounded(body, max_depth=limit)
    else:
        assert _json.loads_bounded(body, max_depth=limit) == expected
