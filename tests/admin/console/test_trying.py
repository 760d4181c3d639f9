"""Try it's form from a schema, the arguments a filled form gives, and how each kind of answer is read."""

from __future__ import annotations

import httpx
import pytest

from crank.admin.console.trying import MAX_ARGUMENTS_BYTES, _answer, form_fields, read_arguments

SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "note": {"type": "string", "description": "A note."},
        "id": {"type": "integer"},
        "ratio": {"type": "number"},
        "urgent": {"type": "boolean"},
        "size": {"enum": ["s", "m", 3, None]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "_crank_confirmation_token": {"type": "string"},
    },
}


def test_a_schema_makes_one_control_per_argument_required_first_and_never_the_token() -> None:
    fields = form_fields(SCHEMA)
    assert [(field.name, field.kind, field.required) for field in fields] == [
        ("id", "integer", True), ("note", "text", False), ("ratio", "number", False), ("urgent", "boolean", False),
        ("size", "choice", False), ("tags", "json", False),
    ]  # fmt: skip
    assert fields[4].choices == ("s", "m", "3", "null") and fields[1].description == "A note."
    assert form_fields(None) == []


def test_a_filled_form_gives_typed_arguments_and_leaves_empty_ones_out() -> None:
    fields = form_fields(SCHEMA)
    form = {"id": "-7", "ratio": "2.5", "urgent": "false", "size": "3", "tags": '["a", "b"]', "note": ""}
    assert read_arguments(fields, form) == (
        {"id": -7, "ratio": 2.5, "urgent": False, "size": 3, "tags": ["a", "b"]},
        [],
    )
    assert read_arguments(fields, {"id": "1", "size": "null"}) == ({"id": 1, "size": None}, [])


def test_values_that_cannot_be_their_type_are_named() -> None:
    fields = form_fields(SCHEMA)
    form = {"id": "1.5", "ratio": "much", "size": "xl", "tags": "[unclosed"}
    _, problems = read_arguments(fields, form)
    assert problems == ["id: a whole number is expected", "ratio: a number is expected",
                        "size: choose one of the listed values", "tags: JSON is expected"]  # fmt: skip
    _, too_big = read_arguments(fields, {"id": "1", "note": "x" * (MAX_ARGUMENTS_BYTES + 1)})
    assert too_big == [f"the arguments hold more than {MAX_ARGUMENTS_BYTES} bytes of JSON"]


def answer(body: bytes, status: int = 200, kind: str = "application/json") -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": kind})


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (answer(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}'), {"error": {"code": -32602}}),
        (answer(b"<html>", 502, "text/html"), {"error": {"message": "the endpoint answered 502 without JSON"}}),
        (answer(b"[1]"), {"error": {"message": "the endpoint's answer is not a JSON-RPC response"}}),
        (answer(b'{"id":1,"result":{"isError":true,"content":[{"type":"text","text":"plain words"}]}}'),
         {"error": {"message": "plain words"}}),
        (answer(b'{"id":1,"result":{"isError":false,"content":[{"type":"text","text":"hi"}]}}'),
         {"texts": {"text": "hi"}}),
        (answer(b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n'
                b'data: {"jsonrpc":"2.0","id":1,"result":{"isError":false,"structuredContent":{"a":1},'
                b'"content":[{"type":"text","text":"{}"}]}}\n\n', kind="text/event-stream"),
         {"structured": '{\n  "a": 1\n}'}),
        (answer(b": only a comment\n\n", kind="text/event-stream"), {"error": {"message": "the endpoint answered 200 "
                                                                               "without JSON"}}),
    ],
)  # fmt: skip
def test_each_kind_of_answer_is_read(response: httpx.Response, expected: dict[str, object]) -> None:
    read = _answer(response)
    for name, value in expected.items():
        got = getattr(read, name)
        if isinstance(value, dict) and isinstance(got, dict):
            assert {key: got.get(key) for key in value} == value
        else:
            assert got == value
