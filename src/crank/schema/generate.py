"""Schemas of a Python callable: its parameters and its result, built once with pydantic.

The canonical form is OpenRPC's: shared models live under `#/components/schemas/<Name>`. A tool needs
a self-contained schema, so `tool_local` rewrites those references to the schema's own `$defs`
(recursive models included). The OpenRPC `result.schema` and the MCP `outputSchema` both come from
`MethodSchemas.output_schema`, so the two contracts agree.
"""

from __future__ import annotations

import copy
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticUndefined, SchemaValidator, core_schema

from crank.exceptions import ConfigurationError
from crank.types import JSONObject

__all__ = [
    "COMPONENTS_PREFIX",
    "DatetimeFormat",
    "MethodSchemas",
    "describe_method",
    "describe_output",
    "tool_local",
    "wrap_output",
]

COMPONENTS_PREFIX = "#/components/schemas/"
DatetimeFormat = Literal["date-time", "timestamp"]
_NO_OUTPUT = (Any, object, type(None), list)


class _Schema(GenerateJsonSchema):
    """pydantic's generator without per-field titles (noise for a model reading the schema)."""

    datetime_format: DatetimeFormat = "date-time"

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def datetime_schema(self, schema: core_schema.DatetimeSchema) -> JsonSchemaValue:
        if self.datetime_format == "timestamp":
            return {"type": "integer", "description": "Unix timestamp in seconds"}
        return super().datetime_schema(schema)


class _TimestampSchema(_Schema):
    datetime_format = "timestamp"


def _generator(datetime_format: DatetimeFormat) -> type[GenerateJsonSchema]:
    return _TimestampSchema if datetime_format == "timestamp" else _Schema


