"""API description documents: loading them, and what the OpenAPI and OpenRPC importers share.

`load_document` reads a file or an http(s) URL and parses JSON or YAML, told apart by content (a
document that starts with `{` or `[` is read as JSON first). A URL is fetched through the gateway's
upstream client, under the egress policy (crank.gateway.egress: public addresses only unless
`CRANK_EGRESS_ALLOW` says more), without following redirects, at most `MAX_DOCUMENT_BYTES` and within
`FETCH_DEADLINE` seconds in all; every network failure is the same message, so that the answers cannot
map which ports of a network are open. YAML is read as JSON would have it:
keys stay strings as written (`200:` is `"200"`), dates stay strings.

Both importers return `ImportedOperation`s (a name and an operation draft) and share what follows
(the helpers below `load_document` are for the importers; `crank.admin` re-exports only
`ImportedOperation`, `SpecError`, `load_document` and `parse_document`):

- `$ref` resolution through `referencing`, the library `jsonschema` and openapi-spec-validator
  (through jsonschema-path) use. Local references only: a reference into another file raises
  `SpecError` (bundle the document first); nothing is fetched while importing.
- tool-local schemas: each referenced schema is converted once per document and copied into the
  `$defs` of every tool schema that reaches it, as `#/$defs/<Name>`; recursive schemas stay recursive
  through `$defs` instead of being expanded.
- names: `snake_case` (`getUserById` -> `get_user_by_id`, `Catalog.search` -> `catalog_search`),
  argument names limited to `[A-Za-z0-9_]{1,64}` (what the strictest model APIs accept).
- filters (`include`): fnmatch patterns, case-insensitive, against the tool name, the operationId
  or method name, the tags (and `METHOD /path` for OpenAPI). An operation is kept when it matches a
  pattern (or there are only `!` patterns) and no `!pattern`. Or a callable `(name, source) -> bool`.
- error places: `paths./users/{id}.get.parameters[0].in: ...`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

import jsonschema_rs
import referencing
import referencing.exceptions
import yaml

from crank import _json, _yaml
from crank.exceptions import (
    SpecError,
    UpstreamError,
    UpstreamRefusedError,
    UpstreamRequestTooLargeError,
    UpstreamTooLargeError,
)
from crank.gateway.client import UpstreamClient, placeholder_in_origin
from crank.gateway.egress import ALLOW_VARIABLE, EgressPolicy
from crank.mcp.validation import checkable_pattern
from crank.types import JSONObject

__all__ = [
    "DOCUMENT_EXECUTION_KEYS",
    "DESCRIPTION_LIMIT",
    "FETCH_DEADLINE",
    "MAX_DOCUMENT_BYTES",
    "MAX_SCHEMA_DEPTH",
    "Arguments",
    "Document",
    "Imported",
    "ImportedOperation",
    "Include",
    "Matcher",
    "Progress",
    "Schemas",
    "SkippedOperation",
    "argument_name",
    "check_annotations",
    "check_schema",
    "check_unique_names",
    "claim",
    "describe",
    "is_url",
    "json_copy",
    "load_document",
    "merge_annotations",
    "parse_document",
    "report",
    "server_url",
    "snake_case",
    "structure_error",
    "tool_name",
    "trimmed",
    "typed_path",
    "where",
]

DESCRIPTION_LIMIT = 1024
"""Longest tool or argument description kept, in characters: every tool description costs tokens."""

Include: TypeAlias = Sequence[str] | Callable[[str, JSONObject], bool] | None
Progress: TypeAlias = Callable[[int, int], None] | None

MAX_SCHEMA_DEPTH = 400
"""The deepest a schema may nest while it is made tool-local, counting each subschema level and each `$ref`
followed (a chain of schemas that each refer to the next through a property is two levels a link: 200
links). Every walk over a tool's schemas (conversion, compaction, validation) recurses once per level; a chain
of 500 references used to end in Python's recursion limit instead of an error naming the place."""
FETCH_DEADLINE = 30.0
"""Seconds a document fetch may take in all: connecting, the headers and the whole body."""
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024
"""The largest API description fetched, after decompression (the largest public ones are a few MiB)."""
_UNREACHABLE = "cannot fetch the document: no answer from that address (connection failed, closed or timed out)"
_REFUSED = (
    f"cannot fetch the document: this server's egress policy does not allow that address ({ALLOW_VARIABLE}, "
    "docs/security.md)"
)
"""The one answer for a refused address: the resolved address and why go to the log, not to the caller (a name
would otherwise map the internal addresses it resolves to)."""
logger = logging.getLogger("crank.admin")
_ARGUMENT = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_NAME = re.compile(r"[^A-Za-z0-9]+")
_NOT_DEF_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_TEMPLATE = re.compile(r"{([^{}]+)}")
_DOCUMENT_URI = "urn:crank:document"
# Keywords whose values are data, not schemas or API objects: a "$ref" key inside them is not a reference.
_DATA_KEYWORDS = frozenset({"example", "examples", "enum", "const"})


