from __future__ import annotations

from typing import Any

import pytest

from crank.exceptions import ConfigurationError, MappingError
from crank.gateway import InputMapping, OutputMapping


def test_rules_defaults_and_url_placeholders() -> None:
    rules = [
        {"from": "user_id", "to": "path.id"},
        {"value": "2", "to": "header.X-Api-Version"},
        {"template": "{first} {last}", "to": "body.full_name"},
    ]
    mapping = InputMapping.compile(rules, "POST", "http://x/orgs/{org}/users/{id}", where="t")
    parts = mapping.apply({"user_id": 7, "org": "acme", "first": "Olena", "last": "K", "note": "hi"})
    assert parts.path == {"id": 7, "org": "acme"}
    assert parts.headers == {"X-Api-Version": "2"}
    assert parts.body == {"full_name": "Olena K", "first": "Olena", "last": "K", "note": "hi"}


def test_header_values_are_written_as_in_the_query() -> None:
    rules = [{"from": name, "to": f"header.X-{name}"} for name in ("flag", "ids", "count", "missing")]
    parts = InputMapping.compile(rules, "GET", "http://x", where="t").apply(
        {"flag": True, "ids": [1, 2], "count": 3, "missing": None}
    )
    assert parts.headers == {"X-flag": "true", "X-ids": "[1,2]", "X-count": "3"}


def test_get_sends_unmapped_arguments_as_query() -> None:
    parts = InputMapping.compile(None, "GET", "http://x/users", where="t").apply({"limit": 5})
    assert parts.query == {"limit": 5} and parts.body is None


def test_whole_body_rule() -> None:
    parts = InputMapping.compile([{"from": "payload", "to": "body"}], "PUT", "http://x", where="t").apply(
        {"payload": [1, 2]}
    )
    assert parts.body == [1, 2]


def test_template_with_a_missing_argument_is_a_mapping_error() -> None:
    mapping = InputMapping.compile([{"template": "{a}-{b}", "to": "header.X"}], "GET", "http://x", where="t")
    with pytest.raises(MappingError, match="'b'"):
        mapping.apply({"a": 1})


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("nope", "must be a list"),
        ([{"from": "a"}], "'to'"),
        ([{"from": "a", "value": 1, "to": "body"}], "exactly one"),
        ([{"from": "a", "to": "cookie.x"}], "path.<name>"),
        ([{"from": "a", "to": "query"}], "path.<name>"),
        ([{"template": "{", "to": "body.x"}], "not a valid format string"),
        ([{"from": "a", "to": "header.X Tenant"}], "not a valid header name"),
    ],
)
def test_bad_input_mapping_names_the_rule(rules: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        InputMapping.compile(rules, "GET", "http://x", where="tool 'x'")
    assert "tool 'x'" in str(caught.value)


def test_output_select_rename_and_cap() -> None:
    mapping = OutputMapping.compile({"select": "data.items", "rename": {"n": "name"}, "max_items": 2}, where="t")
    value, omitted = mapping.apply({"data": {"items": [{"n": "a"}, {"n": "b"}, {"n": "c"}]}})
    assert value == [{"name": "a"}, {"name": "b"}] and omitted == 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [({"select": "[["}, "not valid JMESPath"), ({"max_items": 0}, "positive"), ({"other": 1}, "only")],
)
def test_bad_output_mapping(spec: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OutputMapping.compile(spec, where="t")
