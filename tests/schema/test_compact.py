"""Compaction (`crank.schema.compact`): the rule on small schemas, the `compact` settings at every level,
the size reports, and the targets on three large public API descriptions (GitHub, Stripe, Zoom): every
operation imported, the runtime view built, each published tool measured as the catalog counts it."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jsonschema_rs
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis_jsonschema import from_schema
from hypothesis_jsonschema._resolve import HypothesisRefResolutionError

from crank.admin.actions import imported_sizes, publish_agent
from crank.admin.changes import reimport
from crank.cli import main
from crank.exceptions import ConfigurationError, RegistryError
from crank.mcp.catalog import estimate_tokens
from crank.registry import Registry, RuntimeView, migrate, open_engine
from crank.schema.compact import (
    DEFAULT_OUTPUT_FIELDS,
    CompactPolicy,
    compact_input,
    compact_output,
    compact_tool,
    policy_of,
    shorten,
)
from crank.sources.agents import build_catalog
from crank.types import JSONObject
from tests.realapis import ASANA, GITHUB, STRIPE, ZOOM, document, json_bodies_only

PETSTORE = Path(__file__).resolve().parent.parent / "admin" / "specs" / "petstore.yaml"


def _valid(schema: JSONObject, instance: object) -> bool:
    return bool(jsonschema_rs.validator_for(schema).is_valid(instance))


# -- the rule -----------------------------------------------------------------------------------------


def test_descriptions_keep_their_first_sentences_within_the_limit() -> None:
    text = "List pets\n\nLists the [pets](https://x.test/pets) of a store, e.g. dogs. Paginated. " + "More. " * 50
    kept = "List pets. Lists the pets of a store, e.g. dogs. Paginated. " + " ".join(["More."] * 23)
    assert shorten(text, 200) == kept
    assert shorten(text, 200, sentences=1) == "List pets."
    assert shorten("One very long sentence without any end " * 5, 40) == "One very long sentence without any end…"


def test_a_parameters_later_sentences_that_name_values_are_kept_unless_its_schema_states_them() -> None:
    """What a model cannot guess stays: a quoted or code literal, a keyword, a format, a unit, a range or a default
    named after the first sentence; a sentence that names only the parameter's own enum values goes (the schema
    says them), and so does one that names nothing."""
    user = 'A string identifying a user. This can either be the string "me", an email, or the gid of a user.'
    assert shorten(user, 100, sentences=1, known=frozenset()) == user
    assert shorten(user, 100, sentences=1) == "A string identifying a user."  # a tool's own description: as before
    state = "The state of the milestone. Either `open` or `closed`. Closed milestones are kept."
    assert shorten(state, 100, sentences=1, known=frozenset({"open", "closed"})) == "The state of the milestone."
    limit = "A limit on the number of objects. Limit can range between 1 and 100, and the default is 10. Use it."
    assert shorten(limit, 100, sentences=1, known=frozenset()) == limit.removesuffix(" Use it.")
    fields = 'Fields to return. Defaults to `["id","name"]`.'
    listed = {"type": "array", "default": ["id", "name"], "description": fields}  # a default compaction drops
    assert compact_input({"type": "object", "properties": {"f": listed}})["properties"]["f"]["description"] == fields
    broken = {"type": "object", "properties": {"f": {"enum": 5, "description": "One. Either `a` or `b`."}}}
    assert compact_input(broken)["properties"]["f"]["description"] == "One. Either `a` or `b`."  # no enum to say it
    page = 'The number of results per page (max 100). For more information, see "Using pagination in the REST API."'
    assert shorten(page, 100, sentences=1, known=frozenset()) == "The number of results per page (max 100)."  # a title
    long = "A cursor. " + "Ending with `obj_foo`, a very long sentence " * 4 + "ends here. `after` is an object ID."
    assert shorten(long, 60, sentences=1, known=frozenset()) == "A cursor. `after` is an object ID."  # within 60 more


def test_input_schemas_lose_annotations_only() -> None:
    schema = {
        "type": "object",
        "title": "Body",
        "properties": {
            "name": {"type": "string", "title": "name", "pattern": "^[a-z]+$", "maxLength": 9, "examples": ["rex"],
                     "description": "The pet's name. " + "It is long. " * 30, "x-internal": True},
            "kind": {"type": "string", "enum": ["dog", "cat"], "format": "slug", "uniqueItems": True, "default": "dog"},
            "trace": {"type": "string", "x-mcp-header": "Trace"},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "minItems": 1, "default": [{"x": 1}]},
        },
        "required": ["name"],
        "additionalProperties": False,
        "$defs": {"Tag": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}, "readOnly": True}},
    }  # fmt: skip
    compacted = compact_input(schema)
    assert compacted == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 9, "description": "The pet's name."},
            "kind": {"type": "string", "enum": ["dog", "cat"], "format": "slug", "default": "dog"},
            "trace": {"type": "string", "x-mcp-header": "Trace"},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "minItems": 1},
        },
        "required": ["name"],
        "additionalProperties": False,
        "$defs": {"Tag": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}}}},
    }


def test_output_schemas_are_cut_and_only_loosened() -> None:
    fields = {f"field{n}": {"type": "string", "examples": ["x"], "description": "A field. " * 20} for n in range(30)}
    item = {"type": "object", "properties": fields, "required": ["field29"], "additionalProperties": False}
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": item},
            "owner": {"oneOf": [{"$ref": "#/$defs/User"}, {"type": "null"}]},
            "deep": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object",
                     "properties": {"c": {"type": "integer"}}, "additionalProperties": False}}}}},
        },
        "additionalProperties": False,
        "$defs": {"User": {"type": "object", "properties": {"login": {"type": "string"}}, "required": ["login"]}},
    }  # fmt: skip
    policy = CompactPolicy(output_tokens=10_000)
    compacted = compact_output(schema, policy)
    kept = compacted["properties"]["items"]["items"]
    assert len(kept["properties"]) == DEFAULT_OUTPUT_FIELDS and "field29" in kept["properties"]  # required first
    assert "additionalProperties" not in kept  # the fields cut may come: the schema must not refuse them
    assert compacted["properties"]["owner"] == {"anyOf": [{"type": "object", "properties": {
        "login": {"type": "string"}}, "required": ["login"]}, {"type": "null"}]}  # fmt: skip
    assert compacted["properties"]["deep"]["properties"]["a"]["properties"]["b"] == {"type": "object"}  # depth 3
    assert "examples" not in str(compacted)
    answer = {"items": [{f"field{n}": "v" for n in range(30)}], "owner": {"login": "x"}, "deep": {"a": {"b": {"c": 1}}}}
    assert _valid(schema, answer) and _valid(compacted, answer)
    assert _valid(compacted, {"deep": {"a": {"b": {"c": 1, "new": True}}}})  # the cut subtree accepts more
    small = compact_output(schema)  # the default budget cuts further, still only loosening
    assert estimate_tokens([small]) <= CompactPolicy().output_tokens + 1 and _valid(small, answer)


def test_subschemas_written_twice_are_shared_once() -> None:
    status = {"type": "string", "enum": ["enabled", "disabled", "not_set"], "description": "Whether it is on."}
    nested = {"type": "object", "properties": {"inner": dict(status)}}
    schema = {"type": "object", "properties": {"a": status, "b": dict(status), "c": nested, "d": dict(nested)}}
    shared = compact_output(schema, CompactPolicy(output_tokens=10_000))
    assert shared["properties"]["a"] == shared["properties"]["b"] == {"$ref": "#/$defs/shared1"}  # four uses
    assert shared["properties"]["c"] == shared["properties"]["d"] == {"$ref": "#/$defs/shared2"}
    inner = {"type": "object", "properties": {"inner": {"$ref": "#/$defs/shared1"}}}
    assert shared["$defs"] == {"shared1": status, "shared2": inner}  # none refers to itself
    assert _valid(shared, {"a": "enabled", "c": {"inner": "not_set"}}) and not _valid(shared, {"a": "on"})


def test_a_tool_over_its_budget_loses_output_structure_then_input_depth() -> None:
    nested = {"type": "object", "properties": {f"p{n}": {"type": "object", "description": "Nested. " * 10,
              "properties": {"q": {"type": "string", "enum": ["a", "b"]}}} for n in range(40)}}  # fmt: skip
    inputs = {"type": "object", "properties": {"spec": nested, "name": {"type": "string", "pattern": "^x"}},
              "required": ["name"], "additionalProperties": False}  # fmt: skip
    tool = compact_tool("Creates a thing.", inputs, {"type": "object", "properties": {"id": {"type": "integer"}}},
                        CompactPolicy(tool_tokens=300))  # fmt: skip
    assert tool.output_schema == {"type": "object"}
    assert tool.input_schema is not None and set(tool.input_schema["properties"]) == {"spec", "name"}
    assert tool.input_schema["properties"]["name"] == {"type": "string", "pattern": "^x"}
    assert tool.input_schema["required"] == ["name"] and tool.input_schema["additionalProperties"] is False
    call = {"name": "xy", "spec": {"p1": {"q": "a"}}}
    assert _valid(inputs, call) and _valid(tool.input_schema, call)
    off = compact_tool("Creates a thing. More.", inputs, None, CompactPolicy(enabled=False))
    assert off.input_schema is inputs and off.description == "Creates a thing. More."


def test_settings_merge_most_specific_last_and_name_a_wrong_one() -> None:
    policy = policy_of({"output_depth": 1, "description_chars": 80}, None, {"output_depth": 2})
    assert (policy.output_depth, policy.description_chars, policy.output_fields) == (2, 80, DEFAULT_OUTPUT_FIELDS)
    with pytest.raises(ConfigurationError, match=r"tool 'x': output_depth: Input should be a valid integer"):
        policy_of({"output_depth": "deep"}, where="tool 'x'")
    with pytest.raises(ConfigurationError, match="bogus: Extra inputs are not permitted"):
        policy_of({"bogus": 1})


# -- the registry: settings at every level, sizes before and after ------------------------------------


def test_workspace_agent_and_operation_settings_apply_at_publish(sqlite_registry: Registry) -> None:
    registry = sqlite_registry
    registry.put_workspace("shop", "Shop", compact={"description_chars": 45})
    reimport(registry, "shop", "openapi", str(PETSTORE), base_url="http://pets.test")
    long = "Lists every pet of the store in one call. " + "It pages through them. " * 20
    spec = registry.operation("shop", "list_pets")
    registry.put_operation("shop", "list_pets", {**spec, "description": long})
    registry.put_agent("shop", "desk", {"bindings": [{"operation": "list_pets"}]})

    def description() -> str | None:
        return registry.draft_runtime("shop", "desk").tools[0].tool_description

    assert description() == "Lists every pet of the store in one call."  # the workspace's 45 characters
    registry.put_agent("shop", "desk", {"bindings": [{"operation": "list_pets"}], "compact": {"description_chars": 70}})
    assert description() == "Lists every pet of the store in one call. It pages through them."  # the agent's
    registry.put_operation("shop", "list_pets", {**spec, "description": long, "compact": {"enabled": False}})
    assert description() == long  # the operation's own wins
    assert registry.draft_runtime("shop", "desk", compact=False).tools[0].tool_description == long
    assert registry.operation("shop", "list_pets")["description"] == long  # the draft keeps it all

    registry.put_operation("shop", "list_pets", {**spec, "compact": {"output_depth": -1}})
    with pytest.raises(RegistryError, match=r"agent shop/desk, tool 'list_pets': output_depth: Input should be"):
        registry.draft_runtime("shop", "desk")
    assert registry.workspace("shop")["compact"] == {"description_chars": 45}


def test_import_publish_and_catalog_report_each_tools_size_before_and_after(
    sqlite_registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = sqlite_registry
    registry.put_workspace("gh", "GitHub")
    names = ["repos_get", "repos_list_for_org", "repos_delete"]
    reimport(registry, "gh", "openapi", json_bodies_only(document(GITHUB)), include=names)
    sizes = {size.name: size for size in imported_sizes(registry, "gh", names)}
    assert set(sizes) == set(names) and all(size.tokens < size.before for size in sizes.values())
    registry.put_agent("gh", "repos", {"bindings": [{"operation": name} for name in names]})
    report = publish_agent(registry, "gh", "repos")
    assert {size.name: (size.tokens, size.before) for size in report.tools} == {
        name: (size.tokens, size.before) for name, size in sizes.items()
    }
    assert report.to_json()["tools"][0].keys() == {"name", "tokens", "before"}

    monkeypatch.setenv("CRANK_DATABASE_URL", str(registry.engine.url))
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    result = CliRunner().invoke(main, ["catalog", "gh"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "repos_delete" in line)
    assert line.split() == [str(sizes["repos_delete"].tokens), "repos_delete", "(before", "compaction:",
                            f"{sizes['repos_delete'].before})"]  # fmt: skip
    command = ["import", "openapi", str(PETSTORE), "-w", "gh", "--base-url", "http://p.test"]
    imported = CliRunner().invoke(main, command)
    assert imported.exit_code == 0 and "(before compaction: " in imported.output and "median " in imported.output


# -- three large public API descriptions --------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    runtime: RuntimeView
    full: RuntimeView
    tokens: dict[str, int]


_PUBLISHED: dict[tuple[Path, bool], Published] = {}


def _published(path: Path, tmp_path: Path, *, json_only: bool = True) -> Published:
    """Every operation of the document imported and bound to one agent; its runtime view as a publish
    builds it, with and without compaction, and each tool's estimate as the catalog counts it. `json_only`: as the
    importer took it before bodies beyond JSON (`json_bodies_only`), so the targets compare with the figures then."""
    if (path, json_only) not in _PUBLISHED:
        engine = open_engine(f"sqlite:///{tmp_path / 'big.db'}", pooled=False)
        migrate(engine)
        registry = Registry(engine)
        registry.put_workspace("big", "Big")
        source = json_bodies_only(document(path)) if json_only else document(path)
        names = reimport(registry, "big", "openapi", source).names
        registry.put_agent("big", "all", {"bindings": [{"operation": name} for name in names]})
        runtime = registry.draft_runtime("big", "all")
        catalog = build_catalog(runtime)
        tokens = {str(entry["name"]): estimate_tokens([entry]) for entry in catalog.tool_entries("en")}
        _PUBLISHED[path, json_only] = Published(runtime, registry.draft_runtime("big", "all", compact=False), tokens)
        engine.dispose()
    return _PUBLISHED[path, json_only]


APIS = [pytest.param(GITHUB, 1223, id="github"), pytest.param(STRIPE, 390, id="stripe"),
        pytest.param(ZOOM, 372, id="zoom")]  # fmt: skip


@pytest.mark.parametrize(("path", "count"), APIS)
def test_compacted_tools_of_large_apis_meet_the_targets(path: Path, count: int, tmp_path: Path) -> None:
    published = _published(path, tmp_path)
    sizes = list(published.tokens.values())
    assert len(sizes) == count
    assert statistics.median(sizes) <= 350
    assert max(sizes) <= 1500, max(published.tokens.items(), key=lambda item: item[1])


def test_stripe_with_its_form_bodies_keeps_every_tool_within_the_largest_tool_target(tmp_path: Path) -> None:
    """All 452 of Stripe's operations with their form bodies' fields (docs/gateway.md, Compaction: the median is
    larger than with JSON bodies only, since the tools now carry the arguments their bodies need)."""
    sizes = list(_published(STRIPE, tmp_path, json_only=False).tokens.values())
    assert len(sizes) == 452
    assert max(sizes) <= 1500


# Sentences of parameters of the three documents that name what a model cannot guess, past their first sentence:
# each survives compaction (issue 40). (document, tool, parameter, sentence)
MEANINGFUL = [
    (GITHUB, "code_security_attach_configuration", "selected_repository_ids",
     "You can only provide a list of repository ids when the `scope` is set to `selected`."),
    (GITHUB, "actions_delete_environment_variable", "environment_name", "The name must be URL encoded."),
    (GITHUB, "actions_delete_environment_variable", "environment_name",
     "For example, any slashes in the name must be replaced with `%2F`."),
    (GITHUB, "issues_list_for_repo", "since", "This is a timestamp in ISO 8601 format: `YYYY-MM-DDTHH:MM:SSZ`."),
    (STRIPE, "get_transfers", "limit", "Limit can range between 1 and 100, and the default is 10."),
    (STRIPE, "get_refunds", "starting_after", "`starting_after` is an object ID that defines your place in the list."),
    (ASANA, "get_user", "user_gid", 'This can either be the string "me", an email, or the gid of a user.'),
    (ASANA, "get_tasks_for_project", "completed_since", "Accepts a date-time string or the keyword *now*."),
    (ASANA, "get_audit_log_events", "actor_type", "If `actor_gid` is included, this should be excluded."),
    (ASANA, "get_tasks", "assignee",
     "*Note: If you specify `assignee`, you must also specify the `workspace` to filter on.*"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "tool", "parameter", "sentence"),
    MEANINGFUL,
    ids=[f"{tool}.{name}-{sentence[:12]}" for _, tool, name, sentence in MEANINGFUL],
)
def test_sentences_that_name_values_survive_compaction(
    path: Path, tool: str, parameter: str, sentence: str, tmp_path: Path
) -> None:
    published = _published(path, tmp_path)
    full = next(entry for entry in published.full.tools if entry.tool_name == tool).input_schema
    written = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", full["properties"][parameter]["description"])  # links: their text
    assert sentence in " ".join(written.split())  # the document says it
    compacted = next(entry for entry in published.runtime.tools if entry.tool_name == tool).input_schema
    assert sentence in compacted["properties"][parameter]["description"]


_KEPT = (
    "type", "enum", "const", "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "minItems", "maxItems", "multipleOf", "x-mcp-header",
)  # fmt: skip


_ONLY_FOR = {"minItems": {"array"}, "maxItems": {"array"}, "minLength": {"string"}, "maxLength": {"string"},
             "pattern": {"string"}, **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                     "multipleOf"), {"number", "integer"})}  # fmt: skip


def _void(key: str, parameter: JSONObject) -> bool:
    """A keyword that asserts nothing beside the parameter's one declared type (`minimum` on a string)."""
    kind = parameter.get("type")
    return isinstance(kind, str) and key in _ONLY_FOR and kind not in _ONLY_FOR[key]


