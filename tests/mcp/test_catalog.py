from __future__ import annotations

import json
import math
from typing import Any

import pytest

from crank.exceptions import ConfigurationError
from crank.mcp import CallContext, Catalog, Icon, Tool, ToolAnnotations, Translations, estimate_tokens
from crank.mcp.catalog import InvalidCursorError


async def noop(arguments: dict[str, Any], context: CallContext) -> Any:
    return None


def tool(name: str, **options: Any) -> Tool:
    return Tool(name=name, invoker=noop, **options)


@pytest.mark.parametrize("name", ["", "has space", "a,b", "x" * 129, "ünïcode", "slash/name"])
def test_bad_tool_name_is_refused_when_the_catalog_is_built(name: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Catalog([tool("good"), tool(name)])
    assert repr(name) in str(caught.value)


@pytest.mark.parametrize("name", ["a", "Catalog.search", "user-get_v2", "x" * 128])
def test_good_tool_names_are_accepted(name: str) -> None:
    assert Catalog([tool(name)]).get(name) is not None


def test_duplicate_tool_name_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'dup': name is used by more than one tool"):
        Catalog([tool("dup"), tool("dup")])


def test_unknown_tool_format_is_refused_with_the_allowed_list() -> None:
    with pytest.raises(ConfigurationError, match="'xml'.*allowed: json, pretty_json, markdown, plain, toon"):
        Catalog([tool("t", format="xml")])


def test_input_schema_must_be_an_object_schema() -> None:
    with pytest.raises(ConfigurationError, match="'t': inputSchema must be a JSON Schema with type 'object'"):
        Catalog([tool("t", input_schema={"type": "string"})])


def test_invalid_input_schema_is_refused_naming_the_tool() -> None:
    with pytest.raises(ConfigurationError, match="'t': inputSchema is not a valid JSON Schema"):
        Catalog([tool("t", input_schema={"type": "object", "properties": {"a": {"type": "nope"}}})])


def test_network_refs_are_never_fetched() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}}
    with pytest.raises(ConfigurationError, match="'t'"):
        Catalog([tool("t", input_schema=schema)])


def test_wire_entry_leaves_out_unset_fields() -> None:
    catalog = Catalog([tool("bare")])
    assert catalog.tool_entries("en") == [
        {"name": "bare", "title": "bare", "inputSchema": {"type": "object", "additionalProperties": False}}
    ]


def test_wire_entry_carries_every_set_field() -> None:
    full = tool(
        "full",
        title="Full",
        description="Everything.",
        output_schema={"type": "object"},
        annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False),
        icons=(Icon("https://example.com/i.png", mime_type="image/png", sizes=("48x48",), theme="dark"),),
        meta={"example.com/x": 1},
    )
    (entry,) = Catalog([full]).tool_entries("en")
    assert entry["annotations"] == {"readOnlyHint": True, "destructiveHint": False}
    assert entry["icons"] == [
        {"src": "https://example.com/i.png", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"}
    ]
    assert entry["outputSchema"] == {"type": "object"} and entry["_meta"] == {"example.com/x": 1}


def test_annotations_with_only_none_are_left_out() -> None:
    (entry,) = Catalog([tool("t", annotations=ToolAnnotations())]).tool_entries("en")
    assert "annotations" not in entry


def test_translation_fallback_chain_per_field() -> None:
    group = {"uk": {"t": {"description": "group uk"}}, "en": {"t": {"title": "group en title"}}}
    base = {"uk": {"t": {"title": "base uk title"}}, "en": {"t": {"description": "base en"}}}
    catalog = Catalog([tool("t", title="own", description="own d")], translations=Translations(group, base))
    uk = catalog.tool_entries("uk")[0]
    # title: group+uk missing -> group+en wins before base+uk
    assert uk["title"] == "group en title"
    assert uk["description"] == "group uk"
    en = catalog.tool_entries("en")[0]
    assert en["description"] == "base en"


def test_tool_text_is_the_last_fallback() -> None:
    catalog = Catalog([tool("t", title="own", description="own d")], translations=Translations({"uk": {}}))
    assert catalog.tool_entries("uk")[0] == {**catalog.tool_entries("en")[0]}
    assert catalog.tool_entries("uk")[0]["title"] == "own"


def test_pages_and_cursors() -> None:
    catalog = Catalog([tool(f"t{i}") for i in range(5)], page_size=2)
    first, cursor = catalog.page("en", None)
    assert [t["name"] for t in json.loads(first)] == ["t0", "t1"]
    second, cursor = catalog.page("en", cursor)
    third, end = catalog.page("en", cursor)
    assert [t["name"] for t in json.loads(third)] == ["t4"] and end is None


# The last: a page number in digits that are not ASCII ("²"), which str.isdigit() accepts and int() refuses.
@pytest.mark.parametrize("cursor", ["", "garbage!", "Y3JhbmstcGFnZTo5OQ", "Y3JhbmstcGFnZTowx", "Y3JhbmstcGFnZToxOsKy"])
def test_invalid_cursor(cursor: str) -> None:
    with pytest.raises(InvalidCursorError):
        Catalog([tool(f"t{i}") for i in range(5)], page_size=2).page("en", cursor)


def test_a_cursor_of_another_version_is_refused_not_answered_with_that_versions_page() -> None:
    old = Catalog([tool(f"t{i}") for i in range(5)], version="1", page_size=2)
    new = Catalog([tool(f"u{i}") for i in range(5)], version="2", page_size=2)
    _, cursor = old.page("en", None)
    with pytest.raises(InvalidCursorError, match="version '1' .* now at version '2'"):
        new.page("en", cursor)
    assert [t["name"] for t in json.loads(old.page("en", cursor)[0])] == ["t2", "t3"]


def test_empty_catalog_has_one_empty_page() -> None:
    assert Catalog([]).page("en", None) == (b"[]", None)


def test_token_estimate_is_compact_json_bytes_over_three_rounded_up() -> None:
    catalog = Catalog([tool("t", description="Ünïcödé text")])
    entries = catalog.tool_entries("en")
    raw = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    assert catalog.token_estimate == math.ceil(len(raw) / 3) == estimate_tokens(entries)


def test_page_size_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="page_size"):
        Catalog([], page_size=0)


def test_plain_fields_are_in_the_plain_listing_only() -> None:
    catalog = Catalog([tool("a", description="A.", plain_fields={"roles": ["admin"]}), tool("b")], page_size=1)
    plain = json.loads(catalog.listing("en"))["tools"]
    assert list(plain[0]) == ["name", "title", "description", "roles", "inputSchema"]
    assert plain[0]["roles"] == ["admin"] and "roles" not in plain[1]
    pages = [json.loads(catalog.page_at("en", index)[0]) for index in range(2)]
    assert all("roles" not in entry for page in pages for entry in page)
    assert all("roles" not in entry for entry in catalog.tool_entries("en"))
    assert catalog.token_estimate == estimate_tokens(pages[0] + pages[1])  # the budget counts tools/list only


def test_plain_fields_cannot_replace_a_tools_list_field() -> None:
    with pytest.raises(ConfigurationError, match="'t': plain_fields cannot replace inputSchema, name"):
        Catalog([tool("t", plain_fields={"name": "u", "inputSchema": {}, "roles": []})])
