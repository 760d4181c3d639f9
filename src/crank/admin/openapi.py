"""OpenAPI 3.0 and 3.1 documents -> operation drafts, one per path and method.

Validation comes first and nothing is returned unless all of it passes. openapi-spec-validator's
full `validate()` took 8-10 s (3.0) and 14-19 s (3.1) on a generated 1,000-operation document of
2.2 MB (2 cores): its second pass re-checks every Schema Object with Python `jsonschema` and keeps
visited schemas in lists. So the importer runs the same checks in parts, 0.1 s in all on that
document (the whole import: 0.2-0.4 s):

1. the structure, against the official OpenAPI meta-schema that openapi-spec-validator ships
   (`schema_v30`, `schema_v31`), evaluated by jsonschema-rs (openapi-spec-validator's own fast
   backend); the most specific error is reported with its place;
2. every `$ref` resolves (`referencing`, local references only; see `crank.admin.documents`);
3. what a meta-schema cannot say: operationIds and parameters are unique, path templates and
   path parameters agree, `x-crank-annotations` are hints; in 3.1, Schema Objects are valid JSON Schema.

Conversion, per operation (`import_openapi` says what each part of the draft is):

- name: the operationId in snake_case (`getUserById` -> `get_user_by_id`); without one, the method
  and the path, a `{param}` read as `by_param` (`GET /users/{id}/posts` -> `get_users_by_id_posts`).
  Two operations with one name raise `SpecError` naming both (the registry keys operations by name).
- arguments: path, query and header parameters (header names lowercased: `X-Trace` -> `x_trace`;
  `Accept`, `Content-Type` and `Authorization` are ignored as OpenAPI says; cookie parameters are
  left out, since the http adapter sends no cookies), then the body: an object body's fields
  become arguments (`allOf` members merged, `readOnly` fields left out, the object's own `required`
  kept even when `requestBody.required` is omitted), any other body is one `body` argument. A taken
  name gets its location as prefix (`body_id`, `header_id`). Each argument has an explicit mapping
  rule. The input schema refuses other arguments unless the body allows additional properties.
- bodies: of the body's media types, JSON is taken first (`application/json`, a `+json` type, `*/*`), then
  a form (`application/x-www-form-urlencoded`), multipart (`multipart/form-data`), text and a file
  (`crank.registry.runtime.body_kind`). A body that is not JSON is recorded in `execution_config.body`
  (`BodyConfig`: its media type; a form's `deepObject` fields; a multipart body's file fields, each a
  `format: binary` string or a 3.1 `contentMediaType` without `contentEncoding`, which take base64 or a
  `data:` URL: `crank.gateway.bodies`). A body Crank cannot write as described (a form described as a
  string, XML described as an object) makes the operation one Crank cannot call when it is required:
  skipped (named in the result's `skipped`, or `SpecError` with `strict`); an optional one is left out.
- annotations: what RFC 9110 says of the method. GET, HEAD, OPTIONS, TRACE are safe (`readOnlyHint`);
  PUT and DELETE are idempotent and may destroy or overwrite (`destructiveHint: true`); POST and PATCH
  are neither read-only nor idempotent, and whether they destroy is not known, so `destructiveHint`
  is left out (MCP then assumes true). Every tool has `openWorldHint: true`. An operation's
  `x-crank-annotations` object overrides these (null removes one).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

from crank.admin.documents import (
    Arguments,
    Document,
    Imported,
    ImportedOperation,
    Include,
    Matcher,
    Progress,
    Schemas,
    SkippedOperation,
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
from crank.exceptions import SpecError, UnsupportedOperationError
from crank.gateway.bodies import FILE_ARGUMENT
from crank.gateway.client import placeholder_in_origin
from crank.registry.runtime import SCHEME_NAME, body_kind, is_secure_url, media_type_problem
from crank.types import JSONObject

__all__ = ["import_openapi"]

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_HINTS: dict[str, JSONObject] = {
    **dict.fromkeys(("GET", "HEAD", "OPTIONS", "TRACE"), {"readOnlyHint": True}),
    **dict.fromkeys(("PUT", "DELETE"), {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}),
    **dict.fromkeys(("POST", "PATCH"), {"readOnlyHint": False, "idempotentHint": False}),
}
_LOCATIONS = ("path", "query", "header")
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})  # OpenAPI 3.x, Parameter Object
_TEMPLATE = re.compile(r"{([^{}]+)}")
_NOT_OBJECT = ("oneOf", "anyOf", "not", "if", "patternProperties")

Parts = tuple[str | int, ...]


class _Unwritable(Exception):
    """A body Crank cannot write as described: the operation is skipped when the body is required."""


@dataclass(frozen=True)
class _Operation:
    parts: Parts  # ("paths", path, method)
    path: str
    method: str  # upper case
    operation: JSONObject
    path_item: JSONObject


def import_openapi(
    document: JSONObject,
    *,
    base_url: str | None = None,
    include: Include = None,
    progress: Progress = None,
    strict: bool = False,
) -> Imported:
    """The operations of an OpenAPI 3.0 or 3.1 document as drafts; raises `SpecError`, returning nothing. An
    operation Crank cannot call as described (a required body it cannot write) is left out and named in the
    result's `skipped`; `strict` refuses the document for it instead (naming the option that leaves it out).

    Each draft has `protocol: "http"`, `target` (`{"method", "url"}`: `base_url`, or the first server
    of the operation, path or document with its variables' defaults, followed by the path, whose
    `{placeholders}` stay), `description` (summary and description), `input_schema` and
    `input_mapping`, `output_schema` (the JSON schema of the 200, else 201, else first 2xx response,
    else `default` when there is no 2xx; None when none is JSON), `annotations` and `source`
    (`kind`, `operation_id`, `method`, `path`, `tags`, `deprecated`: import metadata).

    `include`: patterns (see `crank.admin.documents`) matched against the name, the operationId, the
    tags and `METHOD /path`, e.g. `["pets*", "!delete_*"]`; or a callable `(name, source) -> bool`.
    `progress(done, total)` is called with 0 first, then after each converted operation.
    """
    if base_url is not None and placeholder_in_origin(base_url):
        raise SpecError(f"base_url {base_url!r} has a placeholder in its host, which a call's arguments would fill")
    contents = json_copy(document)
    version = _version(contents)
    doc = Document(contents)
    _validate(doc, version)
    operations = _select(list(_walk(doc)), Matcher(include))
    converter = _Converter(Schemas(doc, openapi30=version == "3.0"), base_url)
    imported: list[ImportedOperation] = []
    skipped: list[SkippedOperation] = []
    report(progress, 0, len(operations))
    for name, operation in operations:
        try:
            imported.append(ImportedOperation(name, converter.convert(operation)))
        except UnsupportedOperationError as unsupported:
            if strict:
                raise SpecError(f"{unsupported}; leave the operation out with the include pattern '!{name}'") from None
            skipped.append(SkippedOperation(name, f"{operation.method} {operation.path}", unsupported.reason))
        report(progress, len(imported) + len(skipped), len(operations))
    return Imported(imported, skipped)


def _version(contents: JSONObject) -> str:
    if "openrpc" in contents:
        raise SpecError(
            "openrpc: this is an OpenRPC document, not OpenAPI: import it as openrpc (crank import openrpc)"
        )
    if "swagger" in contents:
        raise SpecError("swagger: Swagger 2.0 is not supported; convert the document to OpenAPI 3 first")
    version = contents.get("openapi")
    if not isinstance(version, str):
        raise SpecError("openapi: missing: not an OpenAPI 3 document")
    if version.startswith(("3.0.", "3.1.")):
        return version[:3]
    raise SpecError(f"openapi: version {version!r} is not supported (3.0.x and 3.1.x are)")


# -- validation -------------------------------------------------------------------------------------


@functools.cache
def _meta_validator(version: str) -> jsonschema_rs.Validator:
    # Imported here: openapi-spec-validator takes 0.2 s to import, which `import crank.admin` need not pay.
    from openapi_spec_validator.schemas import schema_v30, schema_v31

    return jsonschema_rs.validator_for(dict(schema_v30 if version == "3.0" else schema_v31), offline=True)


def _validate(doc: Document, version: str) -> None:
    structure_error(_meta_validator(version).iter_errors(doc.contents), doc.contents)
    doc.check_references()
    operation_ids: dict[str, Parts] = {}
    for operation in _walk(doc):
        _check_operation(doc, operation, operation_ids)
        if version == "3.1":
            for parts, schema in _schemas_of(doc, operation):
                check_schema(schema, parts)
    if version == "3.1":
        for name, schema in (doc.contents.get("components") or {}).get("schemas", {}).items():
            check_schema(schema, ("components", "schemas", name))


def _check_operation(doc: Document, op: _Operation, operation_ids: dict[str, Parts]) -> None:
    operation_id = op.operation.get("operationId")
    if isinstance(operation_id, str):
        if operation_id in operation_ids:
            raise SpecError(
                f"{where(op.parts)}: operationId {operation_id!r} is used by {where(operation_ids[operation_id])} too"
            )
        operation_ids[operation_id] = op.parts
    parameters = _parameters(doc, op)
    declared = {param["name"]: parts for parts, param in parameters if param["in"] == "path"}
    templated = _TEMPLATE.findall(op.path)
    for name in templated:
        if name not in declared:
            raise SpecError(f"{where(op.parts)}: path parameter {name!r} of {op.path!r} is not declared")
    for name, parts in declared.items():
        if name not in templated:
            raise SpecError(f"{where(parts)}: path parameter {name!r} is not in the path {op.path!r}")
    if "x-crank-annotations" in op.operation:
        check_annotations(op.operation["x-crank-annotations"], (*op.parts, "x-crank-annotations"))


def _schemas_of(doc: Document, op: _Operation) -> Iterator[tuple[Parts, Any]]:
    """The Schema Objects an operation declares in place (those in components are checked there)."""
    for parts, param in _parameters(doc, op):
        if "schema" in param:
            yield (*parts, "schema"), param["schema"]
        yield from _content_schemas(param.get("content"), parts)
    body = op.operation.get("requestBody")
    parts = (*op.parts, "requestBody")
    yield from _content_schemas(_body_content(doc, body, parts) if body is not None else None, parts)
    for code, response in (op.operation.get("responses") or {}).items():
        parts = (*op.parts, "responses", code)
        resolved = doc.deref(response, parts)
        yield from _content_schemas(resolved.get("content") if isinstance(resolved, dict) else None, parts)


def _content_schemas(content: Any, parts: Parts) -> Iterator[tuple[Parts, Any]]:
    for media_type, media in (content or {}).items():
        if isinstance(media, dict) and "schema" in media:
            yield (*parts, "content", media_type, "schema"), media["schema"]


# -- the operations ---------------------------------------------------------------------------------


def _walk(doc: Document) -> Iterator[_Operation]:
    for path, raw in (doc.contents.get("paths") or {}).items():
        if path.startswith("x-"):
            continue
        item = doc.deref(raw, ("paths", path))
        if not isinstance(item, dict):
            raise SpecError(f"{where(('paths', path))}: not a Path Item Object")
        for method in _METHODS:
            if isinstance(item.get(method), dict):
                yield _Operation(("paths", path, method), path, method.upper(), item[method], item)


def _parameters(doc: Document, op: _Operation) -> list[tuple[Parts, JSONObject]]:
    """Path-item and operation parameters, resolved; the operation's replace the path item's."""
    merged: dict[tuple[str, str], tuple[Parts, JSONObject]] = {}
    for owner_parts, owner in ((op.parts[:2], op.path_item), (op.parts, op.operation)):
        seen: set[tuple[str, str]] = set()
        for index, raw in enumerate(owner.get("parameters") or []):
            parts = (*owner_parts, "parameters", index)
            param = doc.deref(raw, parts)
            if not isinstance(param, dict) or not isinstance(param.get("name"), str) or "in" not in param:
                raise SpecError(f"{where(parts)}: not a Parameter Object")
            name = param["name"].lower() if param["in"] == "header" else param["name"]
            if (name, param["in"]) in seen:
                raise SpecError(f"{where(parts)}: parameter {param['name']!r} in {param['in']} is declared twice")
            seen.add((name, param["in"]))
            merged[(name, param["in"])] = (parts, param)
    return list(merged.values())


def _body_content(doc: Document, body: Any, parts: Parts) -> JSONObject:
    resolved = doc.deref(body, parts)
    if not isinstance(resolved, dict) or not isinstance(resolved.get("content"), dict):
        raise SpecError(f"{where(parts)}: not a Request Body Object")
    content: JSONObject = resolved["content"]
    return content


def _select(operations: list[_Operation], matcher: Matcher) -> list[tuple[str, _Operation]]:
    chosen = []
    for op in operations:
        name = _name(op)
        keys = [op.operation.get("operationId") or "", *_tags(op), f"{op.method} {op.path}"]
        if matcher.keep(name, _source(op), keys):
            chosen.append((name, op))
    matcher.check_chosen(len(chosen), len(operations), "operations", "the name, operationId, tags and 'METHOD /path'")
    check_unique_names([(name, op.parts) for name, op in chosen])
    return chosen


def _name(op: _Operation) -> str:
    operation_id = op.operation.get("operationId")
    name = tool_name(operation_id) if isinstance(operation_id, str) else ""
    if name:
        return name
    segments = [_TEMPLATE.sub(r"by_\1", segment) for segment in op.path.split("/")]
    return tool_name("_".join([op.method.lower(), *segments])) or op.method.lower()


def _tags(op: _Operation) -> list[str]:
    return [tag for tag in op.operation.get("tags") or [] if isinstance(tag, str)]


def _source(op: _Operation) -> JSONObject:
    source: JSONObject = {"kind": "openapi", "operation_id": op.operation.get("operationId"), "method": op.method,
                          "path": op.path, "tags": _tags(op)}  # fmt: skip
    if op.operation.get("deprecated") is True:
        source["deprecated"] = True
    return source


# -- conversion -------------------------------------------------------------------------------------


def _requirement(name: str, scheme: Any, scopes: Any) -> JSONObject | None:
    """A Security Scheme Object as what an operation requires (`crank.registry.runtime.SecurityRequirement`), or
    None for one Crank cannot send (mutual TLS, an http scheme other than bearer and basic). OAuth 2 with a
    client-credentials flow at an https token URL is fetched by the gateway; any other OAuth 2 flow, and OpenID
    Connect, need a token the operator obtains: a bearer credential. An authorization code flow is kept beside it
    (`authorization_code`): a workspace credential with a `connection` lets each user connect their own account
    there instead."""
    if not isinstance(scheme, dict) or re.fullmatch(SCHEME_NAME, name) is None:
        return None  # a name Crank would have to print quoted in every report: left out, like an unknown kind
    kind = scheme.get("type")
    if kind == "apiKey" and scheme.get("in") in ("header", "query", "cookie") and isinstance(scheme.get("name"), str):
        return {"scheme": name, "type": scheme["in"], "name": scheme["name"]}
    if kind == "http" and str(scheme.get("scheme", "")).lower() in ("bearer", "basic"):
        return {"scheme": name, "type": str(scheme["scheme"]).lower()}
    if kind == "oauth2":
        flows = _object(scheme.get("flows"))
        listed = [scope for scope in scopes if isinstance(scope, str)] if isinstance(scopes, list) else []
        token_url = _object(flows.get("clientCredentials")).get("tokenUrl")
        found: JSONObject = {"scheme": name, "type": "bearer"}
        if isinstance(token_url, str) and is_secure_url(token_url):  # never a client secret in clear text
            found = {"scheme": name, "type": "oauth2", "token_url": token_url, "scopes": listed}
        code = _authorization_code(flows.get("authorizationCode"))
        if code is not None:  # where each user may connect their own account (a workspace's `connection`)
            found = {**found, "authorization_code": code, "scopes": listed}
        return found
    if kind == "openIdConnect":
        return {"scheme": name, "type": "bearer"}
    return None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _authorization_code(flow: Any) -> JSONObject | None:
    """An authorization code flow whose two endpoints are https (http on loopback only), or None."""
    if not isinstance(flow, dict):
        return None
    urls = flow.get("authorizationUrl"), flow.get("tokenUrl")
    if not all(isinstance(url, str) and is_secure_url(url) for url in urls):
        return None
    return {"authorization_url": urls[0], "token_url": urls[1]}


def _idempotency(arguments: Arguments) -> JSONObject | None:
    """An `Idempotency-Key` header parameter makes its argument the operation's idempotency key, so the
    gateway itself guarantees one effect per key (see `crank.gateway.safety`)."""
    for rule in arguments.mapping:
        place, _, name = str(rule["to"]).partition(".")
        if place == "header" and name.lower() == "idempotency-key":
            return {"argument": rule["from"], "header": name}
    return None


class _Converter:
    def __init__(self, schemas: Schemas, base_url: str | None) -> None:
        self.schemas = schemas
        self.doc = schemas.document
        self.base_url = base_url.rstrip("/") if base_url is not None else None

    def convert(self, op: _Operation) -> JSONObject:
        arguments = Arguments(self.schemas)
        parameters = _parameters(self.doc, op)
        for location in _LOCATIONS:
            for _, param in parameters:
                if param["in"] == location and not (location == "header" and param["name"].lower() in _IGNORED_HEADERS):
                    self._parameter(arguments, param)
        body = self._body(arguments, op) if "requestBody" in op.operation else None
        derived = {**_HINTS[op.method], "openWorldHint": True}
        description = describe(op.operation.get("summary"), op.operation.get("description"))
        spec = {
            "protocol": "http",
            "target": {"method": op.method, "url": self._url(op) + op.path},
            "description": description or f"{op.method} {op.path}",
            "input_schema": arguments.input_schema(),
            "input_mapping": arguments.mapping,
            "output_schema": self._output(op),
            "annotations": merge_annotations(derived, op.operation.get("x-crank-annotations")),
            "source": _source(op),
        }
        execution: JSONObject = {"body": body} if body is not None else {}
        idempotency = _idempotency(arguments)
        if idempotency is not None:
            execution["idempotency"] = idempotency
        requires = self._requires(op)
        if requires:
            execution["requires"] = requires
        if execution:
            spec["execution_config"] = execution
        # A copy per draft: definitions that tools share must not be shared objects.
        copied: JSONObject = json_copy(spec)
        return copied

    def _requires(self, op: _Operation) -> list[JSONObject]:
        """The security alternatives of the operation (its own `security`, else the document's) that Crank can
        send, in order: one scheme each (an alternative of several schemes at once is left out). An empty
        alternative (`{}`) makes credentials optional: nothing is required then."""
        security = op.operation.get("security", self.doc.contents.get("security")) or []
        if not isinstance(security, list) or any(alternative == {} for alternative in security):
            return []
        schemes = ((self.doc.contents.get("components") or {}).get("securitySchemes")) or {}
        requires = []
        for alternative in security:
            if not isinstance(alternative, dict) or len(alternative) != 1:
                continue
            ((name, scopes),) = alternative.items()
            definition = self.doc.deref(schemes.get(name), ("components", "securitySchemes", name))
            requirement = _requirement(name, definition, scopes)
            if requirement is not None:
                requires.append(requirement)
        return requires

    def _parameter(self, arguments: Arguments, param: JSONObject) -> None:
        location, name = param["in"], param["name"]
        schema = param.get("schema")
        if schema is None:  # `content` instead of `schema`: one media type
            media: Any = next(iter((param.get("content") or {}).values()), {})
            schema = media.get("schema", {}) if isinstance(media, dict) else {}
        if param.get("deprecated") is True and isinstance(schema, dict):
            schema = {**schema, "deprecated": True}
        arguments.add(
            argument_name(name, lower=location == "header"), location, schema, to=f"{location}.{name}",
            required=location == "path" or param.get("required") is True, description=param.get("description"),
        )  # fmt: skip

    def _body(self, arguments: Arguments, op: _Operation) -> JSONObject | None:
        """The body's arguments; returns the `execution_config.body` of a body that is not JSON."""
        parts = (*op.parts, "requestBody")
        body = self.doc.deref(op.operation["requestBody"], parts)
        content = _body_content(self.doc, body, parts)
        required = body.get("required") is True
        try:
            chosen = _request_media(content)
            if chosen is None:
                return None
            media_type, media = chosen
            kind = body_kind(media_type)
            schema = media.get("schema", {})
            if kind in ("form", "multipart"):
                return self._fields_body(arguments, body, media_type, media, required=required)
            if kind in ("text", "binary"):
                self._whole_body(arguments, body, media_type, schema, required=required)
                return {"content_type": media_type}
        except _Unwritable as unwritable:
            if required:
                raise UnsupportedOperationError(where(parts), str(unwritable)) from None
            return None  # an optional body Crank cannot write is left out
        self._json_body(arguments, body, schema, required=required)
        return None

    def _json_body(self, arguments: Arguments, body: JSONObject, schema: Any, *, required: bool) -> None:
        fields = self._fields(schema, ())
        if fields is None:
            arguments.add("body", "body", schema, to="body", required=required, description=body.get("description"))
            return
        properties, field_required, additional = fields
        for name, field_schema in properties.items():
            arguments.add(argument_name(name), "body", field_schema, to=f"body.{name}", required=name in field_required)
        if additional not in (None, False):
            arguments.additional = self.schemas.convert(additional, arguments.used)

    def _fields_body(
        self, arguments: Arguments, body: JSONObject, media_type: str, media: JSONObject, *, required: bool
    ) -> JSONObject:
        """A form or multipart body: its fields are arguments, as a JSON object body's are; a multipart field that
        is a file (`format: binary`, or a `contentMediaType` without `contentEncoding`) takes base64 or a `data:`
        URL. A form field whose `encoding` says `style: deepObject` is sent so."""
        schema = media.get("schema", {})
        config: JSONObject = {"content_type": media_type}
        fields = self._fields(schema, ())
        if fields is None:
            resolved = self.schemas.resolve(schema)
            declared = resolved.get("type") if isinstance(resolved, dict) else None
            if declared not in (None, "object") and not (isinstance(declared, list) and "object" in declared):
                raise _Unwritable(f"its {media_type} body is described as {declared}, not as the object of fields "
                                  "Crank sends")  # fmt: skip
            arguments.add("body", "body", schema, to="body", required=required, description=body.get("description"))
            return config
        properties, field_required, additional = fields
        encoding = media.get("encoding")
        styles = {name: rule.get("style") for name, rule in encoding.items() if isinstance(rule, dict)} if isinstance(
            encoding, dict) else {}  # fmt: skip
        kind = body_kind(media_type)
        files, deep = [], []
        for name, field_schema in properties.items():
            argument, is_required = argument_name(name), name in field_required
            file_schema = self._file_schema(field_schema) if kind == "multipart" else None
            if file_schema is not None:
                files.append(name)
                arguments.add(argument, "body", file_schema, to=f"body.{name}", required=is_required,
                              description=_file_description(self.schemas.resolve(field_schema)))  # fmt: skip
                continue
            if kind == "form" and styles.get(name) == "deepObject":
                deep.append(name)
            arguments.add(argument, "body", field_schema, to=f"body.{name}", required=is_required)
        if additional not in (None, False):
            arguments.additional = self.schemas.convert(additional, arguments.used)
        if files:
            config["files"] = files
        if deep:
            config["deep_objects"] = deep
        return config

    def _whole_body(
        self, arguments: Arguments, body: JSONObject, media_type: str, schema: Any, *, required: bool
    ) -> None:
        """A text body is one string argument, a file body one file argument."""
        resolved = self.schemas.resolve(schema)
        declared = resolved.get("type", "string") if isinstance(resolved, dict) else "string"
        if declared != "string":
            raise _Unwritable(f"its {media_type} body is described as {declared}, not as the string or file Crank "
                              "sends")  # fmt: skip
        if body_kind(media_type) == "text":
            arguments.add("body", "body", schema, to="body", required=required, description=body.get("description"))
        else:
            arguments.add("body", "body", {"type": "string"}, to="body", required=required,
                          description=_file_description(body))  # fmt: skip

    def _file_schema(self, schema: Any) -> JSONObject | None:
        """The argument schema of a multipart field that is a file (or an array of files), None for any other."""
        resolved = self.schemas.resolve(schema)
        if not isinstance(resolved, dict):
            return None
        if resolved.get("type") == "array":
            return {"type": "array", "items": {"type": "string"}} if self._file_schema(resolved.get("items")) else None
        is_file = resolved.get("format") == "binary" or (
            "contentMediaType" in resolved and "contentEncoding" not in resolved
        )
        return {"type": "string"} if resolved.get("type", "string") == "string" and is_file else None

    def _fields(self, schema: Any, seen: tuple[str, ...]) -> tuple[JSONObject, list[str], Any] | None:
        """The fields of an object schema (its `allOf` merged), or None when it is not a plain object."""
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if ref in seen:
            return None
        resolved = self.schemas.resolve(schema)
        kind = resolved.get("type", "object") if isinstance(resolved, dict) else None
        if kind != "object" and not (isinstance(kind, list) and "object" in kind):
            return None
        if any(keyword in resolved for keyword in _NOT_OBJECT):
            return None
        properties = {name: sub for name, sub in (resolved.get("properties") or {}).items() if not self._read_only(sub)}
        required = list(resolved.get("required") or [])
        for member in resolved.get("allOf") or []:
            merged = self._fields(member, (*seen, ref) if isinstance(ref, str) else seen)
            if merged is None:
                return None
            for name, sub in merged[0].items():
                properties[name] = {"allOf": [properties[name], sub]} if name in properties else sub
            required += merged[1]
        if not properties or "" in properties:
            return None
        return (
            properties,
            [name for name in dict.fromkeys(required) if name in properties],
            resolved.get("additionalProperties"),
        )

    def _read_only(self, schema: Any) -> bool:
        """OpenAPI: a `readOnly` property SHOULD NOT be sent in a request."""
        return any(
            isinstance(node, dict) and node.get("readOnly") is True for node in (schema, self.schemas.resolve(schema))
        )

    def _output(self, op: _Operation) -> Any:
        responses = op.operation.get("responses") or {}
        codes = sorted((code for code in responses if code.startswith("2")), key=lambda c: (c != "200", c != "201", c))
        for code in codes or [code for code in ("default",) if code in responses]:
            response = self.doc.deref(responses[code], (*op.parts, "responses", code))
            content = response.get("content") if isinstance(response, dict) else None
            media = _json_media(content) if isinstance(content, dict) else None
            if media is not None and media.get("schema") not in (None, {}, True):
                return self.schemas.local(media["schema"])
        return None

    def _url(self, op: _Operation) -> str:
        if self.base_url is not None:
            return self.base_url
        owners: list[tuple[Parts, JSONObject]] = [
            (op.parts, op.operation),
            (op.parts[:2], op.path_item),
            ((), self.doc.contents),
        ]
        for parts, owner in owners:
            servers = owner.get("servers")
            if servers:
                return server_url(servers[0], (*parts, "servers", 0), option="base_url", operation=op.parts)
        raise SpecError(f"{where(op.parts)}: the document names no server; pass base_url")


def _json_media(content: JSONObject) -> JSONObject | None:
    """The JSON media type of a `content` map: `application/json`, then a `+json` type, then `*/*`."""
    chosen = _request_media({media_type: media for media_type, media in content.items() if _json_rank(media_type)})
    return chosen[1] if chosen is not None else None


def _request_media(content: JSONObject) -> tuple[str, JSONObject] | None:
    """The media type a request body is sent as, and its Media Object: JSON first (as `_json_media` ranks them),
    then a form, multipart, text and a file (`crank.registry.runtime.body_kind`)."""
    ranked = sorted(
        ((_BODY_RANKS[body_kind(media_type)], _json_rank(media_type) or 0, index), media_type)
        for index, (media_type, media) in enumerate(content.items())
        # JSON goes as `application/json` whatever its key says; any other type becomes the request's header.
        if isinstance(media, dict) and (_json_rank(media_type) is not None or media_type_problem(media_type) is None)
    )
    if not ranked:
        if content:
            raise _Unwritable(f"its body's media types ({', '.join(map(repr, content))}) are none Crank can send")
        return None
    media_type = ranked[0][1]
    return media_type, content[media_type]


def _json_rank(media_type: str) -> int | None:
    """1 for `application/json`, 2 for a `+json` type, 3 for `*/*`; None for any other type."""
    essence = media_type.split(";")[0].strip().lower()
    return 1 if essence == "application/json" else 2 if essence.endswith("+json") else 3 if essence == "*/*" else None


def _file_description(owner: Any) -> str:
    """A file argument's description: how to pass a file first (compaction keeps a first sentence), then its own."""
    own = owner.get("description") if isinstance(owner, dict) else None
    return FILE_ARGUMENT + (f" {own.strip()}" if isinstance(own, str) and own.strip() else "")


_BODY_RANKS = {"json": 0, "form": 1, "multipart": 2, "text": 3, "binary": 4}
