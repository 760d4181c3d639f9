from __future__ import annotations

import types

import pytest

import crank
import crank.exceptions
import crank.mcp
import crank.rpc
import crank.schema


@pytest.mark.parametrize("module", [crank, crank.mcp, crank.exceptions, crank.rpc, crank.schema])
def test_every_public_name_is_exported_and_every_export_exists(module: types.ModuleType) -> None:
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
        and getattr(value, "__module__", module.__name__).startswith("crank")
    }
    assert public <= set(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)
