"""The OpenRPC document of one API version, from the same metadata that the MCP tools use."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from crank.rpc.method import Method
from crank.types import JSONObject

__all__ = ["OPENRPC_VERSION", "build_openrpc"]

OPENRPC_VERSION = "1.3.2"


def build_openrpc(methods: Iterable[Method], *, title: str, version: str) -> JSONObject:
    components: dict[str, Any] = {}
    described = []
    for method in methods:
        schemas = method.schemas
        components.update(schemas.components)
        required = set(schemas.input_schema.get("required", []))
        params = []
        for name, schema in schemas.input_schema.get("properties", {}).items():
            param: JSONObject = {"name": name, "required": name in required, "schema": schema}
            if "description" in schema:
                param["description"] = schema["description"]
            params.append(param)
        entry: JSONObject = {"name": method.name, "params": params, "paramStructure": "either"}
        if schemas.summary:
            entry["summary"] = schemas.summary
        if method.text:
            entry["description"] = method.text
        if method.deprecated:
            entry["deprecated"] = True
        entry["result"] = {
            "name": "result",
            "schema": schemas.output_schema if schemas.output_schema is not None else {},
        }
        described.append(entry)
    document: JSONObject = {
        "openrpc": OPENRPC_VERSION,
        "info": {"title": title, "version": version},
        "methods": described,
    }
    if components:
        document["components"] = {"schemas": dict(sorted(components.items()))}
    return document
