"""JSON paths of values inside a document, as error messages show them, and the violation that carries one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Violation", "json_path"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason some arguments were refused, with the JSON path of the offending value.

    Shared by the rpc executor (pydantic) and the MCP catalog's validator (JSON Schema), so a refusal has one
    shape whichever of them found it.
    """

    path: str
    message: str

    def to_wire(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


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
