from __future__ import annotations

from typing import Any

import pytest
import toon_format

from crank.mcp.formats import UnknownFormatError, check_format, render

ROWS = [{"id": 1, "name": "a|b"}, {"id": 2, "name": "c\nd"}]


def test_json_is_compact() -> None:
    assert render({"a": [1, 2]}, "json") == '{"a":[1,2]}'


def test_pretty_json_is_indented() -> None:
    assert render({"a": 1}, "pretty_json") == '{\n  "a": 1\n}'


def test_markdown_table_for_homogeneous_rows_escapes_cells() -> None:
    assert render(ROWS, "markdown") == "| id | name |\n| --- | --- |\n| 1 | a\\|b |\n| 2 | c d |"


@pytest.mark.parametrize("value", [[{"a": 1}, {"b": 2}], [{"a": {"nested": 1}}], {"a": 1}, [1, 2], []])
def test_markdown_falls_back_to_json(value: Any) -> None:
    assert render(value, "markdown").startswith("```json\n")


@pytest.mark.parametrize(("value", "text"), [("hi", "hi"), (3, "3"), (1.5, "1.5"), (True, "true"), (None, "")])
def test_plain_scalars(value: Any, text: str) -> None:
    assert render(value, "plain") == text
    assert render(value, "markdown") == text


def test_plain_structures_are_json() -> None:
    assert render([1, {"a": 2}], "plain") == '[1,{"a":2}]'


def test_toon_uses_the_official_encoder() -> None:
    text = render(ROWS, "toon")
    assert text == toon_format.encode(ROWS)
    assert toon_format.decode(text) == ROWS


def test_unknown_format_lists_allowed() -> None:
    with pytest.raises(UnknownFormatError, match=r"'yaml' in here; allowed: json, pretty_json, markdown, plain, toon"):
        check_format("yaml", "here")