@dataclass(frozen=True)
class MethodSchemas:
    """Everything derived from a callable's signature and docstring, computed once."""

    params_model: type[BaseModel]
    input_schema: JSONObject  # canonical form, references into `components`
    output_schema: JSONObject | None  # canonical, not wrapped; None when the result's shape is not declared
    components: dict[str, JSONObject]
    summary: str | None
    description: str | None
    result_adapter: TypeAdapter[Any] | None
    context_parameter: str | None = None
    """The parameter given the call's context instead of an argument (annotated with `describe_method`'s
    `context`); in neither schema."""
    params_validator: SchemaValidator = field(init=False, repr=False, compare=False)
    """`params_model`'s own validator, what `model_validate` calls: the executor's one conversion per call."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "params_validator", self.params_model.__pydantic_validator__)


def describe_method(
    func: Callable[..., Any],
    *,
    name: str,
    output: Any = None,
    datetime_format: DatetimeFormat = "date-time",
    context: type | None = None,
) -> MethodSchemas:
    """Build the parameter model and the schemas of `func` (a function or an object with `__call__`).

    `output` overrides the result schema: a type (model, dataclass, ...) or a literal JSON Schema dict. A parameter
    annotated `context` is the call's context, not an argument: at most one, left out of the schemas.
    """
    target = func if inspect.isfunction(func) or inspect.ismethod(func) else type(func).__call__
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        raise ConfigurationError(f"method {name!r}: cannot resolve its type hints: {exc}") from None
    signature = inspect.signature(func)
    docs = docstring_parser.parse(inspect.getdoc(func) or "")
    described = {param.arg_name: param.description for param in docs.params if param.description}
    fields: dict[str, Any] = {}
    context_parameter = None
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(
                f"method {name!r}: *args and **kwargs cannot be published (parameter {param.name!r})"
            )
        annotation = hints.get(param.name, Any)
        if context is not None and annotation is context:
            if context_parameter is not None:
                raise ConfigurationError(f"method {name!r}: one parameter may take the call's context, not "
                                         f"{context_parameter!r} and {param.name!r}")  # fmt: skip
            context_parameter = param.name
            continue
        default = PydanticUndefined if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default=default, description=described.get(param.name)))
    generator = _generator(datetime_format)
    try:
        model = create_model(f"{_model_name(name)}Params", __config__=ConfigDict(extra="forbid"), **fields)
        input_schema = model.model_json_schema(ref_template=COMPONENTS_PREFIX + "{model}", schema_generator=generator)
    except Exception as exc:
        raise ConfigurationError(f"method {name!r}: parameters cannot be described as JSON Schema: {exc}") from None
    components: dict[str, JSONObject] = input_schema.pop("$defs", {})
    input_schema.pop("title", None)
    output_schema, adapter = _output(name, output, hints.get("return", inspect.Signature.empty), generator, components)
    components = dict(sorted(components.items()))
    summary = docs.short_description
    return MethodSchemas(model, input_schema, output_schema, components, summary, docs.long_description, adapter,
                         context_parameter)  # fmt: skip


def _output(
    name: str, output: Any, annotation: Any, generator: type[GenerateJsonSchema], components: dict[str, JSONObject]
) -> tuple[JSONObject | None, TypeAdapter[Any] | None]:
    """By priority: an explicit literal schema or type, then the return annotation; None when no shape is declared."""
    if isinstance(output, dict):
        return copy.deepcopy(output), None
    source = output if output is not None else annotation
    if _undeclared(source):
        return None, None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(source)
        schema = adapter.json_schema(ref_template=COMPONENTS_PREFIX + "{model}", schema_generator=generator)
    except Exception as exc:
        raise ConfigurationError(f"method {name!r}: result cannot be described as JSON Schema: {exc}") from None
    components.update(schema.pop("$defs", {}))
    if inspect.isclass(source) and "title" in schema:
        # A model, dataclass, TypedDict or enum is shared by reference, as in the parameters.
        components[schema["title"]] = schema
        schema = {"$ref": COMPONENTS_PREFIX + schema["title"]}
    return schema, adapter


def _undeclared(source: Any) -> bool:
    """No annotation, `Any`, `object`, `None` (a method that returns nothing), or a list without an item type
    (`list`, `list[Any]`). Seed 002: no schema is better than a stub like `{"type": "array"}` or `{"type":
    "null"}`, which tells a client nothing (or, for `object`, would reject a scalar)."""
    if source is inspect.Signature.empty or source in _NO_OUTPUT:
        return True
    return typing.get_origin(source) is list and typing.get_args(source) in ((), (Any,))


def describe_output(
    name: str, output: Any, components: dict[str, JSONObject], datetime_format: DatetimeFormat = "date-time"
) -> JSONObject | None:
    """The schema of an explicit result type or literal schema; new shared models are added to `components`."""
    schema, _ = _output(name, output, inspect.Signature.empty, _generator(datetime_format), components)
    return schema


def _model_name(method_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in method_name.replace("-", ".").replace("_", ".").split("."))


def wrap_output(schema: JSONObject) -> JSONObject:
    """Seed 001: the result travels as `{"result": ...}`, so its schema is wrapped the same way.

    Tool-local `$defs` move up to the wrapper: their `#/$defs/...` references resolve from the root.
    """
    if "$defs" not in schema:
        return {"type": "object", "properties": {"result": schema}, "required": ["result"]}
    inner = {key: value for key, value in schema.items() if key != "$defs"}
    return {"type": "object", "properties": {"result": inner}, "required": ["result"], "$defs": schema["$defs"]}


def tool_local(schema: JSONObject, components: dict[str, JSONObject]) -> JSONObject:
    """A self-contained copy: `#/components/schemas/X` becomes `#/$defs/X`, with every reachable definition."""
    needed: dict[str, JSONObject] = {}
    pending: list[str] = []

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                if key == "$ref" and isinstance(value, str) and value.startswith(COMPONENTS_PREFIX):
                    target = value[len(COMPONENTS_PREFIX) :]
                    if target not in needed and target not in pending:
                        pending.append(target)
                    out[key] = "#/$defs/" + target
                else:
                    out[key] = rewrite(value)
            return out
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    local: JSONObject = rewrite(schema)
    while pending:
        target = pending.pop()
        if target in needed:
            continue
        needed[target] = {}  # placeholder first: a recursive model refers to itself
        needed[target] = rewrite(components[target])
    if needed:
        local["$defs"] = dict(sorted(needed.items()))
    return local