@pytest.mark.parametrize(("path", "count"), APIS)
def test_every_parameter_keeps_what_a_call_needs(path: Path, count: int, tmp_path: Path) -> None:
    """Over every tool: the same parameters, the same required ones, and each parameter's own type, enum,
    const, format, pattern and bounds (those its type does not make void), and a short description."""
    published = _published(path, tmp_path)
    for tool, full in zip(published.runtime.tools, published.full.tools, strict=True):
        before, after = full.input_schema or {}, tool.input_schema or {}
        assert after.keys() >= {"type", "properties"} and after["properties"].keys() == before["properties"].keys()
        assert after.get("required") == before.get("required") and after.get("additionalProperties") == before.get(
            "additionalProperties"
        )
        for name, parameter in before["properties"].items():
            kept = after["properties"][name]
            if "$ref" in kept:  # parameters written alike share one definition
                kept = after["$defs"][kept["$ref"].removeprefix("#/$defs/")]
            for key in _KEPT:
                if key in parameter and not _void(key, parameter):
                    assert kept.get(key) == parameter[key], (tool.tool_name, name, key)
            if parameter.get("description"):
                # Its first sentence within the limit, and the sentences that name values within as much again.
                assert 0 < len(kept["description"]) <= 2 * CompactPolicy().parameter_description_chars


