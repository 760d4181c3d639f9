from __future__ import annotations

from typing import Any

import pytest

from crank.exceptions import ConfigurationError, MappingError
from crank.gateway import InputMapping, OutputMapping
from crank.registry import RuntimeTool, tool_from_spec


def tool(**fields: Any) -> RuntimeTool:
    """Mappings as a published tool holds them: read from the flat form by the runtime view's loader."""
    return tool_from_spec({"tool_name": "x", "protocol": "http", "target": {"url": "http://x"}, **fields})


def compiled(rules: Any, method: str, url: str) -> InputMapping:
    return InputMapping.compile(tool(input_mapping=rules).input_mapping, method, url, where="tool 'x'")


def test_rules_defaults_and_url_placeholders() -> None:
    rules = [
        {"from": "user_id", "to": "path.id"},
        {"value": "2", "to": "header.X-Api-Version"},
        {"template": "{first} {last}", "to": "body.full_name"},
    ]
    mapping = compiled(rules, "POST", "http://x/orgs/{org}/users/{id}")
    parts = mapping.apply({"user_id": 7, "org": "acme", "first": "Olena", "last": "K", "note": "hi"})
    assert parts.path == {"id": 7, "org": "acme"}
    assert parts.headers == {"X-Api-Version": "2"}
    assert parts.body == {"full_name": "Olena K", "first": "Olena", "last": "K", "note": "hi"}


def test_header_values_are_written_as_in_the_query() -> None:
    rules = [{"from": name, "to": f"header.X-{name}"} for name in ("flag", "ids", "count", "missing")]
    parts = compiled(rules, "GET", "http://x").apply({"flag": True, "ids": [1, 2], "count": 3, "missing": None})
    assert parts.headers == {"X-flag": "true", "X-ids": "[1,2]", "X-count": "3"}


def test_get_sends_unmapped_arguments_as_query() -> None:
    parts = compiled(None, "GET", "http://x/users").apply({"limit": 5})
    assert parts.query == {"limit": 5} and parts.body is None


def test_whole_body_rule() -> None:
    parts = compiled([{"from": "payload", "to": "body"}], "PUT", "http://x").apply({"payload": [1, 2]})
    assert parts.body == [1, 2]


def test_template_with_a_missing_argument_is_a_mapping_error() -> None:
    mapping = compiled([{"template": "{a}-{b}", "to": "header.X"}], "GET", "http://x")
    with pytest.raises(MappingError, match="'b'"):
        mapping.apply({"a": 1})


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("nope", r"input_mapping: Input should be a valid list"),
        ([{"from": "a"}], r"input_mapping\[0\]\.to: Field required"),
        ([{"from": "a", "value": 1, "to": "body"}], r"input_mapping\[0\]: a rule .* exactly one of"),
        ([{"value": None, "to": "body"}, {"template": 3, "to": "body"}], r"input_mapping\[1\]\.template: .*string"),
        ([{"from": "a", "to": "cookie.x"}], "path.<name>"),
        ([{"from": "a", "to": "query"}], "path.<name>"),
        ([{"template": "{", "to": "body.x"}], "not a valid format string"),
        ([{"from": "a", "to": "header.X Tenant"}], "not a valid header name"),
    ],
)
def test_bad_input_mapping_names_the_rule(rules: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        compiled(rules, "GET", "http://x")
    assert str(caught.value).startswith("tool 'x': ")


def test_output_select_rename_and_cap() -> None:
    spec = tool(output_mapping={"select": "data.items", "rename": {"n": "name"}, "max_items": 2}).output_mapping
    mapping = OutputMapping.compile(spec, where="t")
    value, omitted = mapping.apply({"data": {"items": [{"n": "a"}, {"n": "b"}, {"n": "c"}]}})
    assert value == [{"name": "a"}, {"name": "b"}] and omitted == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"select": "[["}, "not valid JMESPath"),
        ({"max_items": 0}, r"output_mapping\.max_items: Input should be greater than or equal to 1"),
        ({"max_items": "3"}, r"output_mapping\.max_items: Input should be a valid integer"),
        ({"other": 1}, r"output_mapping\.other: Extra inputs are not permitted"),
    ],
)
def test_bad_output_mapping(spec: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OutputMapping.compile(tool(output_mapping=spec).output_mapping, where="tool 'x'")
