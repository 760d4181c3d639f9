"""Bodies beyond JSON (crank.gateway.bodies): forms as OpenAPI and Stripe write them, multipart read back by the
parser Starlette serves forms with, text, files given as base64 or `data:` URLs, and the bounds on files."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import anyio
import pytest
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from crank.admin.actions import publish_agent
from crank.exceptions import ConfigurationError, MappingError
from crank.gateway.bodies import BodyWriter, decode_file
from crank.registry import Registry, tool_from_spec
from crank.registry.runtime import MAX_UPLOAD_BYTES, BodyConfig, body_kind
from crank.server import GatewayService
from mcp import Client

FORM = "application/x-www-form-urlencoded"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def write(body: Any, content_type: str, **config: Any) -> tuple[bytes, str]:
    return BodyWriter(BodyConfig(content_type=content_type, **config)).write(body)


def form_pairs(body: Any, **config: Any) -> list[tuple[str, str]]:
    written, content_type = write(body, FORM, **config)
    assert content_type == FORM
    return parse_qsl(written.decode(), keep_blank_values=True)


def parsed_multipart(written: bytes, content_type: str) -> list[tuple[str, Any]]:
    """The parts as Starlette (python-multipart) reads them: (name, text or (filename, type, bytes))."""

    async def read() -> list[tuple[str, Any]]:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": written, "more_body": False}

        scope = {"type": "http", "method": "POST", "headers": [(b"content-type", content_type.encode())]}
        form = await Request(scope, receive).form()
        parts: list[tuple[str, Any]] = []
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                parts.append((name, (value.filename, value.content_type, await value.read())))
            else:
                parts.append((name, value))
        await form.close()
        return parts

    return anyio.run(read)


def test_a_form_writes_scalars_as_text_repeats_arrays_and_spreads_objects_as_openapi_says() -> None:
    body = {"name": "Ada & co", "count": 3, "ok": True, "skip": None, "tag": ["a", "b"], "color": {"R": 1, "G": 2}}
    assert form_pairs(body) == [
        ("name", "Ada & co"), ("count", "3"), ("ok", "true"), ("tag", "a"), ("tag", "b"), ("R", "1"), ("G", "2"),
    ]  # fmt: skip


def test_a_deep_object_field_is_written_as_stripe_reads_it_to_any_depth() -> None:
    body = {
        "email": "a@b.c",
        "address": {"city": "Oslo", "line1": None},
        "expand": ["customer", "invoice"],
        "tax_id_data": [{"type": "eu_vat", "value": "NO1"}],
    }
    pairs = form_pairs(body, deep_objects=("address", "expand", "tax_id_data"))
    assert pairs == [
        ("email", "a@b.c"), ("address[city]", "Oslo"), ("expand[0]", "customer"), ("expand[1]", "invoice"),
        ("tax_id_data[0][type]", "eu_vat"), ("tax_id_data[0][value]", "NO1"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "content_type", "config"),
    [
        ({"f": {"K" * 20_000: list(range(2_000))}}, FORM, {"deep_objects": ("f",)}),  # a long key on every item
        ({"K" * 20_000: [1] * 2_000}, FORM, {}),  # a long field name repeated
        ({"K" * 20_000: [1] * 2_000}, "multipart/form-data", {}),  # a part each
    ],
)
def test_a_short_argument_cannot_make_a_large_form_or_multipart_body(
    body: Any, content_type: str, config: dict[str, Any]
) -> None:
    """Under 100 KB of arguments would write 40 MB of pairs or parts: refused as they are made, nothing built."""
    with pytest.raises(MappingError, match=f"more than {MAX_UPLOAD_BYTES} bytes") as refused:
        write(body, content_type, **config)
    assert refused.value.error_code == "arguments_too_large" and refused.value.recoverable


def test_a_form_key_cannot_stand_for_another_field() -> None:
    with pytest.raises(MappingError, match="may not hold '\\[' or '\\]'"):
        write({"metadata": {"a][x": "1"}}, FORM, deep_objects=("metadata",))
    with pytest.raises(MappingError, match="has a property 'amount', which a form would send as the field"):
        write({"amount": 100, "address": {"amount": "0"}}, FORM)


def test_text_goes_as_utf_8_and_json_of_any_type_as_json() -> None:
    assert write("é", "text/plain; charset=iso-8859-1; format=flowed") == (
        "é".encode(), "text/plain; format=flowed; charset=utf-8"
    )  # fmt: skip
    assert write({"a": 1}, "application/*+json") == (b'{"a":1}', "application/json")
    assert write({"a": 1}, "application/vnd.api+json") == (b'{"a":1}', "application/vnd.api+json")


def test_a_multipart_body_has_a_part_per_field_and_files_from_data_urls_or_base64() -> None:
    png = "data:image/png;name=" + "cat%20%22one%22.png" + ";base64," + base64.b64encode(PNG).decode()
    body = {
        "title": "Cat",
        "size": 2,
        "tags": ["a", "b"],
        "meta": {"x": [1]},
        "photo": png,
        "notes": ["data:,hello%20there", base64.b64encode(b"raw").decode()],
        "skip": None,
    }
    written, content_type = write(body, "multipart/form-data", files=("photo", "notes"))
    assert content_type.startswith("multipart/form-data; boundary=crank-")
    assert parsed_multipart(written, content_type) == [
        ("title", "Cat"), ("size", "2"), ("tags", "a"), ("tags", "b"), ("meta", '{"x":[1]}'),
        ("photo", ("cat %22one%22.png", "image/png", PNG)),  # quotes escaped as browsers do (RFC 7578, 4.2)
        ("notes", ("notes", "application/octet-stream", b"hello there")),  # a data: URL without a type or name
        ("notes", ("notes", "application/octet-stream", b"raw")),
    ]  # fmt: skip
    assert b'Content-Type: application/json\r\n\r\n{"x":[1]}' in written  # an object is one JSON part


def test_a_field_name_a_file_name_or_a_file_type_cannot_break_out_of_its_part() -> None:
    evil = "data:image/png\r\nX-Evil: 1;name=a%0D%0AX-Evil: 2;base64,R0lG"
    written, content_type = write({'a"\r\nX-Evil: 1': "v", "f": evil}, "multipart/form-data", files=("f",))
    assert b"\r\nX-Evil" not in written
    assert parsed_multipart(written, content_type) == [
        ("a%22%0D%0AX-Evil: 1", "v"), ("f", ("a%0D%0AX-Evil: 2", "application/octet-stream", b"GIF")),
    ]  # fmt: skip


def test_text_and_file_bodies() -> None:
    assert write("<a>é</a>", "application/xml") == ("<a>é</a>".encode(), "application/xml; charset=utf-8")
    assert write(base64.b64encode(PNG).decode(), "image/png") == (PNG, "image/png")
    # A wildcard type takes the data: URL's own type, which must match it.
    assert write("data:image/gif;base64,R0lG", "image/*") == (b"GIF", "image/gif")
    # A type that is not `type/subtype` never becomes a header: a line break would start another one.
    for value in ("R0lG", "data:text/plain;base64,R0lG", "data:image/png\r\nX-Evil: 1;base64,R0lG", "data:image/*,x"):
        with pytest.raises(MappingError, match="pass it as a data: URL that names its type") as refused:
            write(value, "image/*")
        assert refused.value.recoverable
    with pytest.raises(MappingError, match="the body of a text/plain call is a string, not an object"):
        write({"a": 1}, "text/plain")
    with pytest.raises(MappingError, match="a multipart/form-data body is an object of fields, not an array"):
        write([1], "multipart/form-data")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/etc/passwd", "neither base64 nor a data: URL"),  # never read from anywhere
        ("aGVsbG8", "neither base64 nor a data: URL"),  # unpadded
        ("data:image/png;base64", "a data: URL without its ','"),
        ("data:image/png;base64,@@@", "a data: URL whose content is not base64"),
        (12, "not a number"),
    ],
)
def test_a_value_that_is_not_a_file_is_refused_saying_what_to_send(value: Any, problem: str) -> None:
    with pytest.raises(MappingError) as refused:
        decode_file(value, where="argument for 'photo'")
    error = refused.value
    assert str(error) == f"argument for 'photo' is a file: {problem}" and error.recoverable
    assert error.suggested_action is not None and "data:image/png;name=cat.png;base64," in error.suggested_action


def test_the_files_of_one_call_are_bounded_before_they_are_decoded() -> None:
    with pytest.raises(MappingError) as refused:
        decode_file("A" * (MAX_UPLOAD_BYTES * 2), where="body")
    assert refused.value.error_code == "file_too_large" and refused.value.recoverable
    # Two files each within the bound, together over it.
    half = base64.b64encode(b"\0" * (MAX_UPLOAD_BYTES // 2 + 1)).decode()
    with pytest.raises(MappingError, match=f"at most {MAX_UPLOAD_BYTES} bytes"):
        write({"a": half, "b": half}, "multipart/form-data", files=("a", "b"))
    written, _ = write({"a": half}, "multipart/form-data", files=("a",))
    assert len(written) > MAX_UPLOAD_BYTES // 2


@pytest.mark.parametrize(
    ("content_type", "kind"),
    [
        ("application/json", "json"), ("application/vnd.api+json; charset=utf-8", "json"), ("*/*", "json"),
        ("Application/X-WWW-Form-Urlencoded", "form"), ("multipart/form-data", "multipart"), ("text/csv", "text"),
        ("application/soap+xml", "text"), ("application/pdf", "binary"), ("image/*", "binary"),
    ],
)  # fmt: skip
def test_the_kind_of_a_body_follows_its_media_type(content_type: str, kind: str) -> None:
    assert body_kind(content_type) == kind


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"content_type": "json"}, "'json' is not a media type"),
        ({"content_type": "text/plain\r\nX-Evil: 1"}, "is not a media type"),
        ({"content_type": "text/*"}, "only a JSON or a file body's media type may have a wildcard"),
        ({"content_type": FORM, "files": ["a"]}, "files: only a multipart/form-data body has them"),
        ({"content_type": "multipart/form-data", "deep_objects": ["a"]}, "deep_objects: only a form body"),
    ],
)
def test_a_body_config_that_cannot_be_sent_fails_the_publish(body: dict[str, Any], message: str) -> None:
    spec = {"tool_name": "x", "protocol": "http", "target": {"url": "http://x"}, "execution_config": {"body": body}}
    with pytest.raises(ConfigurationError, match=message):
        tool_from_spec(spec)


def test_a_json_rpc_call_has_a_json_body() -> None:
    spec = {"tool_name": "x", "protocol": "jsonrpc", "target": {"url": "http://x", "method": "a.b"},
            "execution_config": {"body": {"content_type": FORM}}}  # fmt: skip
    with pytest.raises(ConfigurationError, match="a JSON-RPC call's body is always JSON"):
        tool_from_spec(spec)


@pytest.mark.anyio
async def test_form_and_multipart_calls_reach_a_real_server_as_it_parses_them(
    sqlite_registry: Registry, serve: Callable[..., str]
) -> None:
    """Through the whole gateway (MCP client, mapping, adapter, upstream client): a Starlette upstream reads the
    form and the multipart body with its own parser. A value that is not a file, and files over the bound (with
    the MCP request bound raised past it), are refused before anything is sent."""
    seen: list[dict[str, Any]] = []

    async def record(request: Request) -> JSONResponse:
        form = await request.form()
        fields: dict[str, Any] = {}
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                value = [value.filename, value.content_type, (await value.read()).decode()]
            fields.setdefault(name, []).append(value)
        await form.close()
        seen.append({"content_type": request.headers["content-type"].split(";")[0], "fields": fields})
        return JSONResponse({"ok": True})

    base = serve(Starlette(routes=[Route("/{kind}", record, methods=["POST"])]))
    upload = {"type": "object", "properties": {"title": {"type": "string"}, "photo": {"type": "string"}}}
    customer = {"type": "object", "properties": {"email": {"type": "string"}, "address": {"type": "object"}}}
    operations = {
        "create_customer": {"protocol": "http", "target": {"method": "POST", "url": base + "/form"},
                            "description": "x", "input_schema": customer,
                            "execution_config": {"body": {"content_type": FORM, "deep_objects": ["address"]}}},
        "upload_photo": {"protocol": "http", "target": {"method": "POST", "url": base + "/multipart"},
                         "description": "x", "input_schema": upload,
                         "execution_config": {"body": {"content_type": "multipart/form-data", "files": ["photo"]}}},
        "replace_photo": {"protocol": "http", "target": {"method": "PUT", "url": base + "/multipart"},
                          "description": "x", "input_schema": upload,
                          "execution_config": {"confirmation": True,
                                               "body": {"content_type": "multipart/form-data", "files": ["photo"]}}},
    }  # fmt: skip
    sqlite_registry.create_workspace("acme", "Acme")
    for name, spec in operations.items():
        sqlite_registry.put_operation("acme", name, spec)
    sqlite_registry.put_agent("acme", "desk", {"bindings": [{"operation": name} for name in operations]})
    publish_agent(sqlite_registry, "acme", "desk")
    gateway = GatewayService(sqlite_registry, require_api_keys=False, max_body_size=40 * 1024 * 1024)
    url = serve(gateway) + "/mcp/v1/acme/desk"
    too_large = base64.b64encode(b"\0" * (MAX_UPLOAD_BYTES + 1)).decode()
    async with Client(url, mode="auto") as client:
        created = await client.call_tool("create_customer", {"email": "a@b.c", "address": {"city": "Oslo"}})
        photo = f"data:image/png;name=cat.png;base64,{base64.b64encode(b'png!').decode()}"
        uploaded = await client.call_tool("upload_photo", {"title": "Cat", "photo": photo})
        not_a_file = await client.call_tool("upload_photo", {"title": "Cat", "photo": "/etc/passwd"})
        huge = await client.call_tool("upload_photo", {"photo": too_large})
        # A call that must be confirmed, whose file cannot be sent: refused before the user is asked to confirm it.
        unconfirmable = await client.call_tool("replace_photo", {"photo": "/etc/passwd"})
    assert not created.is_error and not uploaded.is_error
    assert seen == [
        {"content_type": FORM, "fields": {"email": ["a@b.c"], "address[city]": ["Oslo"]}},
        {"content_type": "multipart/form-data",
         "fields": {"title": ["Cat"], "photo": [["cat.png", "image/png", "png!"]]}},
    ]  # fmt: skip
    refused = [json.loads(result.content[0].text) for result in (not_a_file, huge, unconfirmable)]
    assert [error["error_code"] for error in refused] == ["mapping_error", "file_too_large", "mapping_error"]
    assert refused[0]["message"] == "argument for 'photo' is a file: neither base64 nor a data: URL"
    assert all(error["recoverable"] for error in refused) and len(seen) == 2  # neither was sent