DOCUMENT_EXECUTION_KEYS: Final = frozenset({"requires", "body"})
"""The `execution_config` keys an import sets from the API description (what the operation's security requires, how
its body is written): a re-import replaces them, and a catalog file's `execution_config` keeps them unless it names
them itself."""


@dataclass(frozen=True)
class ImportedOperation:
    """One operation draft, ready for `Registry.put_operation(workspace, name, spec)`."""

    name: str
    spec: JSONObject


@dataclass(frozen=True)
class SkippedOperation:
    """An operation an import left out, because Crank cannot call it as its document describes it."""

    name: str
    place: str
    """`METHOD /path` (OpenAPI)."""
    reason: str

    def line(self) -> str:
        """What the CLI prints: the operation, why, and the option that leaves it out without a word."""
        return f"skipped {self.name} ({self.place}): {self.reason}; --include '!{self.name}' leaves it out quietly"


class Imported(list[ImportedOperation]):
    """The operations an import converted, in the document's order, and those it left out (`skipped`)."""

    def __init__(self, operations: list[ImportedOperation], skipped: list[SkippedOperation]) -> None:
        super().__init__(operations)
        self.skipped = skipped


# -- loading ----------------------------------------------------------------------------------------


def is_url(source: str) -> bool:
    """Whether a document location is an http(s) URL (anything else is a file path)."""
    return source.startswith(("http://", "https://"))


