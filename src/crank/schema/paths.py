"""JSON paths of values inside a document, as error messages show them."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["json_path"]


def json_path(parts: Sequence[str | int]) -> str:
    """`["items", 0, "name"]` -> `$.items[0].name`; keys that are not identifiers are quoted."""
    path = "$"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.isidentifier():
            path += f".{part}"
        else:
            path += "[" + repr(part) + "]"
    return path
