"""Compaction: a tool's description and schemas cut to what a model reads (docs/gateway.md, Compaction).

The registry compacts each tool when it builds a runtime view (a publish, `crank catalog`, `crank lint`),
so drafts keep the full schemas and a report can show each tool's size before and after. The rule:

- **description**: the first sentences of the tool's description that fit in `description_chars`
  (Markdown links become their text, whitespace is collapsed).
- **input schema**: only annotations go: `title`, `examples`, `$comment`, `x-` extensions (but
  `x-mcp-header`), `readOnly`/`writeOnly`, defaults that are not short scalars; every description is
  cut to its first sentence within `parameter_description_chars`, and keeps the later sentences that
  name what a model cannot guess (`_names_values`: a quoted or code literal such as "me", `now` or
  *now*, or a format, unit, range or default) unless the schema's enum, const or default already
  says all the literals they name; those add at most as many characters again. Every parameter,
  `required`, type, enum, const, format, pattern and bound stays, so the schema accepts exactly what
  it did.
- **output schema**: inlined and cut to `output_depth` levels of data and `output_fields` properties
  per object (required ones first); descriptions within `output_description_chars`; only `type`,
  `properties`, `items`, `required`, `anyOf`/`allOf`, `format`, `const` and short enums are kept.
  Subtrees used twice or more become shared `$defs`. Then, while it is over `output_tokens`, it is
  cut further: descriptions, then depth, then fields.
- **the tool as a whole**: while it is over `tool_tokens`, nested input descriptions go, then the
  output schema is cut to its root's type, then the input is cut in depth (never above its
  parameters, which keep their own type, enum, format, pattern and bounds).

Cutting only ever loosens: a cut subtree keeps no more than its own type (a stub that accepts what
it accepted), `additionalProperties` goes with any property that goes, `oneOf` becomes `anyOf` and
`not`, `if`/`then`/`else`, `unevaluated*`, `patternProperties` and tuple `items` go. So a compacted
schema accepts every instance the full one accepts: every call that was valid stays valid, and every
answer the full output schema accepts, the published one accepts too.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crank.exceptions import ConfigurationError
from crank.types import JSONObject

__all__ = [
    "DEFAULT_DESCRIPTION_CHARS",
    "DEFAULT_OUTPUT_DEPTH",
    "DEFAULT_OUTPUT_DESCRIPTION_CHARS",
    "DEFAULT_OUTPUT_FIELDS",
    "DEFAULT_OUTPUT_TOKENS",
    "DEFAULT_PARAMETER_DESCRIPTION_CHARS",
    "DEFAULT_TOOL_TOKENS",
    "CompactPolicy",
    "CompactSettings",
    "CompactedTool",
    "compact_input",
    "compact_output",
    "compact_tool",
    "policy_of",
    "shorten",
]

DEFAULT_DESCRIPTION_CHARS: Final = 200
"""The tool description: its first sentences within this many characters."""
DEFAULT_PARAMETER_DESCRIPTION_CHARS: Final = 100
"""Each input property's description: its first sentences within this many characters."""
DEFAULT_OUTPUT_DEPTH: Final = 3
"""Levels of data the output schema describes (an object's properties are one level, a list's items one)."""
DEFAULT_OUTPUT_FIELDS: Final = 20
"""Properties kept per output object, required ones first."""
DEFAULT_OUTPUT_DESCRIPTION_CHARS: Final = 60
"""Each output property's description (0: none)."""
DEFAULT_OUTPUT_TOKENS: Final = 120
"""The output schema is cut further (descriptions, depth, fields) until its estimate fits."""
DEFAULT_TOOL_TOKENS: Final = 1_200
"""The whole tool is cut further (nested input descriptions, output, input depth) until its estimate fits."""

_MIN_DESCRIPTION = 40  # a cut description keeps at least its first words
_ENUM_MAX = 12  # longer enums in output schemas are left out: a model reads them, it does not choose from them
_SHORT_DEFAULT = 40
_SHARE_MIN_BYTES = 60
_TOOL_OVERHEAD = 120  # bytes of a tools/list entry beyond its name, description and schemas (annotations, keys)


