"""OpenAPI import: the drafts made from real documents in tests/admin/specs, the requests those drafts
make, errors that name the place, and loading documents from files and URLs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.admin.documents import DESCRIPTION_LIMIT, load_document
from crank.admin.openapi import import_openapi
from crank.exceptions import SpecError
from crank.gateway.bodies import FILE_ARGUMENT
from crank.gateway.client import UpstreamClient
from crank.gateway.mapping import InputMapping
from crank.gateway.operation import RemoteOperation
from crank.mcp.tools import TOOL_NAME_PATTERN
from crank.mcp.validation import ArgumentValidator
from crank.registry import Registry, migrate, open_engine, tool_from_spec
from crank.sources.agents import build_catalog
from crank.types import JSONObject
from tests import realapis

SPECS = Path(__file__).parent / "specs"
SERVER = "https://eu.pets.example.com/v1"


def load(name: str) -> JSONObject:
    return load_document(str(SPECS / name))


def drafts(name: str, **options: Any) -> dict[str, JSONObject]:
    return {operation.name: operation.spec for operation in import_openapi(load(name), **options)}


@pytest.fixture(scope="module")
def petstore() -> dict[str, JSONObject]:
    return drafts("petstore.yaml")


@pytest.fixture(scope="module")
def library() -> dict[str, JSONObject]:
    return drafts("library.json", base_url="https://library.example.com/")


# -- names, targets, texts --------------------------------------------------------------------------


def test_one_draft_per_path_and_method_named_from_the_operation_id_or_the_method_and_path(
    petstore: dict[str, JSONObject],
) -> None:
    assert list(petstore) == [
        "list_pets", "create_pet", "get_pet_by_id", "replace_pet", "delete_pets_by_pet_id", "upload_photo",
        "set_tags", "add_owner_pet", "get_tree",
    ]  # fmt: skip
    assert all(TOOL_NAME_PATTERN.match(name) for name in petstore)
    assert {spec["protocol"] for spec in petstore.values()} == {"http"}


def test_target_is_the_first_server_with_variable_defaults_and_the_path_with_its_placeholders(
    petstore: dict[str, JSONObject],
) -> None:
    assert petstore["list_pets"]["target"] == {"method": "GET", "url": SERVER + "/pets"}
    assert petstore["replace_pet"]["target"] == {"method": "PUT", "url": SERVER + "/pets/{petId}"}
    assert petstore["add_owner_pet"]["target"] == {"method": "POST", "url": SERVER + "/owners/{name}/pets"}
    local = drafts("petstore.yaml", base_url="http://127.0.0.1:8080/", include=["get_tree"])
    assert local["get_tree"]["target"] == {"method": "GET", "url": "http://127.0.0.1:8080/trees/{id}"}


def test_a_relative_server_needs_base_url_and_an_operation_may_name_its_own_server() -> None:
    with pytest.raises(SpecError, match=r"^servers\[0\]\.url: '/api' is not an absolute http\(s\) URL; pass base_url"):
        import_openapi(load("library.json"))
    stats = drafts("library.json", include=["get_stats"])
    assert stats["get_stats"]["target"]["url"] == "https://stats.library.example.com/stats"
    document = load("petstore.yaml")
    del document["servers"]
    with pytest.raises(SpecError, match="names no server; pass base_url"):
        import_openapi(document)


@pytest.mark.parametrize(
    ("url", "default"),
    [("http://{item_id}:8080/api", "{item_id}"), ("{scheme}://api.example.com", "{scheme}"),
     ("https://api.example.com:{port}/v1", "{port}"), ("https://{host}/v1", "{host}")],
)  # fmt: skip
def test_a_server_variable_that_leaves_a_placeholder_in_the_host_is_refused(url: str, default: str) -> None:
    """A call's arguments fill `{placeholders}`: one left in the scheme, host or port would send the request, and
    the credentials bound to the operation's origin, wherever the arguments say (issue 36, hole 7)."""
    name = default.strip("{}")
    document = {
        "openapi": "3.1.0", "info": {"title": "Items", "version": "1"},
        "servers": [{"url": url, "variables": {name: {"default": default}}}],
        "paths": {"/items/{item_id}": {"get": {
            "operationId": "getItem", "responses": {"200": {"description": "ok"}},
            "parameters": [{"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        }}},
    }  # fmt: skip
    with pytest.raises(SpecError) as refused:
        import_openapi(document)
    message = str(refused.value)
    assert message.startswith("servers[0].url (used by paths./items/{item_id}.get): ")
    assert f"server variable {name!r} leaves a placeholder in the host" in message and "\n" not in message
    with pytest.raises(SpecError, match="base_url .* has a placeholder in its host"):
        import_openapi(document, base_url="http://{tenant}.example.com")
    fine = import_openapi(document, base_url="https://api.example.com")  # a placeholder in the path is an argument's
    assert fine[0].spec["target"]["url"] == "https://api.example.com/items/{item_id}"


def test_description_keeps_summary_and_description(
    petstore: dict[str, JSONObject], library: dict[str, JSONObject]
) -> None:
    assert petstore["list_pets"]["description"] == (
        "List pets.\n\nPets in the store, newest first.\n\nSold pets are included."
    )
    assert petstore["replace_pet"]["description"] == "Replace a pet's data."
    assert petstore["delete_pets_by_pet_id"]["description"] == "Delete a pet."
    assert library["search_books"]["description"] == "Search books. Matches titles and subtitles."  # not repeated
    assert library["book_exists"]["description"] == "HEAD /books/{isbn}"
    document = load("petstore.yaml")
    document["paths"]["/pets"]["get"]["description"] = "word " * 1000
    long = import_openapi(document, include=["list_pets"])[0].spec["description"]
    assert len(long) <= DESCRIPTION_LIMIT and long.endswith("word…")


def test_source_keeps_the_import_metadata(petstore: dict[str, JSONObject], library: dict[str, JSONObject]) -> None:
    assert petstore["create_pet"]["source"] == {
        "kind": "openapi", "operation_id": "createPet", "method": "POST", "path": "/pets", "tags": ["pets"],
    }  # fmt: skip
    assert petstore["delete_pets_by_pet_id"]["source"]["operation_id"] is None
    assert library["update_book"]["source"]["deprecated"] is True


# -- arguments and mappings -------------------------------------------------------------------------


def test_parameters_and_body_fields_become_one_input_schema_with_a_rule_each(petstore: dict[str, JSONObject]) -> None:
    create = petstore["create_pet"]
    schema = create["input_schema"]
    assert list(schema["properties"]) == ["x_trace_id", "name", "tag", "status", "owner"]
    assert schema["required"] == ["name"] and schema["additionalProperties"] is False
    assert schema["properties"]["x_trace_id"] == {
        "type": "string",
        "description": "Correlates the logs of one request.",
    }
    assert schema["properties"]["name"] == {"type": "string", "description": "The pet's name."}
    assert create["input_mapping"] == [
        {"from": "x_trace_id", "to": "header.X-Trace-Id"}, {"from": "name", "to": "body.name"},
        {"from": "tag", "to": "body.tag"}, {"from": "status", "to": "body.status"},
        {"from": "owner", "to": "body.owner"},
    ]  # fmt: skip


def test_query_and_header_parameters_but_no_cookie_or_accept(petstore: dict[str, JSONObject]) -> None:
    listing = petstore["list_pets"]
    assert listing["input_mapping"] == [
        {"from": "limit", "to": "query.limit"}, {"from": "status", "to": "query.status"},
        {"from": "x_trace_id", "to": "header.X-Trace-Id"},
    ]  # fmt: skip
    properties = listing["input_schema"]["properties"]
    # OpenAPI 3.0 `exclusiveMaximum: true` becomes the JSON Schema number form.
    assert properties["limit"] == {"type": "integer", "minimum": 1, "exclusiveMaximum": 100,
                                   "description": "How many pets at most."}  # fmt: skip
    assert properties["status"] == {"type": "array", "items": {"$ref": "#/$defs/Status"}}
    assert "required" not in listing["input_schema"]


def test_path_item_parameters_are_required_and_keep_their_description(petstore: dict[str, JSONObject]) -> None:
    schema = petstore["get_pet_by_id"]["input_schema"]
    assert schema["properties"] == {"petId": {"type": "integer", "format": "int64", "description": "The pet's id."}}
    assert schema["required"] == ["petId"]
    assert petstore["get_pet_by_id"]["input_mapping"] == [{"from": "petId", "to": "path.petId"}]


def test_a_body_field_named_like_a_parameter_is_renamed(petstore: dict[str, JSONObject]) -> None:
    add = petstore["add_owner_pet"]
    assert add["input_mapping"][:2] == [{"from": "name", "to": "path.name"}, {"from": "body_name", "to": "body.name"}]
    assert add["input_schema"]["required"] == ["name", "body_name"]


def test_all_of_members_are_merged_and_read_only_fields_left_out(petstore: dict[str, JSONObject]) -> None:
    schema = petstore["replace_pet"]["input_schema"]
    assert list(schema["properties"]) == ["petId", "name", "tag", "status", "owner", "born"]  # no `id`: readOnly
    assert schema["required"] == ["petId", "name"]
    assert schema["properties"]["born"] == {"type": "string", "format": "date", "examples": ["2020-01-31"]}


def test_nullable_becomes_a_null_type(petstore: dict[str, JSONObject]) -> None:
    schema = petstore["create_pet"]["input_schema"]
    assert schema["properties"]["tag"] == {"type": ["string", "null"], "examples": ["dog"]}
    assert schema["$defs"]["Status"] == {"type": ["string", "null"], "enum": ["available", "sold", None]}
    assert schema["$defs"]["Owner"]["properties"]["partner"] == {  # no type to extend: null is an alternative
        "anyOf": [{"allOf": [{"$ref": "#/$defs/Owner"}]}, {"type": "null"}]
    }
    assert "nullable" not in json.dumps(schema)


def test_a_body_that_is_no_object_is_one_argument_and_a_file_body_one_file_argument(
    petstore: dict[str, JSONObject],
) -> None:
    tags = petstore["set_tags"]
    assert tags["input_schema"]["properties"]["body"] == {
        "type": "array", "items": {"type": "string"}, "description": "Every tag of the pet."
    }  # fmt: skip
    assert tags["input_schema"]["required"] == ["petId", "body"]
    assert tags["input_mapping"] == [{"from": "petId", "to": "path.petId"}, {"from": "body", "to": "body"}]
    photo = petstore["upload_photo"]
    assert photo["input_mapping"] == [{"from": "petId", "to": "path.petId"}, {"from": "body", "to": "body"}]
    assert photo["input_schema"]["required"] == ["petId"]  # the body is optional
    assert photo["input_schema"]["properties"]["body"] == {"type": "string", "description": FILE_ARGUMENT}
    assert photo["execution_config"]["body"] == {"content_type": "image/png"}


def test_bodies_that_are_not_plain_objects_are_one_argument() -> None:
    def operation(schema: Any) -> JSONObject:
        body = {"content": {"application/json": {"schema": schema}}}
        return {"post": {"requestBody": body, "responses": {"204": {"description": "Done."}}}}

    component = {"$ref": "#/components/schemas/Loop"}
    document: JSONObject = {
        "openapi": "3.1.0",
        "info": {"title": "Bodies", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {
            "/one-of": operation({"oneOf": [{"type": "object"}, {"type": "string"}]}),
            "/free-form": operation({"type": "object", "additionalProperties": True}),
            "/not-object-member": operation(
                {"allOf": [{"type": "object", "properties": {"a": {}}}, {"type": "string"}]}
            ),
            "/loop": operation(component),
            "/unnamed": operation({"type": "object", "properties": {"": {"type": "string"}}}),
        },
        "components": {"schemas": {"Loop": {"type": "object", "properties": {"a": {}}, "allOf": [component]}}},
    }
    for imported in import_openapi(document):
        assert imported.spec["input_mapping"] == [{"from": "body", "to": "body"}], imported.name


def test_taken_argument_names_and_definition_names_get_a_number() -> None:
    document: JSONObject = {
        "openapi": "3.1.0",
        "info": {"title": "Names", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": {"/things/{id}": {"put": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}},
                           {"name": "body_id", "in": "query", "schema": {"type": "integer"}}],
            "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {
                "id": {"type": "integer"}, "a": {"$ref": "#/components/schemas/A/properties/x"},
                "b": {"$ref": "#/components/schemas/components_schemas_A_properties_x"}}}}}},
            "responses": {"204": {"description": "Done."}},
        }}},
        "components": {"schemas": {
            "A": {"type": "object", "properties": {"x": {"type": "string"}}},
            "components_schemas_A_properties_x": {"type": "integer"},
        }},
    }  # fmt: skip
    spec = import_openapi(document)[0].spec
    assert [rule["from"] for rule in spec["input_mapping"]] == ["id", "body_id", "body_id_2", "a", "b"]
    assert spec["input_mapping"][2] == {"from": "body_id_2", "to": "body.id"}
    # A reference into a schema is named after its path, which here is a component's name too.
    name = "components_schemas_A_properties_x"
    assert spec["input_schema"]["properties"]["b"] == {"$ref": f"#/$defs/{name}_2"}
    assert spec["input_schema"]["$defs"] == {name: {"type": "string"}, f"{name}_2": {"type": "integer"}}


