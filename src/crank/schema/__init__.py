"""Python types to JSON Schema: parameter and result schemas, tool-local `$defs`, output wrapping."""

from __future__ import annotations

from crank.schema.generate import (
    COMPONENTS_PREFIX,
    DatetimeFormat,
    MethodSchemas,
    describe_method,
    describe_output,
    tool_local,
    wrap_output,
)
from crank.schema.paths import Violation, json_path

__all__ = [
    "COMPONENTS_PREFIX",
    "DatetimeFormat",
    "MethodSchemas",
    "Violation",
    "describe_method",
    "describe_output",
    "json_path",
    "tool_local",
    "wrap_output",
]