class CompactSettings(BaseModel):
    """A `compact` object as a workspace, an agent or an operation writes it: only the settings it changes
    (docs/gateway.md, Compaction); the most specific level wins, setting by setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = Field(None, strict=True, description="false publishes the schemas as written (true).")
    description_chars: int | None = Field(None, ge=_MIN_DESCRIPTION, strict=True, description="Tool description (300).")
    parameter_description_chars: int | None = Field(None, ge=0, strict=True, description="Each parameter's (120).")
    output_depth: int | None = Field(None, ge=0, strict=True, description="Levels of output data (3).")
    output_fields: int | None = Field(None, ge=1, strict=True, description="Properties per output object (20).")
    output_description_chars: int | None = Field(None, ge=0, strict=True, description="Output descriptions (60).")
    output_tokens: int | None = Field(None, ge=1, strict=True, description="Output schema estimate (120).")
    tool_tokens: int | None = Field(None, ge=1, strict=True, description="Whole tool estimate (1200).")


@dataclass(frozen=True)
class CompactPolicy:
    """The settings in force for one tool, every one of them set."""

    enabled: bool = True
    description_chars: int = DEFAULT_DESCRIPTION_CHARS
    parameter_description_chars: int = DEFAULT_PARAMETER_DESCRIPTION_CHARS
    output_depth: int = DEFAULT_OUTPUT_DEPTH
    output_fields: int = DEFAULT_OUTPUT_FIELDS
    output_description_chars: int = DEFAULT_OUTPUT_DESCRIPTION_CHARS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    tool_tokens: int = DEFAULT_TOOL_TOKENS


def policy_of(*layers: Any, where: str = "compact") -> CompactPolicy:
    """The policy from `compact` objects, least specific first (workspace, agent, operation); None skips a
    level. Raises `ConfigurationError` naming `where` and the setting when one is wrong."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        try:
            settings = CompactSettings.model_validate(layer)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'compact'}: {error['msg']}"
                for error in exc.errors(include_url=False)
            )
            raise ConfigurationError(f"{where}: {problems}") from None
        merged.update(settings.model_dump(exclude_none=True))
    return CompactPolicy(**merged)


@dataclass(frozen=True)
class CompactedTool:
    description: str | None
    input_schema: JSONObject | None
    output_schema: JSONObject | None


def compact_tool(
    description: str | None,
    input_schema: JSONObject | None,
    output_schema: JSONObject | None,
    policy: CompactPolicy = CompactPolicy(),
    *,
    name: str = "",
) -> CompactedTool:
    """A tool's description and schemas compacted by `policy` (the module docstring has the rule)."""
    if not policy.enabled:
        return CompactedTool(description, input_schema, output_schema)
    text = shorten(description, policy.description_chars) if description else description
    limit = policy.tool_tokens * 3 - len(name) - _size(text) - _TOOL_OVERHEAD
    output = compact_output(output_schema, policy) if output_schema is not None else None
    if input_schema is None:
        return CompactedTool(text, None, output if _size(output) <= limit else _stub_of(output))
    chars = policy.parameter_description_chars
    inputs = _annotated(input_schema, chars, chars)
    if _size(inputs) + _size(output) <= limit:
        return CompactedTool(text, inputs, output)
    inputs = _annotated(input_schema, chars, 0)  # nested descriptions go first
    if _size(inputs) + _size(output) > limit:
        output = _stub_of(output)  # then the output's structure
    if _size(inputs) + _size(output) > limit:
        inputs = _cut_input(input_schema, inputs, limit - _size(output), chars)  # then the input's depth
    return CompactedTool(text, inputs, output)


def _stub_of(schema: JSONObject | None) -> JSONObject | None:
    return _stub(schema) if schema is not None else None


def _cut_input(schema: JSONObject, flat: JSONObject, limit: int, chars: int) -> JSONObject:
    """The deepest cut of `flat` (the input without nested descriptions) that fits in `limit` bytes; the
    parameters themselves (with shorter descriptions) when none does. Cuts grow with depth, so the
    search goes down from the parameters and stops at the first that does not fit."""
    best: JSONObject | None = None
    for depth in range(1, _depth(flat, flat, {}, ())):
        cut = _share(_Cutter(flat, depth=depth, mode="input").root())
        if _size(cut) > limit:
            break
        best = cut
    if best is None:
        short = _annotated(schema, min(chars, _MIN_DESCRIPTION), 0)
        best = _share(_Cutter(short, depth=1, mode="input").root())
    return best


