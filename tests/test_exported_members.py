from __future__ import annotations

import types

import pytest

import crank
import crank.admin
import crank.exceptions
import crank.mcp
import crank.rpc
import crank.schema
import crank.server
import crank.settings
import crank.sources
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
