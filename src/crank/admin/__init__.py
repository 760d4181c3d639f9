"""The admin layer: getting APIs into the registry (OpenAPI, OpenRPC, declarative YAML) and the admin HTTP API."""

import lazy_loader

from crank.exceptions import ApplyError, SpecError  # the errors of this layer's API: light, imported at once

# Each name is imported from its module when first used; `__init__.pyi` lists them (for type checkers, and for
# `attach_stub`). Importing one module of the package so imports no other: docs/architecture.md, "Imports".
__getattr__, _, __all__ = lazy_loader.attach_stub(__name__, __file__)
__all__ += ["ApplyError", "SpecError"]


def __dir__() -> list[str]:  # lazy_loader's lists the stub's names only
    return list(__all__)
