from __future__ import annotations

import types

import pytest

import crank
import crank.admin
import crank.exceptions
import crank.gateway
import crank.mcp
import crank.registry
import crank.rpc
import crank.schema
import crank.server
import crank.settings
import crank.sources
import crank.state
import crank.telemetry
import crank.wire


@pytest.mark.parametrize(
    "module",
    [
        crank,
        crank.admin,
        crank.mcp,
        crank.exceptions,
        crank.rpc,
        crank.schema,
        crank.server,
        crank.settings,
        crank.sources,
        crank.telemetry,
        crank.wire,
    ],
)
def test_every_public_name_is_exported_and_every_export_exists(module: types.ModuleType) -> None:
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
        and _defined_in(getattr(value, "__module__", None), module.__name__)
    }
    assert public <= set(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)


def _defined_in(owner: str | None, module: str) -> bool:
    """Names defined by the module or its package's modules; what it merely imports is not its API."""
    return owner is not None and (owner == module or owner.startswith(module + "."))


LAZY = [crank.admin, crank.gateway, crank.mcp, crank.registry, crank.rpc, crank.schema, crank.sources, crank.state,
        crank.wire]  # fmt: skip


@pytest.mark.parametrize("package", LAZY, ids=lambda package: package.__name__)
def test_a_lazy_package_exports_what_its_stub_lists_and_every_name_resolves(package: types.ModuleType) -> None:
    """A package whose names are imported when first used (docs/architecture.md, "Imports"): its `__all__` and
    `dir()` are its stub's `__all__`, and each name resolves to an object defined in the package (or to one of the
    exceptions it re-exports)."""
    import ast
    from pathlib import Path

    stub = ast.parse(Path(package.__file__ or "").with_suffix(".pyi").read_text())
    listed = next(
        node for node in stub.body if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
    )
    names = set(ast.literal_eval(listed.value))
    assert set(package.__all__) == names and names <= set(dir(package))
    for name in names:
        value = getattr(package, name)
        if isinstance(value, type | types.FunctionType):  # not a constant or a type alias (typing's)
            owner = value.__module__
            assert _defined_in(owner, package.__name__) or owner == "crank.exceptions", (name, owner)
