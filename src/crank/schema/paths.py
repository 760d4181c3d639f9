"""JSON paths of values inside a document, as error messages show them; pydantic's validation errors
read into those places (the one reader of `ValidationError.errors()`, whatever shape a caller prints)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

__all__ = ["Problem", "json_path", "problems_of"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a validated value: where (`loc`, keys and indexes), what, the value found, and
    pydantic's error type (`missing`, `int_parsing`, ...)."""

    loc: tuple[str | int, ...]
    message: str
    input: Any = None
    type: str = ""

    @property
    def path(self) -> str:
        """`$.items[0].name`"""
        return json_path(self.loc)

    @property
    def dotted(self) -> str:
        """`items.0.name`; empty for the value as a whole."""
        return ".".join(str(part) for part in self.loc)

    @property
    def place(self) -> str:
        """`items[0].name`: the path without its `$.`; empty for the value as a whole."""
        return self.path.removeprefix("$").removeprefix(".")


def problems_of(error: ValidationError) -> list[Problem]:
    """Every problem of a pydantic error, with pydantic's "Value error, " prefix taken off."""
    return [
        Problem(tuple(item["loc"]), item["msg"].removeprefix("Value error, "), item.get("input"), item["type"])
        for item in error.errors(include_url=False)
    ]


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
