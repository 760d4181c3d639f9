from __future__ import annotations

import pytest

from crank import _json


def test_non_string_keys_become_strings() -> None:
    assert _json.dumps({1: "a", "b": [{2: 3}]}) == b'{"1":"a","b":[{"2":3}]}'


def test_unserializable_values_still_fail() -> None:
    with pytest.raises(TypeError):
        _json.dumps({"a": object()})
