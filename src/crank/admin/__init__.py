"""The admin layer: getting APIs into the registry (OpenAPI, OpenRPC, declarative YAML) and the admin HTTP API."""

from __future__ import annotations

from crank.admin.api import AdminAPI
from crank.admin.apply import ApplyReport, apply_catalog, load_catalog_file
from crank.admin.documents import ImportedOperation, load_document, parse_document
from crank.admin.openapi import import_openapi
from crank.admin.openrpc import import_openrpc
from crank.exceptions import ApplyError, SpecError

__all__ = [
    "AdminAPI",
    "ApplyError",
    "ApplyReport",
    "ImportedOperation",
    "SpecError",
    "apply_catalog",
    "import_openapi",
    "import_openrpc",
    "load_catalog_file",
    "load_document",
    "parse_document",
]
