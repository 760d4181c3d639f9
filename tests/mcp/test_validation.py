from __future__ import annotations

from crank.mcp.validation import ArgumentValidator, json_path

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
