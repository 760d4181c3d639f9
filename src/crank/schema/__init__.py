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
from crank.schema.paths import Problem, json_path, problems_of

__all__ = [
    "COMPONENTS_PREFIX",
    "DatetimeFormat",
    "MethodSchemas",
    "describe_method",
    "describe_output",
    "Problem",
    "json_path",
    "problems_of",
    "tool_local",
    "wrap_output",
]
