from .api import AdminAPI
from .apply import ApplyReport, apply_catalog, load_catalog_file
from .documents import ImportedOperation, load_document, parse_document
from .openapi import import_openapi
from .openrpc import import_openrpc

__all__ = [
    "AdminAPI",
    "ApplyReport",
    "ImportedOperation",
    "apply_catalog",
    "import_openapi",
    "import_openrpc",
    "load_catalog_file",
    "load_document",
    "parse_document",
]