def test_openapi_31_types_odd_parameter_names_and_additional_body_properties(library: dict[str, JSONObject]) -> None:
    search = library["search_books"]
    assert search["input_mapping"] == [
        {"from": "q", "to": "query.q"}, {"from": "filter_year", "to": "query.filter[year]"},
        {"from": "legacy", "to": "query.legacy"}, {"from": "where", "to": "query.where"},
    ]  # fmt: skip
    properties = search["input_schema"]["properties"]
    assert properties["filter_year"] == {"type": ["integer", "null"]}
    assert properties["legacy"] == {"type": "boolean", "deprecated": True}
    assert properties["where"] == {  # a parameter with `content` instead of `schema`
        "type": "object", "properties": {"shelf": {"type": "string"}}, "description": "Filter as JSON."
    }  # fmt: skip
    book = search["output_schema"]["$defs"]["Book"]
    assert book["properties"]["extra"] is True and search["output_schema"]["$defs"]["Anything"] is True
    update = library["update_book"]["input_schema"]
    assert update["additionalProperties"] == {"type": "string"}  # the body allows more fields, so do the arguments


def test_every_schema_is_self_contained_and_compiles(
    petstore: dict[str, JSONObject], library: dict[str, JSONObject]
) -> None:
    for name, spec in {**petstore, **library}.items():
        ArgumentValidator(spec["input_schema"], tool_name=name)
        text = json.dumps(spec)
        assert "#/components" not in text and "discriminator" not in text and '"x-' not in text
        if spec["output_schema"] is not None:
            jsonschema_rs.validator_for(spec["output_schema"])


