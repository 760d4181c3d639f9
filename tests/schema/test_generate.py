"""Python types to JSON Schema: every kind the issue lists, each with its own test."""

from __future__ import annotations

import datetime
import enum
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import annotated_types
import pytest
from pydantic import AnyUrl, BaseModel, EmailStr, Field
from typing_extensions import TypedDict

from crank.exceptions import ConfigurationError
from crank.schema import describe_method, tool_local, wrap_output
from crank.types import JSONObject

_MISSING = object()


class Color(enum.StrEnum):
    red = "red"
    blue = "blue"


class Level(enum.IntEnum):
    low = 1
    high = 2


class Item(BaseModel):
    name: str


class Tree(BaseModel):
    name: str
    children: list[Tree] = []


@dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    left: int
    right: int


def props(func: Any, **options: Any) -> dict[str, Any]:
    schemas = describe_method(func, name="m", **options)
    properties: dict[str, Any] = schemas.input_schema["properties"]
    return properties


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [(str, "string"), (int, "integer"), (float, "number"), (bool, "boolean"), (list, "array"), (dict, "object")],
)
def test_scalars_and_containers(annotation: Any, expected: str) -> None:
    def method(value):  # type: ignore[no-untyped-def]
        pass

    method.__annotations__ = {"value": annotation}
    assert props(method)["value"]["type"] == expected


def test_required_defaults_and_no_additional_properties() -> None:
    def method(who: str, times: int = 2) -> None: ...

    schema = describe_method(method, name="m").input_schema
    assert schema["required"] == ["who"]
    assert schema["properties"]["times"]["default"] == 2
    assert schema["additionalProperties"] is False


def test_list_of_models_is_a_ref() -> None:
    def method(items: list[Item]) -> None: ...

    assert props(method)["items"] == {"items": {"$ref": "#/components/schemas/Item"}, "type": "array"}


def test_dict_of_models_is_additional_properties() -> None:
    def method(by_name: dict[str, Item]) -> None: ...

    assert props(method)["by_name"] == {"additionalProperties": {"$ref": "#/components/schemas/Item"}, "type": "object"}


