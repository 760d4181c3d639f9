import crank.exceptions as _exceptions  # an absolute import: `attach_stub` reads only the `from .x` ones

from .api import AdminAPI
from .apply import ApplyReport, apply_catalog, load_catalog_file
from .documents import ImportedOperation, load_document, parse_document
from .openapi import import_openapi
from .openrpc import import_openrpc

ApplyError = _exceptions.ApplyError
SpecError = _exceptions.SpecError

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