def test_recursive_schemas_stay_recursive_through_local_defs(petstore: dict[str, JSONObject]) -> None:
    node = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}  # fmt: skip
    assert petstore["get_tree"]["output_schema"] == {"$ref": "#/$defs/Node", "$defs": {"Node": node}}
    validator = jsonschema_rs.validator_for(petstore["get_tree"]["output_schema"])
    assert validator.is_valid({"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]})
    assert not validator.is_valid({"name": "a", "children": [{"children": []}]})
    # Pet -> NewPet -> Owner -> Pet: each definition once, in every tool that reaches it.
    assert set(petstore["list_pets"]["output_schema"]["$defs"]) == {"Pet", "NewPet", "Owner", "Status"}
    assert set(petstore["create_pet"]["input_schema"]["$defs"]) == {"Pet", "NewPet", "Owner", "Status"}


# -- output schemas and annotations -----------------------------------------------------------------


def test_output_schema_is_the_json_success_response(
    petstore: dict[str, JSONObject], library: dict[str, JSONObject]
) -> None:
    assert petstore["list_pets"]["output_schema"]["items"] == {"$ref": "#/$defs/Pet"}  # 200, not `default`
    assert petstore["create_pet"]["output_schema"]["$ref"] == "#/$defs/Pet"  # 201
    assert petstore["upload_photo"]["output_schema"] is None  # 202 is text/plain
    assert petstore["delete_pets_by_pet_id"]["output_schema"] is None  # 204
    assert library["search_books"]["output_schema"]["items"] == {"$ref": "#/$defs/Book"}  # 2XX, a +json type
    assert library["update_book"]["output_schema"]["$ref"] == "#/$defs/Book"  # `default` when there is no 2xx
    assert library["book_exists"]["output_schema"] is None


def test_annotations_follow_the_http_method_and_x_crank_annotations(
    petstore: dict[str, JSONObject], library: dict[str, JSONObject]
) -> None:
    assert petstore["list_pets"]["annotations"] == {"readOnlyHint": True, "openWorldHint": True}
    assert library["book_exists"]["annotations"] == {"readOnlyHint": True, "openWorldHint": True}
    assert petstore["create_pet"]["annotations"] == {"readOnlyHint": False, "idempotentHint": False,
                                                     "openWorldHint": True}  # fmt: skip
    assert petstore["delete_pets_by_pet_id"]["annotations"] == {
        "readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": True,
    }  # fmt: skip
    assert petstore["replace_pet"]["annotations"] == {
        "readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, "openWorldHint": True,
        "title": "Replace a pet",
    }  # fmt: skip
    assert library["add_book"]["annotations"] == {"readOnlyHint": False, "openWorldHint": True}  # null removes


def test_an_idempotency_key_header_makes_the_operation_idempotent() -> None:
    document = {
        "openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "servers": [{"url": "https://api.test"}],
        "paths": {"/orders": {"post": {
            "operationId": "createOrder",
            "parameters": [{"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}],
            "responses": {"201": {"description": "ok"}}}}},
    }  # fmt: skip
    (imported,) = import_openapi(document)
    assert imported.spec["execution_config"] == {"idempotency": {"argument": "idempotency_key",
                                                                 "header": "Idempotency-Key"}}  # fmt: skip
    del document["paths"]["/orders"]["post"]["parameters"]
    (plain,) = import_openapi(document)
    assert "execution_config" not in plain.spec


# -- filters and progress ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("include", "expected"),
    [
        (["get_*"], ["get_pet_by_id", "get_tree"]),
        (["createPet", "trees"], ["create_pet", "get_tree"]),  # an operationId, a tag
        (["PUT /pets/*"], ["replace_pet", "set_tags"]),
        (["pets", "!*_by_*"], ["list_pets", "create_pet", "replace_pet", "set_tags"]),  # tag `pets`, but not ...
        ("OWNERS", ["add_owner_pet"]),  # one pattern, case-insensitive
        (lambda name, source: source["method"] == "DELETE", ["delete_pets_by_pet_id"]),
    ],
)
def test_include_selects_by_name_operation_id_tag_or_method_and_path(include: Any, expected: list[str]) -> None:
    assert [operation.name for operation in import_openapi(load("petstore.yaml"), include=include)] == expected


def test_progress_is_reported_as_operations_are_converted() -> None:
    calls: list[tuple[int, int]] = []
    import_openapi(load("petstore.yaml"), include=["pets"], progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 6), (1, 6), (2, 6), (3, 6), (4, 6), (5, 6), (6, 6)]


def test_the_callers_document_is_not_changed() -> None:
    document = load("petstore.yaml")
    before = copy.deepcopy(document)
    import_openapi(document)
    assert document == before


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad_parameter.yaml",
         r'^paths\./pets\.get\.parameters\[0\]\.in: "nowhere" is not one of "path", "query", "header", "cookie"$'),
        ("missing_responses.yaml", r'^paths\./pets/\{petId\}\.get: "responses" is a required property$'),
        ("dangling_ref.yaml",
         r"^components\.schemas\.Pet\.properties\.owner\.\$ref: '#/components/schemas/Owner' points to nothing"),
        ("undeclared_path_parameter.yaml",
         r"^paths\./pets/\{petId\}\.get: path parameter 'petId' of '/pets/\{petId\}' is not declared$"),
        ("duplicate_operation_id.yaml", r"^paths\./animals\.get: operationId 'listPets' is used by paths\./pets\.get"),
        ("name_clash.yaml", r"^paths\./pets/\{id\}\.get and paths\./pet\.get both become the tool 'get_pet'"),
        ("required_xml.yaml",
         r"^paths\./photos\.post\.requestBody: its text/xml body is described as object, not as the string or file "
         r"Crank sends; leave the operation out with the include pattern '!upload_photo'$"),
        ("bad_schema.json", r"^components\.schemas\.Book\.properties\.year\.type: not a valid JSON Schema"),
        ("swagger.json", r"^swagger: Swagger 2\.0 is not supported"),
    ],
)  # fmt: skip
def test_an_invalid_document_raises_naming_the_place_and_returns_nothing(name: str, message: str) -> None:
    calls: list[tuple[int, int]] = []
    with pytest.raises(SpecError, match=message):  # strict: an operation that cannot be called refuses it all
        import_openapi(load("invalid/" + name), progress=lambda done, total: calls.append((done, total)), strict=True)
    if name != "required_xml.yaml":  # a validation error: found before any conversion
        assert calls == []


