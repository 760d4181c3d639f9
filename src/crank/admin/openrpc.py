"""OpenRPC 1.x documents -> operation drafts for the `jsonrpc` adapter, one per method.

Validation first, and nothing is returned unless it passes: the structure against the parts of the
OpenRPC 1.x meta-schema the importer relies on (below; evaluated by jsonschema-rs), then every `$ref`
resolves (`referencing`, local only), method names are unique and so are each method's parameter
names, and every schema is valid JSON Schema. Schemas are read as JSON Schema 2020-12, the dialect of
MCP tool schemas (OpenRPC names draft 7; the two agree on what OpenRPC documents commonly use).

Conversion: the name is the method name in snake_case (`Catalog.search` -> `catalog_search`); each
parameter becomes an argument of the same name (cleaned when it is not `[A-Za-z0-9_]{1,64}`) mapped to
`body.<param>`, which the `jsonrpc` adapter sends as `params`: by name. A method whose
`paramStructure` is `by-position` raises `SpecError` (the adapter cannot send a positional array;
leave the method out with `include`); `either`, the default, is sent by name. The output schema is
the result's schema (None when it is `{}`). No annotations are derived: a method name says nothing
reliable about effects; `x-crank-annotations` on a method sets them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import jsonschema_rs

from crank.admin.documents import (
    Arguments,
    Document,
    ImportedOperation,
    Include,
    Matcher,
    Progress,
    Schemas,
    argument_name,
    check_annotations,
    check_schema,
    check_unique_names,
    describe,
    json_copy,
    merge_annotations,
    report,
    server_url,
    structure_error,
    tool_name,
    where,
)
from crank.exceptions import SpecError
from crank.types import JSONObject

__all__ = ["import_openrpc"]

Parts = tuple[str | int, ...]

_REFERENCE = {"type": "object", "required": ["$ref"], "properties": {"$ref": {"type": "string"}}}
_EITHER = {"if": {"type": "object", "required": ["$ref"]}, "then": {"$ref": "#/$defs/reference"}}
_OPENRPC_SCHEMA: JSONObject = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["openrpc", "info", "methods"],
    "properties": {
        "openrpc": {"type": "string", "pattern": r"^1\.\d+\.\d+"},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "properties": {"title": {"type": "string"}, "version": {"type": "string"}},
        },
        "servers": {"type": "array", "items": {"$ref": "#/$defs/server"}},
        "methods": {"type": "array", "items": {**_EITHER, "else": {"$ref": "#/$defs/method"}}},
        "components": {
            "type": "object",
            "properties": {
                "schemas": {"type": "object", "additionalProperties": {"type": ["object", "boolean"]}},
                "contentDescriptors": {"type": "object", "additionalProperties": {"$ref": "#/$defs/descriptor"}},
                "tags": {"type": "object", "additionalProperties": {"$ref": "#/$defs/tag"}},
            },
        },
    },
    "$defs": {
        "reference": _REFERENCE,
        "server": {
            "type": "object",
            "required": ["url"],
            "properties": {
                "url": {"type": "string"},
                "variables": {
                    "type": "object",
                    "additionalProperties": {"type": "object", "required": ["default"]},
                },
            },
        },
        "tag": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        "descriptor": {
            "type": "object",
            "required": ["name", "schema"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "schema": {"type": ["object", "boolean"]},
                "required": {"type": "boolean"},
                "summary": {"type": "string"},
                "description": {"type": "string"},
                "deprecated": {"type": "boolean"},
            },
        },
        "method": {
            "type": "object",
            "required": ["name", "params"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "summary": {"type": "string"},
                "description": {"type": "string"},
                "params": {"type": "array", "items": {**_EITHER, "else": {"$ref": "#/$defs/descriptor"}}},
                "result": {**_EITHER, "else": {"$ref": "#/$defs/descriptor"}},
                "paramStructure": {"enum": ["by-name", "by-position", "either"]},
                "tags": {"type": "array", "items": {**_EITHER, "else": {"$ref": "#/$defs/tag"}}},
                "servers": {"type": "array", "items": {"$ref": "#/$defs/server"}},
                "deprecated": {"type": "boolean"},
            },
        },
    },
}
"""What the importer relies on of the OpenRPC 1.x meta-schema; other members are not checked."""


def import_openrpc(
    document: JSONObject,
    *,
    url: str | None = None,
    include: Include = None,
    progress: Progress = None,
) -> list[ImportedOperation]:
    """The methods of an OpenRPC 1.x document as drafts; raises `SpecError`, returning nothing.

    Each draft has `protocol: "jsonrpc"`, `target` (`{"url": url or the method's or document's first
    server, "method": <name>}`), `description`, `input_schema` and `input_mapping`, `output_schema`,
    `annotations` (only from `x-crank-annotations`) and `source` (`kind`, `method`, `tags`, `deprecated`).

    `include`: patterns matched against the tool name, the method name and the tags, e.g.
    `["catalog_*", "!*.delete"]`; or a callable `(name, source) -> bool`. `progress(done, total)` is
    called with 0 first, then after each converted method.
    """
    contents = json_copy(document)
    version = contents.get("openrpc")
    if version is None and ("openapi" in contents or "swagger" in contents):
        raise SpecError(
            "openapi: this is an OpenAPI document, not OpenRPC: import it as openapi (crank import openapi)"
        )
    if not isinstance(version, str) or not version.startswith("1."):
        raise SpecError(f"openrpc: {'missing' if version is None else repr(version)}: not an OpenRPC 1.x document")
    doc = Document(contents)
    methods = _validate(doc)
    matcher = Matcher(include)
    chosen = [(_name(parts, method), parts, method) for parts, method in methods]
    chosen = [item for item in chosen if matcher.keep(item[0], _source(doc, *item[1:]), _keys(doc, *item[1:]))]
    matcher.check_chosen(len(chosen), len(methods), "methods", "the tool name, the method name and the tags")
    check_unique_names([(name, parts) for name, parts, _ in chosen])
    schemas = Schemas(doc)
    imported: list[ImportedOperation] = []
    report(progress, 0, len(chosen))
    for name, parts, method in chosen:
        imported.append(ImportedOperation(name, _convert(schemas, parts, method, url)))
        report(progress, len(imported), len(chosen))
    return imported


@functools.cache
def _validator() -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(_OPENRPC_SCHEMA, offline=True)


def _validate(doc: Document) -> list[tuple[Parts, JSONObject]]:
    structure_error(_validator().iter_errors(doc.contents), doc.contents)
    doc.check_references()
    methods: list[tuple[Parts, JSONObject]] = []
    names: dict[str, Parts] = {}
    for index, raw in enumerate(doc.contents["methods"]):
        parts: Parts = ("methods", index)
        method = doc.deref(raw, parts)
        if not isinstance(method, dict) or not isinstance(method.get("name"), str) or "params" not in method:
            raise SpecError(f"{where(parts)}: not a Method Object")
        if method["name"] in names:
            raise SpecError(
                f"{where(parts)}: method {method['name']!r} is described by {where(names[method['name']])} too"
            )
        names[method["name"]] = parts
        _check_method(doc, parts, method)
        methods.append((parts, method))
    for name, schema in ((doc.contents.get("components") or {}).get("schemas") or {}).items():
        check_schema(schema, ("components", "schemas", name))
    return methods


def _check_method(doc: Document, parts: Parts, method: JSONObject) -> None:
    seen: set[str] = set()
    for param_parts, param in _params(doc, parts, method):
        if param["name"] in seen:
            raise SpecError(f"{where(param_parts)}: parameter {param['name']!r} is declared twice")
        seen.add(param["name"])
        check_schema(param["schema"], (*param_parts, "schema"))
    result = _result(doc, parts, method)
    if result is not None:
        check_schema(result["schema"], (*parts, "result", "schema"))
    if "x-crank-annotations" in method:
        check_annotations(method["x-crank-annotations"], (*parts, "x-crank-annotations"))


def _params(doc: Document, parts: Parts, method: JSONObject) -> Iterator[tuple[Parts, JSONObject]]:
    for index, raw in enumerate(method["params"]):
        param_parts = (*parts, "params", index)
        yield param_parts, _descriptor(doc, raw, param_parts)


def _result(doc: Document, parts: Parts, method: JSONObject) -> JSONObject | None:
    return _descriptor(doc, method["result"], (*parts, "result")) if "result" in method else None


def _descriptor(doc: Document, raw: Any, parts: Parts) -> JSONObject:
    descriptor = doc.deref(raw, parts)
    if not isinstance(descriptor, dict) or not isinstance(descriptor.get("name"), str) or "schema" not in descriptor:
        raise SpecError(f"{where(parts)}: not a Content Descriptor")
    return descriptor


def _name(parts: Parts, method: JSONObject) -> str:
    name = tool_name(method["name"])
    if not name:
        raise SpecError(f"{where([*parts, 'name'])}: {method['name']!r} has no letter or digit to name a tool by")
    return name


def _tags(doc: Document, parts: Parts, method: JSONObject) -> list[str]:
    tags = [doc.deref(tag, (*parts, "tags", index)) for index, tag in enumerate(method.get("tags") or [])]
    return [tag["name"] for tag in tags if isinstance(tag, dict) and isinstance(tag.get("name"), str)]


def _keys(doc: Document, parts: Parts, method: JSONObject) -> list[str]:
    return [method["name"], *_tags(doc, parts, method)]


def _source(doc: Document, parts: Parts, method: JSONObject) -> JSONObject:
    source: JSONObject = {"kind": "openrpc", "method": method["name"], "tags": _tags(doc, parts, method)}
    if method.get("deprecated") is True:
        source["deprecated"] = True
    return source


def _convert(schemas: Schemas, parts: Parts, method: JSONObject, url: str | None) -> JSONObject:
    doc = schemas.document
    if method.get("paramStructure") == "by-position":
        raise SpecError(f"{where([*parts, 'paramStructure'])}: 'by-position' is not supported, the jsonrpc adapter "
                        "sends params by name; leave the method out with include")  # fmt: skip
    arguments = Arguments(schemas)
    for _, param in _params(doc, parts, method):
        arguments.add(argument_name(param["name"]), "param", param["schema"], to=f"body.{param['name']}",
                      required=param.get("required") is True, description=param.get("description"))  # fmt: skip
    result = _result(doc, parts, method)
    output = schemas.local(result["schema"]) if result is not None and result["schema"] not in ({}, True) else None
    spec: JSONObject = {
        "protocol": "jsonrpc",
        "target": {"url": url if url is not None else _url(doc, parts, method), "method": method["name"]},
        "description": describe(method.get("summary"), method.get("description")) or method["name"],
        "input_schema": arguments.input_schema(),
        "input_mapping": arguments.mapping,
        "output_schema": output,
        "source": _source(doc, parts, method),
    }
    if "x-crank-annotations" in method:
        spec["annotations"] = merge_annotations({}, method["x-crank-annotations"])
    copied: JSONObject = json_copy(spec)  # definitions that tools share must not be shared objects
    return copied


def _url(doc: Document, parts: Parts, method: JSONObject) -> str:
    for owner_parts, owner in ((parts, method), ((), doc.contents)):
        servers = owner.get("servers")
        if servers:
            return server_url(servers[0], (*owner_parts, "servers", 0), option="url")
    raise SpecError(f"{where(parts)}: the document names no server; pass url")
