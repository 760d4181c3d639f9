"""Python types to JSON Schema: parameter and result schemas, tool-local `$defs`, output wrapping; and
compaction of a tool's description and schemas (`crank.schema.compact`)."""

from __future__ import annotations

from crank.schema.compact import CompactedTool, CompactPolicy, CompactSettings, compact_tool, policy_of
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
    "CompactPolicy",
    "CompactSettings",
    "CompactedTool",
    "DatetimeFormat",
    "MethodSchemas",
    "compact_tool",
    "describe_method",
    "describe_output",
    "Problem",
    "json_path",
    "policy_of",
    "problems_of",
    "tool_local",
    "wrap_output",
]