def test_an_operation_that_cannot_be_called_is_skipped_naming_it_why_and_the_pattern_that_leaves_it_out() -> None:
    imported = import_openapi(load("invalid/required_xml.yaml"))
    assert [op.name for op in imported] == ["list_pets"]
    (skipped,) = imported.skipped
    assert (skipped.name, skipped.place) == ("upload_photo", "POST /photos")
    assert skipped.reason == "its text/xml body is described as object, not as the string or file Crank sends"
    assert skipped.line() == (
        "skipped upload_photo (POST /photos): its text/xml body is described as object, not as the string or file "
        "Crank sends; --include '!upload_photo' leaves it out quietly"
    )
    assert import_openapi(load("invalid/required_xml.yaml"), include=["!upload*"]).skipped == []


def test_an_operation_that_cannot_be_imported_can_be_left_out() -> None:
    assert [op.name for op in import_openapi(load("invalid/required_xml.yaml"), include=["!upload*"])] == ["list_pets"]


def test_validation_covers_operations_that_are_not_imported() -> None:
    with pytest.raises(SpecError, match="responses"):
        import_openapi(load("invalid/missing_responses.yaml"), include=["list_pets"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["paths"].update({"/x": {"$ref": "#/info/title"}}), r"^paths\./x: not a Path Item Object$"),
        (lambda d: d["paths"]["/pets"]["get"]["parameters"].append({"$ref": "#/components/schemas/Pet"}),
         r"^paths\./pets\.get\.parameters\[5\]: not a Parameter Object$"),
        (lambda d: d["paths"]["/pets"]["post"].update(requestBody={"$ref": "#/components/schemas/Pet"}),
         r"^paths\./pets\.post\.requestBody: not a Request Body Object$"),
        (lambda d: d.update({"x-set": {1, 2}}), r"^the document is not JSON data"),
        (lambda d: d.update(openapi="3.2.0"), r"^openapi: version '3\.2\.0' is not supported"),
        (lambda d: d.pop("openapi"), r"^openapi: missing"),
        (lambda d: d["servers"][0].update(url="https://{zone}.example.com"),
         r"^servers\[0\]\.url: variable 'zone' has no default"),
        (lambda d: d["paths"]["/pets"]["get"].update({"x-crank-annotations": {"readOnly": True}}),
         r"^paths\./pets\.get\.x-crank-annotations\.readOnly: unknown annotation"),
        (lambda d: d["paths"]["/pets"]["get"].update({"x-crank-annotations": {"readOnlyHint": "yes"}}),
         r"^paths\./pets\.get\.x-crank-annotations\.readOnlyHint: must be true or false"),
        (lambda d: d["components"]["schemas"]["Pet"].update({"$ref": "other.yaml#/Pet"}),
         r"^components\.schemas\.Pet\.\$ref: 'other\.yaml#/Pet' points outside the document"),
        (lambda d: d["components"]["parameters"].update(TraceId={"$ref": "#/components/parameters/TraceId"}),
         r"refers back to itself"),
        (lambda d: d["paths"]["/trees/{id}"]["get"]["parameters"].append(
            {"name": "id", "in": "path", "required": True, "schema": {}}),
         r"^paths\./trees/\{id\}\.get\.parameters\[1\]: parameter 'id' in path is declared twice"),
        (lambda d: d["paths"]["/trees/{id}"]["get"]["parameters"].append(
            {"name": "other", "in": "path", "required": True, "schema": {}}),
         r"^paths\./trees/\{id\}\.get\.parameters\[1\]: path parameter 'other' is not in the path '/trees/\{id\}'"),
    ],
)  # fmt: skip
def test_more_invalid_documents(change: Any, message: str) -> None:
    document = load("petstore.yaml")
    change(document)
    with pytest.raises(SpecError, match=message):
        import_openapi(document)


