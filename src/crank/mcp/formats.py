"""How a successful result becomes the text content block: json, pretty_json, markdown, plain, toon.

The structured form always travels beside it in `structuredContent`; the text is for clients
(and models) that read only text. TOON uses the official `toon-format` package.
"""

from __future__ import annotations

from typing import Any, Final

import toon_format

from crank import _json
from crank.exceptions import UnknownFormatError

__all__ = ["DEFAULT_FORMAT", "FORMATS", "check_format", "render"]

DEFAULT_FORMAT: Final = "json"
FORMATS: Final = ("json", "pretty_json", "markdown", "plain", "toon")


def check_format(name: str, where: str) -> str:
    if name not in FORMATS:
        raise UnknownFormatError(name, where, FORMATS)
    return name


def render(value: Any, fmt: str) -> str:
    """Render `value` in a format already checked by `check_format`."""
    if fmt == "json":
        return _json.dumps(value).decode()
    if fmt == "pretty_json":
        return _json.dumps_pretty(value).decode()
    if fmt == "plain":
        return _json.as_text(value)
    if fmt == "markdown":
        return _markdown(value)
    return str(toon_format.encode(value))


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _markdown(value: Any) -> str:
    """A table when `value` is a non-empty list of objects with the same keys and scalar cells."""
    if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
        columns = list(value[0])
        homogeneous = all(list(row) == columns for row in value) and all(
            _is_scalar(cell) for row in value for cell in row.values()
        )
        if homogeneous and columns:
            lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + " --- |" * len(columns)]
            lines += ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in value]
            return "\n".join(lines)
    if _is_scalar(value):
        return _json.as_text(value)
    return "```json\n" + _json.dumps_pretty(value).decode() + "\n```"


def _cell(value: Any) -> str:
    # A pipe or a line break would end the cell or the row early.
    return _json.as_text(value).replace("|", "\\|").replace("\n", " ")