def load_document(
    source: str,
    *,
    egress: EgressPolicy | None = None,
    deadline: float = FETCH_DEADLINE,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> JSONObject:
    """Read a JSON or YAML document from a file path or an http(s) URL; raises `SpecError`. `egress`: the
    policy a URL is fetched under (`CRANK_EGRESS_ALLOW` when not given). Call it outside an event loop
    (the admin API runs it in a worker thread)."""
    if is_url(source):
        data = _fetch(source, egress, deadline, max_bytes)
    else:
        data = _read(source)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    return parse_document(text, source=source)


def _fetch(url: str, egress: EgressPolicy | None, deadline: float, max_bytes: int) -> bytes:
    try:
        status, body = asyncio.run(_get(url, UpstreamClient(max_response_bytes=max_bytes, egress=egress), deadline))
    except ValueError as exc:  # not a URL the client can request
        raise SpecError(f"{url}: cannot fetch the document: {exc}") from None
    except UpstreamRefusedError as exc:
        logger.warning("%s: cannot fetch the document: %s", url, exc)
        raise SpecError(f"{url}: {_REFUSED}") from None
    except UpstreamTooLargeError:
        raise SpecError(f"{url}: cannot fetch the document: larger than {max_bytes:,} bytes") from None
    except UpstreamRequestTooLargeError:  # never sent; the URL itself is cut short in the message
        raise SpecError(f"{url[:100]}...: cannot fetch the document: its URL is too long") from None
    except UpstreamError:  # refused, reset, closed, timed out, a DNS or TLS failure: all alike to the caller
        raise SpecError(f"{url}: {_UNREACHABLE}") from None
    if 300 <= status < 400:
        raise SpecError(f"{url}: cannot fetch the document: HTTP {status} (redirects are not followed; give the "
                        "document's own URL)")  # fmt: skip
    if status >= 400:
        raise SpecError(f"{url}: cannot fetch the document: HTTP {status}")
    return body


async def _get(url: str, client: UpstreamClient, deadline: float) -> tuple[int, bytes]:
    """One GET within one deadline for everything (the client's: connection, head and body)."""
    try:
        response = await client.request("GET", url, params=None, headers={"Accept": "*/*"}, body=None,
                                        timeout=deadline)  # fmt: skip
    finally:
        await client.aclose()
    return response.status, response.body


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the file: {exc.strerror}") from None


def parse_document(text: str, *, source: str = "document") -> JSONObject:
    """Parse JSON or YAML text (told apart by content) into an object; raises `SpecError`."""
    stripped = text.lstrip()
    if not stripped:
        raise SpecError(f"{source}: the document is empty")
    if stripped[0] in "{[":
        try:
            value = _json.loads(text)
        except _json.JSONDecodeError as exc:
            try:
                value = _yaml.load(text)  # a YAML flow mapping starts with "{" too
            except yaml.YAMLError:
                raise SpecError(f"{source}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    else:
        try:
            value = _yaml.load(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{source}: not valid YAML: {_yaml_problem(exc, text)}") from None
    if not isinstance(value, dict):
        raise SpecError(f"{source}: the top level is {_kind(value)}, not an object")
    return value


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"line {text.count(chr(10), 0, exc.position) + 1}: {exc.reason}"
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


# -- names, filters, texts --------------------------------------------------------------------------


def snake_case(text: str) -> str:
    """`getUserById` -> `get_user_by_id`, `list-users` -> `list_users`, `Catalog.search` -> `catalog_search`."""
    return _NOT_NAME.sub("_", _WORD_BOUNDARY.sub("_", text)).strip("_").lower()


def tool_name(text: str) -> str:
    """A valid MCP tool name (`^[A-Za-z0-9_.-]{1,128}$`) in snake_case; empty when nothing is left."""
    return snake_case(text)[:128].rstrip("_")


def argument_name(name: str, *, lower: bool = False) -> str:
    """`name` if it is already `[A-Za-z0-9_]{1,64}`, else a cleaned copy (`filter[status]` -> `filter_status`)."""
    if lower:
        name = snake_case(name)
    if _ARGUMENT.match(name):
        return name
    return _NOT_NAME.sub("_", name).strip("_")[:64].rstrip("_") or "arg"


def claim(name: str, prefix: str, taken: set[str]) -> str:
    """`name`, or `<prefix>_<name>` (then `_2`, `_3`, ...) when another argument has it already."""
    candidate = name
    if candidate in taken:
        candidate = f"{prefix}_{name}"[:64]
    base, number = candidate, 2
    while candidate in taken:
        candidate = f"{base[:60]}_{number}"
        number += 1
    taken.add(candidate)
    return candidate


class Matcher:
    """The `include` filter; `keys` are the other strings (besides the name) an operation can be selected by."""

    def __init__(self, include: Include) -> None:
        self._callable: Callable[[str, JSONObject], bool] | None = None
        patterns: list[str] = []
        if callable(include):
            self._callable = include
        elif isinstance(include, str):
            patterns = [include]
        elif include is not None:
            patterns = list(include)
        self._positive = [pattern.lower() for pattern in patterns if not pattern.startswith("!")]
        self._negative = [pattern[1:].lower() for pattern in patterns if pattern.startswith("!")]
        self._patterns = patterns

    def check_chosen(self, chosen: int, total: int, what: str, keys: str) -> None:
        """A filter that keeps nothing of a document that has something is a mistake, not an empty import."""
        if chosen or not total or (self._callable is None and not self._patterns):
            return
        given = "the include function" if self._callable is not None else f"include {self._patterns}"
        raise SpecError(
            f"{given} matched none of the document's {total} {what} (patterns are globs, case-insensitive, "
            f"matched against {keys}; '!' leaves out)"
        )

    def keep(self, name: str, source: JSONObject, keys: Sequence[str]) -> bool:
        if self._callable is not None:
            return bool(self._callable(name, source))
        lowered = [key.lower() for key in (name, *keys) if key]
        if self._positive and not _matches(lowered, self._positive):
            return False
        return not _matches(lowered, self._negative)


def _matches(keys: list[str], patterns: list[str]) -> bool:
    return any(fnmatchcase(key, pattern) for key in keys for pattern in patterns)


def describe(summary: Any, description: Any) -> str | None:
    """Summary and description as one text; the summary is dropped when the description repeats it."""
    parts = [text.strip() for text in (summary, description) if isinstance(text, str) and text.strip()]
    if len(parts) == 2 and parts[1].startswith(parts[0].rstrip(".")):
        parts = parts[1:]
    return trimmed("\n\n".join(parts)) if parts else None


def trimmed(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    text = re.sub(r"\n{3,}", "\n\n", text.strip())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip() + "…"


def report(progress: Progress, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def json_copy(document: Any) -> Any:
    """A private, JSON-only copy: the caller's dict is never changed, dates and non-string keys become strings."""
    try:
        return _json.loads(_json.dumps(document))
    except TypeError as exc:
        raise SpecError(f"the document is not JSON data: {exc}") from None


# -- places -----------------------------------------------------------------------------------------


def where(parts: Sequence[str | int]) -> str:
    """`["paths", "/users", "get", "parameters", 0]` -> `paths./users.get.parameters[0]`."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the document"


def typed_path(document: Any, path: Sequence[str | int]) -> list[str | int]:
    """A validator's instance path with list indexes as ints and object keys as strings."""
    parts: list[str | int] = []
    node = document
    for part in path:
        if isinstance(node, list) and isinstance(part, int):
            parts.append(part)
            node = node[part] if part < len(node) else None
        else:
            parts.append(str(part))
            node = node.get(str(part)) if isinstance(node, dict) else None
    return parts


def structure_error(
    errors: Iterator[jsonschema_rs.ValidationError], document: Any, prefix: Sequence[str | int] = ()
) -> None:
    """Raise `SpecError` for the most specific of a validator's errors, if there are any."""
    found = list(errors)
    if not found:
        return
    leaves = [leaf for error in found[:1] for leaf in _leaves(error)] or found[:1]
    depth = max(len(leaf.instance_path) for leaf in leaves)
    deepest = [leaf for leaf in leaves if len(leaf.instance_path) == depth]
    first = deepest[0]
    place = where([*prefix, *typed_path(document, first.instance_path)])
    message = _enum_message(deepest) or first.message
    more = f" (and {len(found) - 1} more problems)" if len(found) > 1 else ""
    raise SpecError(f"{place}: {trimmed(message, 300)}{more}")


def _leaves(error: jsonschema_rs.ValidationError) -> list[jsonschema_rs.ValidationError]:
    """The errors below `oneOf`/`anyOf`, without the `$ref` alternative every OpenAPI object has."""
    context = getattr(error.kind, "context", None)
    if not context:
        if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required) and error.kind.property == "$ref":
            return []
        return [error]
    return [leaf for branch in context for sub in branch for leaf in _leaves(sub)]


def _enum_message(errors: list[jsonschema_rs.ValidationError]) -> str | None:
    """Several `enum` branches failed on one value: one message with every allowed value."""
    kinds = [error.kind for error in errors]
    if len(kinds) < 2 or not all(isinstance(kind, jsonschema_rs.ValidationErrorKind.Enum) for kind in kinds):
        return None
    options = (_json.dumps(option).decode() for kind in kinds for option in kind.options)  # type: ignore[attr-defined]
    allowed = list(dict.fromkeys(options))
    return f"{_json.dumps(errors[0].instance).decode()} is not one of {', '.join(allowed)}"


# -- references and tool-local schemas --------------------------------------------------------------


class Document:
    """One API description with its references resolved by `referencing` (local ones only)."""

    def __init__(self, contents: JSONObject) -> None:
        self.contents = contents
        resource = referencing.Resource.opaque(contents)
        self._resolver = referencing.Registry().with_resource(_DOCUMENT_URI, resource).resolver(_DOCUMENT_URI)
        self._cache: dict[str, Any] = {}

    def lookup(self, ref: str, parts: Sequence[str | int] = ()) -> Any:
        if ref in self._cache:
            return self._cache[ref]
        if not ref.startswith("#"):
            raise SpecError(f"{where([*parts, '$ref'])}: {ref!r} points outside the document; bundle it into one file")
        try:
            found = self._resolver.lookup(ref).contents
        except referencing.exceptions.Unresolvable:
            raise SpecError(f"{where([*parts, '$ref'])}: {ref!r} points to nothing in the document") from None
        self._cache[ref] = found
        return found

    def deref(self, node: Any, parts: Sequence[str | int]) -> Any:
        """Follow `$ref`s (of parameters, bodies, responses, ...) to the object they name."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise SpecError(f"{where([*parts, '$ref'])}: {ref!r} refers back to itself")
            seen.add(ref)
            node = self.lookup(ref, parts)
        return node

    def check_references(self) -> None:
        """Every `$ref` of the document must resolve, whether or not an imported operation uses it."""
        stack: list[tuple[Any, tuple[str | int, ...]]] = [(self.contents, ())]
        while stack:
            node, parts = stack.pop()
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    self.lookup(node["$ref"], parts)
                stack.extend((value, (*parts, key)) for key, value in node.items() if not _is_data(key, parts))
            elif isinstance(node, list):
                stack.extend((value, (*parts, index)) for index, value in enumerate(node))


def _is_data(key: str, parts: tuple[str | int, ...]) -> bool:
    """Values that are data (examples, defaults, enums), not objects that may hold references."""
    if key == "default":
        return not parts or parts[-1] != "responses"  # `responses.default` is a response
    return key in _DATA_KEYWORDS


# Keywords whose values are schemas (or maps or lists of schemas), walked when schemas are converted.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_VALUES = frozenset({
    "additionalProperties", "items", "not", "contains", "propertyNames", "if", "then", "else",
    "unevaluatedItems", "unevaluatedProperties", "additionalItems", "contentSchema",
})  # fmt: skip
# OpenAPI-only keywords, and what would make a tool-local schema point elsewhere ($id changes the base URI).
_DROPPED = frozenset({"discriminator", "xml", "externalDocs", "$id", "$schema"})
_KEPT_EXTENSIONS = frozenset({"x-mcp-header"})


class Schemas:
    """Schemas of one document made tool-local, each referenced schema converted once.

    `convert(schema, used)` returns a copy whose `$ref`s point to `#/$defs/<name>`, adding the names
    it uses to `used`; `defs(used)` returns those definitions and everything they reach. With
    `openapi30`, OpenAPI 3.0 keywords become JSON Schema: `nullable`, boolean `exclusiveMinimum`/
    `exclusiveMaximum`; everywhere `example` becomes `examples`, and `discriminator`, `xml`,
    `externalDocs`, `$id`, `$schema` and `x-` extensions (but `x-mcp-header`) are left out, and so is a
    `pattern` the validators cannot check in linear time (`crank.mcp.validation.checkable_pattern`).
    """

    def __init__(self, document: Document, *, openapi30: bool = False) -> None:
        self.document = document
        self.openapi30 = openapi30
        self._names: dict[str, str] = {}
        self._defs: dict[str, tuple[Any, set[str]]] = {}
        self._defining: list[str] = []  # the references being converted, outermost first
        self._nesting = 0

    def convert(self, schema: Any, used: set[str]) -> Any:
        if not isinstance(schema, dict):
            return schema  # true / false
        if self._nesting >= MAX_SCHEMA_DEPTH:
            place = f"schema {self._defining[-1]!r}" if self._defining else "a schema"
            raise SpecError(f"{place}: schemas nest more than {MAX_SCHEMA_DEPTH} levels deep (each $ref followed "
                            "counts as one); flatten the chain")  # fmt: skip
        # Loops, not comprehensions: each level costs as few Python frames as it can (3 a link of a chain).
        self._nesting += 1
        try:
            out: JSONObject = {}
            for key, value in schema.items():
                if key == "$ref" and isinstance(value, str):
                    out[key] = "#/$defs/" + self._define(value, used)
                elif key in _SCHEMA_MAPS and isinstance(value, dict):
                    converted: JSONObject = {}
                    for name, sub in value.items():
                        converted[name] = self.convert(sub, used)
                    out[key] = converted
                elif (key in _SCHEMA_LISTS or key == "items") and isinstance(value, list):
                    items = []
                    for sub in value:
                        items.append(self.convert(sub, used))
                    out[key] = items
                elif key in _SCHEMA_VALUES:
                    out[key] = self.convert(value, used)
                elif key in _DROPPED or (key.startswith("x-") and key not in _KEPT_EXTENSIONS):
                    continue
                elif key == "pattern" and isinstance(value, str) and not checkable_pattern(value):
                    continue  # look-around or a backreference: the upstream still checks it (docs/gateway.md)
                else:
                    out[key] = value
        finally:
            self._nesting -= 1
        if "example" in out:
            example = out.pop("example")
            out.setdefault("examples", [example])
        return _from_openapi30(out) if self.openapi30 else out

    def defs(self, used: set[str]) -> JSONObject:
        reached: set[str] = set()
        pending = list(used)
        while pending:
            name = pending.pop()
            if name not in reached:
                reached.add(name)
                pending.extend(self._defs[name][1])
        return {name: self._defs[name][0] for name in sorted(reached)}

    def local(self, schema: Any) -> Any:
        """One self-contained schema: converted, with its `$defs`."""
        used: set[str] = set()
        converted = self.convert(schema, used)
        return {**converted, "$defs": self.defs(used)} if used else converted

    def resolve(self, schema: Any) -> Any:
        """The schema a chain of `$ref`s ends at (unconverted), to look inside it."""
        return self.document.deref(schema, ())

    def _define(self, ref: str, used: set[str]) -> str:
        name = self._names.get(ref)
        if name is None:
            name = self._names[ref] = self._new_name(ref)
            direct: set[str] = set()
            self._defs[name] = ({}, direct)  # placeholder first: a recursive schema refers to itself
            self._defining.append(ref)
            try:
                self._defs[name] = (self.convert(self.document.lookup(ref), direct), direct)
            finally:
                self._defining.pop()
        used.add(name)
        return name

    def _new_name(self, ref: str) -> str:
        tokens = [token.replace("~1", "/").replace("~0", "~") for token in ref.lstrip("#/").split("/")]
        named = tokens[-1] if tokens[:2] == ["components", "schemas"] and len(tokens) == 3 else "_".join(tokens)
        base = _NOT_DEF_NAME.sub("_", named).strip("_") or "schema"
        name, number = base, 2
        while name in self._defs:
            name, number = f"{base}_{number}", number + 1
        return name


def _from_openapi30(schema: JSONObject) -> JSONObject:
    for bound in ("Minimum", "Maximum"):
        exclusive = schema.get("exclusive" + bound)
        if isinstance(exclusive, bool):
            del schema["exclusive" + bound]
            if exclusive and bound.lower() in schema:
                schema["exclusive" + bound] = schema.pop(bound.lower())
    if schema.pop("nullable", False) is not True:
        return schema
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


_OFFLINE = jsonschema_rs.Registry([])  # with a registry, jsonschema-rs fetches no meta-schema it does not ship


def check_schema(schema: Any, parts: Sequence[str | int]) -> None:
    """A schema must be valid JSON Schema: 2020-12, or the JSON Schema draft its `$schema` names."""
    if isinstance(schema, bool):
        return
    dialect = schema.get("$schema")
    if isinstance(dialect, str) and "json-schema.org/" not in dialect:
        schema = {key: value for key, value in schema.items() if key != "$schema"}  # e.g. OpenAPI 3.1's dialect
    try:
        jsonschema_rs.meta.validate(schema, registry=_OFFLINE)
    except jsonschema_rs.ValidationError as exc:
        place = where([*parts, *typed_path(schema, exc.instance_path)])
        raise SpecError(f"{place}: not a valid JSON Schema: {trimmed(exc.message, 300)}") from None
    except jsonschema_rs.ReferencingError:
        raise SpecError(f"{where([*parts, '$schema'])}: unknown JSON Schema dialect {dialect!r}") from None


def check_annotations(value: Any, parts: Sequence[str | int]) -> JSONObject:
    """`x-crank-annotations`: MCP tool hints (booleans), `title` (a string); null removes a derived hint."""
    if not isinstance(value, dict):
        raise SpecError(f"{where(parts)}: x-crank-annotations must be an object")
    for key, hint in value.items():
        allowed: tuple[type, ...] = (str,) if key == "title" else (bool,)
        if key not in _HINT_NAMES:
            raise SpecError(f"{where([*parts, key])}: unknown annotation (known: {', '.join(sorted(_HINT_NAMES))})")
        if hint is not None and not isinstance(hint, allowed):
            raise SpecError(f"{where([*parts, key])}: must be {'a string' if key == 'title' else 'true or false'}")
    return value


_HINT_NAMES = frozenset({"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title"})


def merge_annotations(derived: JSONObject, overrides: JSONObject | None) -> JSONObject:
    merged = {**derived, **(overrides or {})}
    return {key: value for key, value in merged.items() if value is not None}


# -- what both importers build ----------------------------------------------------------------------


@dataclass
class Arguments:
    """The flattened `input_schema` of one tool and the `input_mapping` that puts each argument back."""

    schemas: Schemas
    properties: JSONObject = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    mapping: list[JSONObject] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    additional: Any = False

    def add(self, name: str, prefix: str, schema: Any, *, to: str, required: bool, description: Any = None) -> None:
        """One argument from a raw schema; renamed `<prefix>_<name>` when the name is taken."""
        argument = claim(name, prefix, set(self.properties))
        converted = self.schemas.convert(schema, self.used)
        if isinstance(description, str) and description.strip() and converted is not False:
            converted = {**(converted if isinstance(converted, dict) else {}), "description": trimmed(description)}
        self.properties[argument] = converted
        if required:
            self.required.append(argument)
        self.mapping.append({"from": argument, "to": to})

    def input_schema(self) -> JSONObject:
        schema: JSONObject = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = self.required
        schema["additionalProperties"] = self.additional
        if self.used:
            schema["$defs"] = self.schemas.defs(self.used)
        return schema


def server_url(
    server: JSONObject, parts: Sequence[str | int], *, option: str, operation: Sequence[str | int] = ()
) -> str:
    """A (validated) server's URL with its `{variables}` replaced by their defaults; must be absolute http(s), with
    no placeholder left in its scheme, host or port (`placeholder_in_origin`): a call's arguments would fill it.
    `operation`: where the operation that uses the server is, for the error."""
    url: str = server["url"]
    variables = server.get("variables") or {}
    filled: dict[str, str] = {}

    def fill(match: re.Match[str]) -> str:
        variable = variables.get(match[1]) if isinstance(variables, dict) else None
        if not isinstance(variable, dict) or "default" not in variable:
            raise SpecError(f"{where([*parts, 'url'])}: variable {match[1]!r} has no default in 'variables'")
        filled[match[1]] = str(variable["default"])
        return filled[match[1]]

    url = _TEMPLATE.sub(fill, url)
    if placeholder_in_origin(url):
        named = [name for name, value in filled.items() if "{" in value or "}" in value] or ["(none)"]
        used = f" (used by {where(operation)})" if operation else ""
        raise SpecError(f"{where([*parts, 'url'])}{used}: server variable {named[0]!r} leaves a placeholder in the "
                        f"host of {url!r}, which a call's arguments would fill; give it a real default or pass "
                        f"{option}")  # fmt: skip
    split = urlsplit(url)
    if split.scheme not in ("http", "https") or not split.netloc:
        raise SpecError(f"{where([*parts, 'url'])}: {url!r} is not an absolute http(s) URL; pass {option}")
    return url.rstrip("/")


def check_unique_names(named: Sequence[tuple[str, Sequence[str | int]]]) -> None:
    """Two operations may not become one tool: the registry keys operations by name."""
    seen: dict[str, Sequence[str | int]] = {}
    for name, parts in named:
        if name in seen:
            raise SpecError(
                f"{where(seen[name])} and {where(parts)} both become the tool {name!r}; "
                "leave one out with include, or rename one in the document"
            )
        seen[name] = parts