def test_schema_dialects() -> None:
    document = load("library.json")
    document["components"]["schemas"]["Book"]["$schema"] = "https://spec.openapis.org/oas/3.1/dialect/base"
    book = drafts("library.json", base_url="http://127.0.0.1")["add_book"]["output_schema"]["$defs"]["Book"]
    assert import_openapi(document, base_url="http://127.0.0.1")[1].spec["output_schema"]["$defs"]["Book"] == book
    document["components"]["schemas"]["Book"]["$schema"] = "http://json-schema.org/draft-03/schema#"
    with pytest.raises(SpecError, match=r"^components\.schemas\.Book\.\$schema: unknown JSON Schema dialect"):
        import_openapi(document, base_url="http://127.0.0.1")  # and nothing is fetched


# -- the calls the drafts make ----------------------------------------------------------------------


def test_mappings_put_each_argument_where_the_document_says(petstore: dict[str, JSONObject]) -> None:
    def apply(name: str, arguments: JSONObject) -> Any:
        tool = tool_from_spec({"tool_name": name, **petstore[name]})
        return InputMapping.compile(tool.input_mapping, tool.http_method, tool.target.url, where="t").apply(arguments)

    listing = apply("list_pets", {"limit": 5, "status": ["sold"], "x_trace_id": "t-1"})
    assert (listing.path, listing.query, listing.headers, listing.body) == (
        {}, {"limit": 5, "status": ["sold"]}, {"X-Trace-Id": "t-1"}, None
    )  # fmt: skip
    created = apply("create_pet", {"name": "Rex", "tag": None, "x_trace_id": "t-2"})
    assert (created.query, created.headers, created.body) == ({}, {"X-Trace-Id": "t-2"}, {"name": "Rex", "tag": None})
    added = apply("add_owner_pet", {"name": "Olena", "body_name": "Rex"})
    assert (added.path, added.body) == ({"name": "Olena"}, {"name": "Rex"})
    tagged = apply("set_tags", {"petId": 7, "body": ["good", "old"]})
    assert (tagged.path, tagged.body) == ({"petId": 7}, ["good", "old"])


