"""The tool catalog every MCP target serves, so all targets list and call the same tools.

`echo` comes first; 999 filler tools with the same input schema make the
`tools/list` response 1,000 tools long. `bench.apps.crank_echo` should serve
exactly this catalog (import it from here).
"""

from typing import Any

N_TOOLS = 1000
ECHO_NAME = "echo"
ECHO_DESCRIPTION = "Echo the input text back as text content."
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


def filler_name(i: int) -> str:
    return f"tool_{i:03d}"


def filler_description(i: int) -> str:
    return f"Synthetic benchmark tool number {i}; echoes its input text."


def tool_specs() -> list[dict[str, Any]]:
    """The 1,000 tools as MCP `Tool` wire dicts (name, description, inputSchema)."""
    tools = [{"name": ECHO_NAME, "description": ECHO_DESCRIPTION, "inputSchema": INPUT_SCHEMA}]
    tools += [
        {"name": filler_name(i), "description": filler_description(i), "inputSchema": INPUT_SCHEMA}
        for i in range(1, N_TOOLS)
    ]
    return tools
