from __future__ import annotations

from typing import Any

import pytest

from crank.exceptions import ConfigurationError
from crank.mcp.validation import ArgumentValidator, OutputValidator, checkable_pattern, json_path

SCHEMA = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "limit": {"type": "integer", "minimum": 1},
    },
    "required": ["items"],
    "additionalProperties": False,
}


def test_valid_arguments_have_no_violations() -> None:
    assert ArgumentValidator(SCHEMA, tool_name="t").violations({"items": [{"name": "a"}]}) == []


def test_every_violation_is_reported_with_its_path() -> None:
    found = ArgumentValidator(SCHEMA, tool_name="t").violations(
        {"items": [{"name": 1}, {"nam": "x"}], "limit": 0, "extra": True}
    )
    paths = sorted(v.path for v in found)
    assert paths == ["$.extra", "$.items[0].name", "$.items[1].nam", "$.items[1].name", "$.limit"]
    messages = {v.path: v.message for v in found}
    assert messages["$.extra"] == "unknown property"
    assert messages["$.items[1].name"] == "required property is missing"
    assert "integer" not in messages["$.limit"] and "1" in messages["$.limit"]


def test_json_path_quotes_keys_that_are_not_identifiers() -> None:
    assert json_path(["a b", 0, "c"]) == "$['a b'][0].c"


BACKREFERENCE = r"^(a|aa)+\1b$"  # on a backtracking engine: 40-60 ms per distinct string of a few dozen a's


@pytest.mark.parametrize("kind", [ArgumentValidator, OutputValidator], ids=["inputSchema", "outputSchema"])
def test_a_pattern_that_cannot_be_checked_in_linear_time_is_refused_naming_its_place(kind: type[Any]) -> None:
    schema = {"type": "object", "properties": {"codes": {"type": "array", "items": {"pattern": BACKREFERENCE}}}}
    which = "inputSchema" if kind is ArgumentValidator else "outputSchema"
    with pytest.raises(ConfigurationError) as refused:
        kind(schema, tool_name="get_item")
    message = str(refused.value)
    assert message.startswith(f"tool 'get_item': {which} pattern at /properties/codes/items/pattern cannot be ")
    assert "\n" not in message and "backreferences and look-around" in message
    for uncheckable in (r"^(?!aws:).+$", "(a{1000}){1000}"):  # look-around; over the compiled size
        with pytest.raises(ConfigurationError, match="cannot be checked in linear time"):
            kind({"type": "object", "patternProperties": {uncheckable: {}}}, tool_name="t")
        assert not checkable_pattern(uncheckable)


def test_the_patterns_kept_are_checked_in_time_linear_in_the_string() -> None:
    # The classic blow-up for a backtracking engine (`(a|aa)+` on a long run of a's that fails at its end) is
    # decided by the linear engine; the count of steps is not timed here (bench/patterns.py measures it).
    validator = ArgumentValidator(
        {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a|aa)+b$"}}}, tool_name="t"
    )
    assert validator.violations({"code": "a" * 40 + "b"}) == []
    assert [v.path for v in validator.violations({"code": "a" * 100_000 + "c"})] == ["$.code"]
    assert checkable_pattern("^[a-z]{2,8}$") and checkable_pattern(r"^\p{L}+$")