@pytest.mark.anyio
async def test_a_draft_makes_the_request_the_document_describes(serve: Callable[..., str]) -> None:
    seen: list[dict[str, Any]] = []

    async def record(request: Request) -> Response:
        seen.append({"method": request.method, "path": request.scope["raw_path"], "body": await request.body(),
                     "query": request.scope["query_string"], "headers": dict(request.headers)})  # fmt: skip
        return JSONResponse({"id": 1, "name": "Rex"}, status_code=201)

    base = serve(Starlette(routes=[Route("/{path:path}", record, methods=["GET", "POST"])]))
    petstore = drafts("petstore.yaml", base_url=base + "/v1")
    client = UpstreamClient()
    try:
        listing = RemoteOperation(tool_from_spec({"tool_name": "list_pets", **petstore["list_pets"]}), client)
        await listing.call({"limit": 5, "status": ["sold", "available"], "x_trace_id": "t-1"})
        adding = RemoteOperation(tool_from_spec({"tool_name": "add_owner_pet", **petstore["add_owner_pet"]}), client)
        outcome = await adding.call({"name": "Olena K", "body_name": "Rex", "tag": "dog"})
    finally:
        await client.aclose()
    assert outcome.value == {"id": 1, "name": "Rex"}
    assert seen[0]["method"] == "GET" and seen[0]["headers"]["x-trace-id"] == "t-1"
    assert (seen[0]["path"], seen[0]["query"]) == (b"/v1/pets", b"limit=5&status=sold&status=available")
    assert seen[1]["method"] == "POST" and seen[1]["path"] == b"/v1/owners/Olena%20K/pets"
    assert json.loads(seen[1]["body"]) == {"name": "Rex", "tag": "dog"}


# -- a large document -------------------------------------------------------------------------------


