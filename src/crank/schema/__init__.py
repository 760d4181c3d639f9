"""Python types to JSON Schema: parameter and result schemas, tool-local `$defs`, output wrapping; and
compaction of a tool's description and schemas (`crank.schema.compact`)."""

import lazy_loader

# Each name is imported from its module when first used; `__init__.pyi` lists them (for type checkers, and for
# `attach_stub`). Importing one module of the package so imports no other: docs/architecture.md, "Imports".
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
