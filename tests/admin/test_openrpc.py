"""OpenRPC import: drafts for the `jsonrpc` adapter from a document in tests/admin/specs and from Crank's
own OpenRPC output, called against Crank's example service on loopback."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from examples.rpc_app import app as rpc_service

from crank.admin.documents import load_document
from crank.admin.openrpc import import_openrpc
from crank.exceptions import SpecError
from crank.gateway.client import UpstreamClient
from crank.gateway.mapping import InputMapping
from crank.gateway.operation import RemoteOperation
from crank.mcp.validation import ArgumentValidator
from crank.registry import tool_from_spec
from crank.schema import tool_local
from crank.types import JSONObject

SPECS = Path(__file__).parent / "specs"


def load(name: str) -> JSONObject:
    return load_document(str(SPECS / name))


@pytest.fixture(scope="module")
def catalog() -> dict[str, JSONObject]:
    return {operation.name: operation.spec for operation in import_openrpc(load("catalog.openrpc.json"))}


def test_methods_become_jsonrpc_drafts_named_in_snake_case(catalog: dict[str, JSONObject]) -> None:
    assert list(catalog) == ["catalog_search", "catalog_delete", "rpc_ping"]
    assert catalog["catalog_search"]["protocol"] == "jsonrpc"
    assert catalog["catalog_search"]["target"] == {"url": "https://rpc.example.com/rpc", "method": "Catalog.search"}
    assert catalog["rpc_ping"]["target"] == {"url": "https://health.example.com/rpc", "method": "rpc.ping"}
    assert catalog["catalog_search"]["description"] == (
        "Search the catalog.\n\nItems whose name contains every word, best match first."
    )
    assert catalog["catalog_delete"]["description"] == "Catalog.delete"


def test_params_become_arguments_sent_by_name(catalog: dict[str, JSONObject]) -> None:
    search = catalog["catalog_search"]
    assert search["input_schema"] == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to find."},  # from a shared content descriptor
            "page_size": {"type": "integer", "minimum": 1, "description": "Items per page."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert search["input_mapping"] == [
        {"from": "query", "to": "body.query"},
        {"from": "page_size", "to": "body.page-size"},
    ]
    assert catalog["rpc_ping"]["input_schema"] == {"type": "object", "properties": {}, "additionalProperties": False}
    for name, spec in catalog.items():
        ArgumentValidator(spec["input_schema"], tool_name=name)


def test_result_schema_is_the_output_schema_with_local_defs(catalog: dict[str, JSONObject]) -> None:
    item = {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "parts": {"type": "array", "items": {"$ref": "#/$defs/Item"}}}}  # fmt: skip
    output = catalog["catalog_search"]["output_schema"]
    assert output == {"type": "array", "items": {"$ref": "#/$defs/Item"}, "$defs": {"Item": item}}
    assert jsonschema_rs.validator_for(output).is_valid([{"id": 1, "parts": [{"id": 2}]}])
    assert catalog["catalog_delete"]["output_schema"] == {"type": "boolean"}
    assert catalog["rpc_ping"]["output_schema"] is None  # no result


def test_annotations_only_from_x_crank_annotations_and_source_metadata(catalog: dict[str, JSONObject]) -> None:
    assert "annotations" not in catalog["catalog_search"]
    assert catalog["catalog_delete"]["annotations"] == {
        "readOnlyHint": False, "destructiveHint": True, "idempotentHint": True,
    }  # fmt: skip
    assert catalog["catalog_search"]["source"] == {"kind": "openrpc", "method": "Catalog.search", "tags": ["catalog"]}
    assert catalog["catalog_delete"]["source"]["tags"] == ["catalog", "admin"]
    assert catalog["rpc_ping"]["source"] == {"kind": "openrpc", "method": "rpc.ping", "tags": [], "deprecated": True}


def test_url_include_and_progress() -> None:
    calls: list[tuple[int, int]] = []
    imported = import_openrpc(
        load("catalog.openrpc.json"), url="http://127.0.0.1:8000/rpc", include=["catalog", "!admin"],
        progress=lambda done, total: calls.append((done, total)),
    )  # fmt: skip
    assert [(operation.name, operation.spec["target"]["url"]) for operation in imported] == [
        ("catalog_search", "http://127.0.0.1:8000/rpc")
    ]
    assert calls == [(0, 1), (1, 1)]
    assert [op.name for op in import_openrpc(load("catalog.openrpc.json"), include=["*.delete"])] == ["catalog_delete"]


def test_the_mapping_builds_params_by_name(catalog: dict[str, JSONObject]) -> None:
    tool = tool_from_spec({"tool_name": "catalog_search", **catalog["catalog_search"]})
    mapping = InputMapping.compile(tool.input_mapping, "POST", "", where="t")
    assert mapping.apply({"query": "lamp", "page_size": 5}).body == {"query": "lamp", "page-size": 5}


# -- Crank's own OpenRPC output ---------------------------------------------------------------------


@pytest.mark.parametrize("version", rpc_service.rpc.versions)
def test_crank_own_document_gives_the_schemas_crank_publishes(version: str) -> None:
    imported = {op.spec["target"]["method"]: op.spec for op in import_openrpc(rpc_service.rpc.openrpc(version),
                                                                               url="http://rpc/")}  # fmt: skip
    methods = rpc_service.rpc.methods_in(version)
    assert list(imported) == [method.name for method in methods]
    for method in methods:
        schemas, spec = method.schemas, imported[method.name]
        assert spec["input_schema"] == tool_local(schemas.input_schema, schemas.components), method.name
        output = schemas.output_schema
        assert spec["output_schema"] == (tool_local(output, schemas.components) if output is not None else None)
        assert spec["description"] == method.text


@pytest.mark.anyio
async def test_an_imported_method_calls_crank_own_service(serve: Callable[..., str]) -> None:
    base = serve(rpc_service)
    imported = {op.name: op.spec for op in import_openrpc(rpc_service.rpc.openrpc("v1"), url=base + "/rpc")}
    client = UpstreamClient()
    try:
        get = RemoteOperation(tool_from_spec({"tool_name": "catalog_get", **imported["catalog_get"]}), client)
        search = RemoteOperation(tool_from_spec({"tool_name": "catalog_search", **imported["catalog_search"]}), client)
        product = (await get.call({"id": 2})).value
        found = (await search.call({"query": "o", "category": "music", "limit": 1})).value
    finally:
        await client.aclose()
    assert product["name"] == "Forest Song"
    assert jsonschema_rs.validator_for(imported["catalog_get"]["output_schema"]).is_valid(product)
    assert [item["name"] for item in found] == ["Vinyl: Okean Elzy"]


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("positional.openrpc.json",
         r"^methods\[0\]\.paramStructure: 'by-position' is not supported, the jsonrpc adapter sends params by name"),
        ("unnamed_param.openrpc.json", r'^methods\[1\]\.params\[0\]: "name" is a required property$'),
        ("dangling_ref.openrpc.json",
         r"^methods\[0\]\.result\.schema\.\$ref: '#/components/schemas/Missing' points to nothing"),
        ("duplicate_method.openrpc.json", r"^methods\[1\]: method 'user\.get' is described by methods\[0\] too$"),
    ],
)  # fmt: skip
def test_an_invalid_document_raises_naming_the_place(name: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        import_openrpc(load("invalid/" + name))


def test_a_positional_method_can_be_left_out() -> None:
    imported = import_openrpc(load("invalid/positional.openrpc.json"), include=["!chain_get_balance"])
    assert [op.name for op in imported] == ["chain_block_number"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(openrpc="2.0.0"), r"^openrpc: '2\.0\.0': not an OpenRPC 1\.x document$"),
        (lambda d: d.pop("servers"), r"^methods\[0\]: the document names no server; pass url$"),
        (lambda d: d["methods"].append({"name": "catalog_search", "params": []}),
         r"^methods\[0\] and methods\[3\] both become the tool 'catalog_search'"),
        (lambda d: d["methods"][1]["params"].append({"name": "id", "schema": {}}),
         r"^methods\[1\]\.params\[1\]: parameter 'id' is declared twice$"),
        (lambda d: d["methods"][1]["params"][0].update(schema={"type": 5}),
         r"^methods\[1\]\.params\[0\]\.schema\.type: not a valid JSON Schema"),
        (lambda d: d["methods"][1].update({"x-crank-annotations": []}),
         r"^methods\[1\]\.x-crank-annotations: x-crank-annotations must be an object$"),
        (lambda d: d["methods"][0]["params"].append({"$ref": "#/components/schemas/Item"}),
         r"^methods\[0\]\.params\[2\]: not a Content Descriptor$"),
        (lambda d: d["methods"].append({"$ref": "#/components/schemas/Item"}), r"^methods\[3\]: not a Method Object$"),
        (lambda d: d["methods"].append({"name": "...", "params": []}),
         r"^methods\[3\]\.name: '\.\.\.' has no letter or digit to name a tool by$"),
    ],
)  # fmt: skip
def test_more_invalid_documents(change: Any, message: str) -> None:
    document = load("catalog.openrpc.json")
    change(document)
    with pytest.raises(SpecError, match=message):
        import_openrpc(document)


def test_the_callers_document_is_not_changed() -> None:
    document = rpc_service.rpc.openrpc("v1")
    before = json.dumps(document, sort_keys=True)
    import_openrpc(document, url="http://rpc/")
    assert json.dumps(document, sort_keys=True) == before


def test_an_openrpc_document_given_as_openapi_and_the_reverse_are_named() -> None:
    from crank.admin.openapi import import_openapi

    with pytest.raises(SpecError, match="this is an OpenRPC document, not OpenAPI: import it as openrpc"):
        import_openapi(load("catalog.openrpc.json"))
    with pytest.raises(SpecError, match="this is an OpenAPI document, not OpenRPC: import it as openapi"):
        import_openrpc(load("petstore.yaml"))


@pytest.mark.parametrize(("include", "shown"), [(["nothing*"], "include ['nothing*']"), (["!*"], "include ['!*']")])
def test_a_filter_that_matches_nothing_says_so(include: list[str], shown: str) -> None:
    from crank.admin.openapi import import_openapi

    with pytest.raises(SpecError, match=rf"{re.escape(shown)} matched none of the document's 3 methods"):
        import_openrpc(load("catalog.openrpc.json"), include=include)
    with pytest.raises(SpecError, match=r"matched none of the document's \d+ operations .*'METHOD /path'"):
        import_openapi(load("petstore.yaml"), include=include)