def large_document(pairs: int = 500) -> JSONObject:
    """`pairs` paths with a GET and a PUT each (2 x pairs operations), sharing components."""
    node = {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}
    schemas: JSONObject = {
        "Address": {"type": "object", "properties": {"city": {"type": "string", "nullable": True}}},
        "Node": {"type": "object", "properties": {"children": node}},
        "Error": {"type": "object", "properties": {"message": {"type": "string"}}},
    }
    paths: JSONObject = {}
    for i in range(pairs):
        schemas[f"Item{i}"] = {"type": "object", "required": ["id"], "properties": {
            "id": {"type": "integer"}, "name": {"type": "string"},
            "address": {"$ref": "#/components/schemas/Address"}, "tree": {"$ref": "#/components/schemas/Node"},
        }}  # fmt: skip
        item = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/Item{i}"}}}}
        ok = {"200": {"description": "OK", **item}, "default": {"$ref": "#/components/responses/Error"}}
        paths[f"/things{i}/{{id}}"] = {
            "parameters": [{"$ref": "#/components/parameters/Id"}],
            "get": {"operationId": f"getThing{i}", "tags": [f"t{i % 10}"], "responses": ok},
            "put": {"operationId": f"putThing{i}", "requestBody": {"required": True, **item}, "responses": ok},
        }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Large", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": {"Id": {"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}},
            "responses": {
                "Error": {
                    "description": "Failed",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
            },  # fmt: skip
        },
    }


def test_a_thousand_operations_with_shared_components() -> None:
    calls: list[int] = []
    imported = import_openapi(large_document(), progress=lambda done, total: calls.append(done))
    assert len(imported) == 1000 and calls == list(range(1001))
    put = imported[-1].spec
    assert imported[-1].name == "put_thing499"
    assert list(put["input_schema"]["properties"]) == ["id", "body_id", "name", "address", "tree"]
    assert set(put["input_schema"]["$defs"]) == {"Address", "Node"}
    assert set(put["output_schema"]["$defs"]) == {"Item499", "Address", "Node"}
    # Each draft has its own copy of the shared definitions.
    assert put["output_schema"]["$defs"]["Node"] is not imported[-2].spec["output_schema"]["$defs"]["Node"]


# -- loading ----------------------------------------------------------------------------------------


def test_json_and_yaml_are_told_apart_by_content(tmp_path: Path) -> None:
    yaml_in_json = tmp_path / "spec.json"
    yaml_in_json.write_text("openapi: 3.0.3\ninfo: {title: T, version: '1'}\npaths:\n  /a:\n    get:\n"
                            "      responses:\n        200: {description: OK, x-since: 2024-01-31}\n")  # fmt: skip
    document = load_document(str(yaml_in_json))
    assert document["paths"]["/a"]["get"]["responses"] == {"200": {"description": "OK", "x-since": "2024-01-31"}}
    json_in_yaml = tmp_path / "spec.yaml"
    json_in_yaml.write_text('\ufeff{"openapi": "3.1.0"}')
    assert load_document(str(json_in_yaml)) == {"openapi": "3.1.0"}
    flow = tmp_path / "flow.txt"
    flow.write_text("{openapi: 3.1.0, info: {title: T}}")  # YAML that starts like JSON
    assert load_document(str(flow)) == {"openapi": "3.1.0", "info": {"title": "T"}}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("syntax.yaml", r"syntax\.yaml: not valid YAML: line 8, column 14: did not find expected ',' or '}'$"),
        ("syntax.json", r"syntax\.json: not valid JSON: line 3, column 47: "),
        ("list.json", r"list\.json: the top level is a list, not an object$"),
        ("missing.yaml", r"missing\.yaml: no such file$"),
    ],
)
def test_a_document_that_cannot_be_read_raises(name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_document(str(SPECS / "invalid" / name))


def test_empty_non_utf8_and_unreadable_documents(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("  \n")
    (tmp_path / "latin1.yaml").write_bytes("title: caf\xe9".encode("latin-1"))
    with pytest.raises(SpecError, match="empty.yaml: the document is empty"):
        load_document(str(tmp_path / "empty.yaml"))
    with pytest.raises(SpecError, match=r"latin1.yaml: not UTF-8 text \(byte 10\)"):
        load_document(str(tmp_path / "latin1.yaml"))
    with pytest.raises(SpecError, match="cannot read the file"):
        load_document(str(tmp_path))
    for text, message in [
        ("just text", r"text.yaml: the top level is a string, not an object$"),
        ("null", r"text.yaml: the top level is null, not an object$"),
        ("? [a, b]\n: x", r"text.yaml: not valid YAML: line 1, column 3: a mapping key must be a plain value$"),
        ("a: 1\nb: \x07", r"text.yaml: not valid YAML: line 2: control characters are not allowed$"),
    ]:
        (tmp_path / "text.yaml").write_text(text)
        with pytest.raises(SpecError, match=message):
            load_document(str(tmp_path / "text.yaml"))


def test_an_unreachable_url_raises() -> None:
    # Port 9 (discard) on loopback: nothing listens there, so the connection is refused at once.
    with pytest.raises(SpecError, match=r"^http://127.0.0.1:9/openapi.json: cannot fetch the document: "):
        load_document("http://127.0.0.1:9/openapi.json")


def reference_chain(links: int) -> JSONObject:
    """A document whose one request body is the first of `links` schemas, each referring to the next."""
    schemas: JSONObject = {
        f"S{i}": {"type": "object", "properties": {"next": {"$ref": f"#/components/schemas/S{i + 1}"}}}
        for i in range(links)
    }
    schemas[f"S{links}"] = {"type": "string"}
    body = {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/S0"}}}}
    operation = {"operationId": "createThing", "requestBody": body, "responses": {"200": {"description": "Done."}}}
    return {"openapi": "3.1.0", "info": {"title": "Chain", "version": "1"}, "servers": [{"url": SERVER}],
            "paths": {"/things": {"post": operation}}, "components": {"schemas": schemas}}  # fmt: skip


def test_a_chain_of_500_references_is_a_one_line_spec_error() -> None:
    with pytest.raises(SpecError, match="nest more than 400 levels deep") as raised:
        import_openapi(reference_chain(500))
    assert "\n" not in str(raised.value) and "'#/components/schemas/S" in str(raised.value)


def test_a_long_chain_within_the_limit_imports_compacts_and_publishes(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'registry.sqlite3'}", pooled=False)
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace("ws", "WS")
    (imported,) = import_openapi(reference_chain(190))
    registry.put_operation("ws", imported.name, imported.spec)
    registry.put_agent("ws", "chain", {"bindings": [{"operation": imported.name}]})
    assert registry.publish("ws", "chain", check=lambda runtime: build_catalog(runtime) and None) == 1


def test_a_real_pattern_with_look_around_is_left_out_at_import_and_the_rest_publishes(tmp_path: Path) -> None:
    # Amazon's Synthetics API names canaries with `^(?!aws:)...`: the validators' linear-time engine cannot check
    # look-around (crank.mcp.validation), so the import leaves that one pattern out (the upstream still checks
    # it) instead of refusing the document; every other pattern stays.
    source = realapis.document(realapis.DIRECTORY / "amazonaws.com" / "synthetics.json")
    operations = import_openapi(source)
    drafts = json.dumps([operation.spec for operation in operations])
    assert "(?!" in json.dumps(source) and "(?!" not in drafts
    assert '"pattern"' in drafts  # the checkable ones are kept
    engine = open_engine(f"sqlite:///{tmp_path / 'registry.sqlite3'}", pooled=False)
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace("ws", "WS")
    registry.put_operations("ws", {operation.name: operation.spec for operation in operations})
    registry.put_agent("ws", "canaries", {"bindings": [{"operation": operation.name} for operation in operations]})
    assert registry.publish("ws", "canaries", check=lambda runtime: build_catalog(runtime) and None) == 1


def _by_name(imported: Any) -> dict[str, JSONObject]:
    return {operation.name: operation.spec for operation in imported}


def test_real_descriptions_with_forms_and_uploads_are_imported_whole() -> None:
    """Stripe's forms (with its `deepObject` fields), Asana's upload and @readme/oas-examples' files and form: every
    operation is imported, and its `execution_config.body` says how its body is written."""
    stripe = import_openapi(realapis.document(realapis.STRIPE))
    assert len(stripe) == 452 and stripe.skipped == []
    customers = _by_name(stripe)["post_customers"]
    body = customers["execution_config"]["body"]
    assert body["content_type"] == "application/x-www-form-urlencoded"
    assert {"address", "expand", "metadata", "tax_id_data"} <= set(body["deep_objects"])
    assert {"email", "address", "expand"} <= set(customers["input_schema"]["properties"])
    # Stripe describes its upload's `file` as a plain string (no `format: binary`): a text part, as described; and
    # `deepObject` is for forms only (OpenAPI, Encoding Object).
    assert _by_name(stripe)["post_files"]["execution_config"]["body"] == {"content_type": "multipart/form-data"}
    asana = import_openapi(realapis.document(realapis.ASANA))
    assert len(asana) == 167 and asana.skipped == []
    upload = _by_name(asana)["create_attachment_for_object"]
    assert upload["execution_config"]["body"] == {"content_type": "multipart/form-data", "files": ["file"]}
    assert upload["input_schema"]["properties"]["file"]["description"].startswith(FILE_ARGUMENT + " Required for")
    assert {"from": "file", "to": "body.file"} in upload["input_mapping"]

    uploads = _by_name(import_openapi(realapis.document(realapis.OAS_EXAMPLES / "3.0" / "json" / "file-uploads.json")))
    assert uploads["post_anything_image_png"]["execution_config"]["body"] == {"content_type": "image/png"}
    several = uploads["put_anything_multipart_formdata"]
    assert several["execution_config"]["body"] == {"content_type": "multipart/form-data", "files": ["filename"]}
    assert several["input_schema"]["properties"]["filename"] == {
        "type": "array", "items": {"type": "string"}, "description": FILE_ARGUMENT,
    }  # fmt: skip
    form = _by_name(import_openapi(realapis.document(realapis.OAS_EXAMPLES / "3.0" / "json" / "form-data.json")))
    token = form["demo_form_data"]
    assert token["execution_config"]["body"] == {"content_type": "application/x-www-form-urlencoded"}
    assert token["input_schema"]["required"] == ["client_id", "client_secret"]


def test_an_optional_body_crank_cannot_write_is_left_out_and_a_required_one_skips_its_operation() -> None:
    def operation(required: bool) -> JSONObject:
        content = {"text/xml": {"schema": {"type": "object"}}, "application/x-yaml": {"schema": {"type": "object"}}}
        return {"put": {"requestBody": {"required": required, "content": content},
                        "responses": {"204": {"description": "Done."}}}}  # fmt: skip

    document: JSONObject = {
        "openapi": "3.1.0", "info": {"title": "XML", "version": "1"}, "servers": [{"url": "https://api.example.com"}],
        "paths": {"/optional": operation(False), "/required": operation(True)},
    }  # fmt: skip
    imported = import_openapi(document)
    (optional,) = imported
    assert optional.spec["input_schema"]["properties"] == {} and "execution_config" not in optional.spec
    assert [(skipped.name, skipped.reason) for skipped in imported.skipped] == [
        ("put_required", "its text/xml body is described as object, not as the string or file Crank sends")
    ]


def test_json_media_types_with_wildcards_or_odd_parameters_are_json_and_never_fail_the_import() -> None:
    body = {
        "required": True,
        "content": {"application/*+json": {"schema": {"type": "object", "properties": {"a": {"type": "string"}}}}},
    }
    answer = {"content": {"application/*+json; x=\u00e9\u0001": {"schema": {"type": "object"}}}, "description": "A."}
    document: JSONObject = {
        "openapi": "3.1.0", "info": {"title": "Odd", "version": "1"}, "servers": [{"url": "https://api.example.com"}],
        "paths": {"/things": {"post": {"requestBody": body, "responses": {"200": answer}}}},
    }  # fmt: skip
    (operation,) = import_openapi(document)
    assert "execution_config" not in operation.spec  # a JSON body: sent as application/json
    assert operation.spec["input_mapping"] == [{"from": "a", "to": "body.a"}]
    assert operation.spec["output_schema"] == {"type": "object"}
