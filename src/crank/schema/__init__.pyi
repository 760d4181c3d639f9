from .compact import CompactedTool, CompactPolicy, CompactSettings, compact_tool, policy_of
from .generate import (
    COMPONENTS_PREFIX,
    DatetimeFormat,
    MethodSchemas,
    describe_method,
    describe_output,
    tool_local,
    wrap_output,
)
from .paths import Problem, json_path, problems_of

__all__ = [
    "COMPONENTS_PREFIX",
    "CompactPolicy",
    "CompactSettings",
    "CompactedTool",
    "DatetimeFormat",
    "MethodSchemas",
    "Problem",
    "compact_tool",
    "describe_method",
    "describe_output",
    "json_path",
    "policy_of",
    "problems_of",
    "tool_local",
    "wrap_output",
]