# -- descriptions -----------------------------------------------------------------------------------

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_HTML = re.compile(r"</?[a-zA-Z][^<>]*>")
# A sentence ends at . ! ? (or a line break) followed by space and a capital, a digit or an opening mark;
# "e.g." and "i.e." do not end one.
_PARAGRAPH = re.compile(r"([^\s.!?:])[ \t]*\n\s*\n")
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?](?=\s+[\"'(*`A-Z0-9])|\n\s*\n")


def shorten(text: str, limit: int, *, sentences: int = 0, known: frozenset[str] | None = None) -> str:
    """The first sentences of `text` (at most `sentences`, 0: any number) that fit in `limit` characters;
    the first sentence cut at a word with an ellipsis when even it is longer. Markdown links become their
    text; whitespace is collapsed. With `known` (the values a parameter's schema states), the later
    sentences that name other values (`_names_values`) follow, as many as fit in `limit` more characters."""
    if limit <= 0:
        return ""
    text = _HTML.sub("", _LINK.sub(r"\1", text)).strip()
    text = _PARAGRAPH.sub(r"\1.\n\n", text)  # a summary line before a paragraph reads as a sentence
    ends = [match.end() for match in _SENTENCE_END.finditer(text)] + [len(text)]
    kept, used = "", 0
    for count, end in enumerate(ends[:sentences] if sentences else ends, 1):
        candidate = " ".join(text[:end].split())
        if len(candidate) > limit:
            break
        kept, used = candidate, count
    if not kept:
        cut = " ".join(text.split())[: max(limit - 1, 1)]
        space = cut.rfind(" ")
        kept, used = (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…", 1
    if known is None:
        return kept
    return " ".join([kept, *_values_named(text, ends[used - 1 :], known, limit)])


# A literal a description names: "me", “pretty”, `now`, *now* or **now**, 'me'.
_LITERAL = re.compile(
    r'"([^"\n]{1,40})"|“([^”\n]{1,40})”|`([^`\n]{1,40})`|\*\*?([^*\s][^*\n]{0,39}?)\*\*?|(?<!\w)\'([^\'\s][^\'\n]{0,39})\'(?!\w)'
)
_LITERAL_WORDS = 3  # a longer quotation is a title ('see "Using pagination in the REST API."'), not a value
# A sentence that states a format, a unit, a range or a default without quoting a literal.
_STATES_VALUES = re.compile(
    r"\b(?:defaults?|format|ISO[ -]?\d{3,5}|RFC ?\d{3,4}|YYYY|UTC|time ?zone|unix|epoch|(?:milli)?seconds|minutes|"
    r"hours|bytes|percent|cents|keyword|between \S+ and|at (?:most|least)|(?:URL|percent)[- ]encoded)\b",
    re.IGNORECASE,
)


def _values_named(text: str, ends: list[int], known: frozenset[str], limit: int) -> Iterator[str]:
    """The sentences between `ends` that name values `known` does not hold, in order, within `limit` characters in
    all (a longer one is passed over, so that a shorter one after it may still fit)."""
    left = limit
    for start, end in zip(ends, ends[1:], strict=False):
        sentence = " ".join(text[start:end].split())
        if sentence and len(sentence) < left and _names_values(sentence, known):
            left -= len(sentence) + 1
            yield sentence


def _names_values(sentence: str, known: frozenset[str]) -> bool:
    """Whether a sentence names a value a model cannot guess: a literal the schema does not state already, or
    (quoting none) a format, unit, range or default."""
    quoted = (next(part for part in match.groups() if part is not None) for match in _LITERAL.finditer(sentence))
    literals = {text.strip() for text in quoted if len(text.split()) <= _LITERAL_WORDS}
    if literals:
        return bool(literals - known)
    return _STATES_VALUES.search(sentence) is not None


def _stated_values(node: JSONObject) -> frozenset[str]:
    """The values a compacted schema still states itself (enum, const, a default short enough to stay), as a
    description would quote them. A tenant's schema may be malformed (an `enum` that is no list): it states none."""
    enum = node.get("enum")
    values = [*(enum if isinstance(enum, list) else []), *([node["const"]] if "const" in node else [])]
    if "default" in node and _short_default(node["default"]):
        values.append(node["default"])
    return frozenset(value if isinstance(value, str) else _dumps(value).decode() for value in values)


def _short_default(value: Any) -> bool:
    """Whether compaction keeps a default: a scalar of at most `_SHORT_DEFAULT` bytes of JSON."""
    return not isinstance(value, (dict, list)) and len(_dumps(value)) <= _SHORT_DEFAULT


# -- input schemas ----------------------------------------------------------------------------------

# Keywords whose value is a schema, a list of schemas or a map of schemas (JSON Schema 2020-12, and the
# older `definitions`/`additionalItems`/array `items`).
_SCHEMA_VALUES = frozenset({
    "items", "additionalProperties", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames",
    "unevaluatedProperties", "unevaluatedItems", "contentSchema",
})  # fmt: skip
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_ANNOTATIONS = frozenset({"title", "examples", "example", "$comment", "readOnly", "writeOnly"})
_KEPT_EXTENSIONS = frozenset({"x-mcp-header"})  # read by the MCP layer (crank.mcp.headers)


def compact_input(schema: JSONObject, policy: CompactPolicy = CompactPolicy()) -> JSONObject:
    """The input schema without annotations, its descriptions cut: it accepts exactly what `schema` does."""
    out: JSONObject = _annotated(schema, policy.parameter_description_chars, policy.parameter_description_chars)
    return out


# Keywords that only apply to one kind of value: beside a `type` that rules that kind out they assert nothing.
_APPLIES_TO = {
    **dict.fromkeys(("items", "prefixItems", "additionalItems", "contains", "minItems", "maxItems", "uniqueItems",
                     "minContains", "maxContains", "unevaluatedItems"), {"array"}),
    **dict.fromkeys(("properties", "patternProperties", "additionalProperties", "required", "minProperties",
                     "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas",
                     "unevaluatedProperties"), {"object"}),
    **dict.fromkeys(("minLength", "maxLength", "pattern"), {"string"}),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
                    {"number", "integer"}),
}  # fmt: skip


def _inapplicable(node: JSONObject) -> frozenset[str]:
    kind = node.get("type")
    kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else None
    if not kinds or not all(isinstance(name, str) for name in kinds):
        return frozenset()
    if "integer" in kinds:
        kinds.add("number")
    if "number" in kinds:
        kinds.add("integer")
    return frozenset(key for key in node if key in _APPLIES_TO and not _APPLIES_TO[key] & kinds)


def _annotated(node: Any, limit: int, nested: int, depth: int = 0) -> Any:
    """`node` without annotations and keywords its type makes void; descriptions cut to their first sentence
    within `limit` at the parameters' level, `nested` below."""
    if not isinstance(node, dict):
        return node
    out: JSONObject = {}
    void = _inapplicable(node)
    for key, value in node.items():
        if key in void or key in _ANNOTATIONS or (key.startswith("x-") and key not in _KEPT_EXTENSIONS):
            continue
        if key == "description":
            chars = limit if depth <= 1 else nested
            if isinstance(value, str) and chars > 0 and value.strip():
                out[key] = shorten(value, chars, sentences=1, known=_stated_values(node))
        elif key == "default":
            if _short_default(value):
                out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            below = depth + 1 if key == "properties" else depth if key in ("$defs", "definitions") else depth + 1
            if key in ("$defs", "definitions"):
                below = 2  # a definition is used below the parameters
            out[key] = {name: _annotated(sub, limit, nested, below) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_annotated(sub, limit, nested, depth + (key in ("prefixItems", "items"))) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = _annotated(value, limit, nested, depth + 1)
        else:
            out[key] = value
    return out


_MAX_DEPTH = 8  # deeper (or recursive) inputs count as this deep


def _depth(node: Any, root: JSONObject, known: dict[str, int], refs: tuple[str, ...]) -> int:
    """Levels of data below `node`, at most `_MAX_DEPTH`; each reference is measured once."""
    if not isinstance(node, dict):
        return 0
    deepest = 0
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref in refs:
            return _MAX_DEPTH
        if ref not in known:
            known[ref] = _depth(_lookup(root, ref), root, known, (*refs, ref))
        deepest = known[ref]
    for key, sub, below in _children(node):
        if key not in ("$defs", "definitions"):
            deepest = max(deepest, below + _depth(sub, root, known, refs))
    return min(deepest, _MAX_DEPTH)


def _children(node: JSONObject) -> Iterator[tuple[str, Any, int]]:
    """(keyword, subschema, levels of data it adds) of every subschema of `node`."""
    for key, value in node.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            for sub in value.values():
                yield key, sub, 1
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            for sub in value:
                yield key, sub, int(key in ("prefixItems", "items"))
        elif key in _SCHEMA_VALUES:
            yield key, value, 0 if key in ("not", "if", "then", "else") else 1


def _lookup(root: JSONObject, ref: str) -> Any:
    """A local reference (`#/$defs/Name`); anything else resolves to `{}` (accepts anything: a loosening)."""
    if not ref.startswith("#/"):
        return {}
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, (dict, bool)) else {}


# -- output schemas ---------------------------------------------------------------------------------


def compact_output(schema: JSONObject, policy: CompactPolicy = CompactPolicy()) -> JSONObject:
    """The output schema cut by `policy`; it accepts every answer `schema` accepts."""
    budget = policy.output_tokens * 3
    cut: JSONObject = {}
    for depth, fields, chars in _output_steps(policy):
        cut = _Cutter(schema, depth=depth, fields=fields, description_chars=chars, mode="output").root()
        size = _size(cut)
        if size <= budget:
            return _share(cut)  # sharing only makes it shorter
        if size <= 2 * budget:  # sharing may make it fit
            shared = _share(cut)
            if _size(shared) <= budget:
                return shared
    return cut


def _output_steps(policy: CompactPolicy) -> Iterator[tuple[int, int, int]]:
    """Descriptions go first, then fields level by level, then depth: a list's items keep a few fields
    rather than none."""
    depth, fields = policy.output_depth, policy.output_fields
    yield depth, fields, policy.output_description_chars
    for level in range(depth, 0, -1):
        count = fields
        while True:
            yield level, count, 0
            if count <= 3:
                break
            count = max(count // 2, 3)
    yield 0, fields, 0


def _stub(schema: JSONObject) -> JSONObject:
    """The root's own type only (or nothing): a schema that accepts whatever `schema` accepts."""
    return _Cutter(schema, depth=0, mode="output").root()


_OUTPUT_KEPT = frozenset({"type", "format", "const"})
# What a cut (stub) input node keeps: its own assertions on its value, none on what is inside it.
_INPUT_STUB_DROPPED = frozenset({*_SCHEMA_VALUES, *_SCHEMA_LISTS, *_SCHEMA_MAPS, "$ref", "$dynamicRef"})
# Keywords that may reject more once what is below them is loosened: left out above a cut.
_LOOSE_DROPPED = frozenset({"not", "if", "then", "else", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
                            "$defs", "definitions"})  # fmt: skip


class _Cutter:
    """Inlines references and cuts a schema at `depth` levels of data, only ever loosening it.

    `mode` "output" keeps only what a model reads of an answer (`_OUTPUT_KEPT`, structure, short enums,
    short descriptions); "input" keeps every keyword above the cut and a cut node's own assertions."""

    def __init__(
        self, schema: JSONObject, *, depth: int, mode: str, fields: int = 0, description_chars: int = 0
    ) -> None:
        self.schema = schema
        self.depth = depth
        self.mode = mode
        self.fields = fields
        self.chars = description_chars

    def root(self) -> JSONObject:
        out = self.walk(self.schema, self.depth, ())
        return out if isinstance(out, dict) else {}

    def walk(self, node: Any, left: int, refs: tuple[str, ...]) -> Any:
        if not isinstance(node, dict):
            return node if node is False or self.mode == "input" else {}
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in refs and left > 0:
                left = 0  # recursion: stop here
            target = self.walk(_lookup(self.schema, ref), left, (*refs, ref))
            rest = {key: value for key, value in node.items() if key != "$ref"}
            if not _meaningful(rest):
                return target
            own = self.walk(rest, left, refs)
            return _all_of(target, own)
        if left <= 0:
            return self._stub(node)
        return self._output(node, left, refs) if self.mode == "output" else self._input(node, left, refs)

    def _stub(self, node: JSONObject) -> JSONObject:
        if self.mode == "output":
            kind = _type_of(node, self.schema)
            return {"type": kind} if kind is not None else {}
        stub = {key: value for key, value in node.items() if key not in _INPUT_STUB_DROPPED}
        kind = _type_of(node, self.schema) if "type" not in node else None
        return {"type": kind, **stub} if kind is not None else stub

    def _input(self, node: JSONObject, left: int, refs: tuple[str, ...]) -> JSONObject:
        """Every keyword, but those that could reject more once what is below them is loosened; a `oneOf`
        becomes an `anyOf` (two loosened branches may both match)."""
        out: JSONObject = {}
        for key, value in node.items():
            if key in _LOOSE_DROPPED:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {name: self.walk(sub, left - 1, refs) for name, sub in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                below = left - 1 if key in ("prefixItems", "items") else left
                walked = [self.walk(sub, below, refs) for sub in value]
                if key == "oneOf":
                    out.setdefault("anyOf", []).extend(walked)
                else:
                    out.setdefault(key, []).extend(walked)
            elif key in _SCHEMA_VALUES:
                out[key] = self.walk(value, left - 1, refs)
            else:
                out[key] = value
        return out

    def _output(self, node: JSONObject, left: int, refs: tuple[str, ...]) -> JSONObject:
        out: JSONObject = {key: node[key] for key in _OUTPUT_KEPT if key in node}
        if isinstance(node.get("enum"), list) and len(node["enum"]) <= _ENUM_MAX:
            out["enum"] = node["enum"]
        description = node.get("description")
        if self.chars and isinstance(description, str) and description.strip():
            out["description"] = shorten(description, self.chars, sentences=1)
        properties = node.get("properties")
        kept: list[str] = []
        if isinstance(properties, dict):
            kept = _chosen(properties, node.get("required"), self.fields)
            out["properties"] = {name: self.walk(properties[name], left - 1, refs) for name in kept}
            # Required properties that are kept stay required: the gateway checks every answer against the
            # published schema, so a missing field is drift it reports (a subset of `required` only loosens).
            required = node.get("required")
            if isinstance(required, list) and (still := [n for n in required if n in kept or n not in properties]):
                out["required"] = still
        whole = not isinstance(properties, dict) or len(kept) == len(properties)
        additional = node.get("additionalProperties")
        if whole and "patternProperties" not in node and additional is not None:
            out["additionalProperties"] = (
                additional if isinstance(additional, bool) else self.walk(additional, left - 1, refs)
            )
        items = node.get("items")
        if isinstance(items, dict) and "prefixItems" not in node:
            out["items"] = self.walk(items, left - 1, refs)
        for key in ("allOf", "anyOf", "oneOf"):
            members = node.get(key)
            if isinstance(members, list):
                walked = [self.walk(sub, left, refs) for sub in members]
                if key == "allOf":
                    walked = [member for member in walked if member != {}]
                    if walked:
                        out.setdefault("allOf", []).extend(walked)
                elif {} not in walked:  # a branch that accepts anything makes the whole choice accept it
                    out["anyOf"] = _unique(walked)
        return out


def _meaningful(node: JSONObject) -> bool:
    return any(key not in _ANNOTATIONS and key != "description" and not key.startswith("x-") for key in node)


def _all_of(first: Any, second: Any) -> Any:
    if first == {} or first is True:
        return second
    if second == {} or second is True:
        return first
    return {"allOf": [first, second]}


def _chosen(properties: JSONObject, required: Any, limit: int) -> list[str]:
    """The first `limit` property names, required ones first, in their written order."""
    names = list(properties)
    if len(names) <= limit:
        return names
    needed = set(required) if isinstance(required, list) else set()
    ranked = sorted(names, key=lambda name: name not in needed)[:limit]
    chosen = set(ranked)
    return [name for name in names if name in chosen]


def _type_of(node: Any, root: JSONObject, hops: int = 0) -> Any:
    """The type every instance of `node` has, when the node says it: its own `type`, the union of its
    `anyOf`/`oneOf` branches' types, or one `allOf` member's; None when it cannot be told."""
    if not isinstance(node, dict) or hops > 8:
        return None
    if isinstance(node.get("$ref"), str):
        return _type_of(_lookup(root, node["$ref"]), root, hops + 1)
    if "type" in node:
        return node["type"]
    for member in node.get("allOf") or []:
        kind = _type_of(member, root, hops + 1)
        if kind is not None:
            return kind
    branches = node.get("anyOf") or node.get("oneOf")
    if isinstance(branches, list) and branches:
        kinds: list[str] = []
        for branch in branches:
            kind = _type_of(branch, root, hops + 1)
            if kind is None:
                return None
            kinds.extend(kind if isinstance(kind, list) else [kind])
        unique = list(dict.fromkeys(kinds))
        return unique[0] if len(unique) == 1 else unique
    return None


def _unique(schemas: list[Any]) -> list[Any]:
    seen: dict[bytes, Any] = {}
    for schema in schemas:
        seen.setdefault(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS), schema)
    return list(seen.values())


# -- shared $defs -----------------------------------------------------------------------------------


def _share(schema: JSONObject) -> JSONObject:
    """Subschemas written twice or more become one `$defs` entry each (largest first), when that is shorter."""
    defs: JSONObject = dict(schema.get("$defs") or {})
    body = {key: value for key, value in schema.items() if key != "$defs"}
    for number in range(1, 64):
        counts: Counter[bytes] = Counter()
        for sub in _subschemas(body, top=True):
            counts[orjson.dumps(sub, option=orjson.OPT_SORT_KEYS)] += 1
        for definition in defs.values():
            for sub in _subschemas(definition, top=False):
                counts[orjson.dumps(sub, option=orjson.OPT_SORT_KEYS)] += 1
        worth = [(len(key) * (count - 1), key) for key, count in counts.items()
                 if count > 1 and len(key) >= _SHARE_MIN_BYTES]  # fmt: skip
        if not worth:
            break
        _, key = max(worth)
        name = f"shared{number}"
        reference = {"$ref": f"#/$defs/{name}"}
        defs[name] = orjson.loads(key)
        body = _replaced(body, key, reference)
        defs = {other: (_replaced(d, key, reference) if other != name else d) for other, d in defs.items()}
    return {**body, "$defs": defs} if defs else body


def _subschemas(node: Any, *, top: bool) -> Iterator[Any]:
    """Every subschema below `node` (not `node` itself when `top`), data (enums, consts) left alone."""
    if not isinstance(node, dict):
        return
    if not top:
        yield node
    for _, sub, _ in _children(node):
        if isinstance(sub, dict):
            yield from _subschemas(sub, top=False)


def _replaced(node: Any, key: bytes, reference: JSONObject, *, top: bool = True) -> Any:
    if not isinstance(node, dict):
        return node
    if not top and orjson.dumps(node, option=orjson.OPT_SORT_KEYS) == key:
        return reference
    out: JSONObject = {}
    for name, value in node.items():
        if name in _SCHEMA_MAPS and isinstance(value, dict):
            out[name] = {item: _replaced(sub, key, reference, top=False) for item, sub in value.items()}
        elif name in _SCHEMA_LISTS and isinstance(value, list):
            out[name] = [_replaced(sub, key, reference, top=False) for sub in value]
        elif name in _SCHEMA_VALUES:
            out[name] = _replaced(value, key, reference, top=False)
        else:
            out[name] = value
    return out


# -- sizes ------------------------------------------------------------------------------------------


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def _size(value: Any) -> int:
    return 0 if value is None else len(orjson.dumps(value))