_DRAWABLE = 12_000  # hypothesis-jsonschema inlines every reference first: larger schemas take minutes each
_SAMPLED = 16  # operations per API: the whole property costs about a minute, not ten


def _still_valid(before: JSONObject, after: JSONObject, name: str) -> Callable[[], None]:
    validator = jsonschema_rs.validator_for(after)

    @settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(from_schema(before))
    def still_valid(instance: object) -> None:
        assert validator.is_valid(instance), (name, instance)

    return still_valid  # type: ignore[no-any-return]


@pytest.mark.parametrize(("path", "count"), APIS)
def test_every_valid_call_and_answer_stays_valid(path: Path, count: int, tmp_path: Path) -> None:
    """Property: instances generated from the full input (and output) schema of real operations validate
    against the compacted one (recursive schemas, which hypothesis-jsonschema cannot draw from, left out).
    `_SAMPLED` operations per API, evenly spread; the larger schemas are left to
    test_every_parameter_keeps_what_a_call_needs, which checks every tool's parameters one by one."""
    published = _published(path, tmp_path)
    pairs = list(zip(published.full.tools, published.runtime.tools, strict=True))
    chosen = pairs[:: max(1, len(pairs) // _SAMPLED)]
    checked = 0
    for full, tool in chosen:
        for before, after in ((full.input_schema, tool.input_schema), (full.output_schema, tool.output_schema)):
            if before is None or after is None or len(str(before)) > _DRAWABLE:
                continue
            try:
                _still_valid(before, after, full.tool_name)()
            except (HypothesisRefResolutionError, Unsatisfiable):
                continue  # a schema hypothesis-jsonschema cannot draw from (recursive, or filtered too hard)
            checked += 1
    assert checked >= 10