def test_optional() -> None:
    def method(note: str | None = None) -> None: ...

    assert props(method)["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]


def test_str_and_int_enums_and_literal() -> None:
    def method(color: Color, level: Level, mode: Literal["fast", "slow"]) -> None: ...

    schemas = describe_method(method, name="m")
    assert schemas.components["Color"]["enum"] == ["red", "blue"] and schemas.components["Color"]["type"] == "string"
    assert schemas.components["Level"]["enum"] == [1, 2] and schemas.components["Level"]["type"] == "integer"
    assert schemas.input_schema["properties"]["mode"] == {"enum": ["fast", "slow"], "type": "string"}


def test_datetime_as_string_or_timestamp_and_date() -> None:
    def method(at: datetime.datetime, day: datetime.date) -> None: ...

    assert props(method)["at"] == {"format": "date-time", "type": "string"}
    assert props(method, datetime_format="timestamp")["at"]["type"] == "integer"
    assert props(method)["day"] == {"format": "date", "type": "string"}


def test_annotated_constraints() -> None:
    def method(
        name: Annotated[str, annotated_types.MinLen(2), annotated_types.MaxLen(5)],
        count: Annotated[int, Field(ge=1, le=9)],
        positive: Annotated[float, Field(gt=0)],
        code: Annotated[str, Field(pattern=r"^[A-Z]{3}$")],
    ) -> None: ...

    found = props(method)
    assert found["name"] == {"maxLength": 5, "minLength": 2, "type": "string"}
    assert found["count"] == {"maximum": 9, "minimum": 1, "type": "integer"}
    assert found["positive"] == {"exclusiveMinimum": 0, "type": "number"}
    assert found["code"]["pattern"] == "^[A-Z]{3}$"


def test_email_and_url() -> None:
    def method(email: EmailStr, site: AnyUrl) -> None: ...

    assert props(method)["email"] == {"format": "email", "type": "string"}
    assert props(method)["site"]["format"] == "uri"


class Mystery:
    """A constraint no JSON Schema keyword expresses."""


def test_unknown_constraint_is_skipped() -> None:
    def method(value: Annotated[str, Mystery()]) -> None: ...

    assert props(method)["value"] == {"type": "string"}


def test_dataclass_and_typeddict_are_refs() -> None:
    def method(point: Point, pair: Pair) -> None: ...

    schemas = describe_method(method, name="m")
    assert schemas.input_schema["properties"]["point"] == {"$ref": "#/components/schemas/Point"}
    assert set(schemas.components) == {"Point", "Pair"}


@pytest.mark.parametrize(
    "doc",
    [
        "Greet.\n\nArgs:\n    who: Who is greeted\n",  # Google
        "Greet.\n\nParameters\n----------\nwho : str\n    Who is greeted\n",  # NumPy
        "Greet.\n\n:param who: Who is greeted\n",  # reST
    ],
    ids=["google", "numpy", "rest"],
)
def test_docstring_descriptions(doc: str) -> None:
    def method(who: str) -> None: ...

    method.__doc__ = doc
    schemas = describe_method(method, name="m")
    assert schemas.input_schema["properties"]["who"]["description"] == "Who is greeted"
    assert schemas.summary == "Greet."


def test_recursive_model_is_self_contained_in_tool_form() -> None:
    def method(tree: Tree) -> Tree: ...

    schemas = describe_method(method, name="m")
    local = tool_local(schemas.input_schema, schemas.components)
    assert local["properties"]["tree"] == {"$ref": "#/$defs/Tree"}
    assert local["$defs"]["Tree"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    assert "components" not in str(local)


def test_tool_form_carries_only_reachable_definitions() -> None:
    def method(item: Item, point: Point) -> None: ...

    schemas = describe_method(method, name="m")
    only_item = {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/Item"}}}
    assert set(tool_local(only_item, schemas.components)["$defs"]) == {"Item"}


class Out(BaseModel):
    total: int


def test_output_from_return_annotation() -> None:
    def method() -> list[Item]: ...

    schemas = describe_method(method, name="m")
    assert schemas.output_schema == {"items": {"$ref": "#/components/schemas/Item"}, "type": "array"}


def test_explicit_output_model_beats_annotation() -> None:
    def method() -> dict[str, Any]: ...

    assert describe_method(method, name="m", output=Out).output_schema == {"$ref": "#/components/schemas/Out"}


def test_literal_output_schema_is_used_as_is() -> None:
    def method() -> int: ...

    literal = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert describe_method(method, name="m", output=literal).output_schema == literal


@pytest.mark.parametrize(
    "annotation",
    [_MISSING, Any, object, None, list, typing.List, list[Any], typing.List[Any]],  # noqa: UP006
    ids=["missing", "Any", "object", "None", "list", "List", "list[Any]", "List[Any]"],
)
def test_no_output_schema_without_a_declared_shape(annotation: Any) -> None:
    def method():  # type: ignore[no-untyped-def]
        pass

    if annotation is not _MISSING:
        method.__annotations__ = {"return": annotation}
    assert describe_method(method, name="m").output_schema is None


def test_returning_none_or_a_bare_list_declares_no_output() -> None:
    def nothing() -> None: ...

    def rows() -> list:  # type: ignore[type-arg]
        return []

    assert describe_method(nothing, name="m").output_schema is None
    assert describe_method(rows, name="m").output_schema is None


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    ],
)
def test_typed_lists_and_optionals_keep_their_output(annotation: Any, expected: JSONObject) -> None:
    def method():  # type: ignore[no-untyped-def]
        pass

    method.__annotations__ = {"return": annotation}
    assert describe_method(method, name="m").output_schema == expected


def test_wrap_output() -> None:
    assert wrap_output({"type": "string"}) == {
        "type": "object",
        "properties": {"result": {"type": "string"}},
        "required": ["result"],
    }


def test_star_arguments_are_refused() -> None:
    def method(*args: int) -> None: ...

    with pytest.raises(ConfigurationError, match="'m'.*args"):
        describe_method(method, name="m")


def test_callable_object() -> None:
    class Adder:
        def __call__(self, a: int, b: int = 1) -> int:
            return a + b

    schemas = describe_method(Adder(), name="m")
    assert schemas.input_schema["required"] == ["a"] and schemas.output_schema == {"type": "integer"}


def test_wrapped_output_keeps_tool_local_definitions_resolvable() -> None:
    import jsonschema

    from crank.schema import wrap_output

    schema = {"$ref": "#/$defs/Order", "$defs": {"Order": {"type": "object", "required": ["id"],
                                                          "properties": {"id": {"type": "integer"}}}}}  # fmt: skip
    wrapped = wrap_output(schema)
    assert wrapped["$defs"] == schema["$defs"] and "$defs" not in wrapped["properties"]["result"]
    jsonschema.validate({"result": {"id": 1}}, wrapped)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"result": {"id": "x"}}, wrapped)
