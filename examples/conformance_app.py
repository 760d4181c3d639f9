"""The fixture the official MCP conformance suite runs against, built with Crank's own API.

    uvicorn examples.conformance_app:app --port 3001     # MCP endpoint at http://127.0.0.1:3001/mcp

Tool names and contents are the ones the suite's scenarios call (tools-call-*, json-schema-2020-12,
http-header-validation, http-custom-header-server-validation, server-stateless). The first tool takes
no arguments because http-header-validation calls the first listed tool with `{}`.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette

from crank.mcp import CallContext, Catalog, MCPEndpoint, ServerInfo, Tool, ToolResult, mount

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
NO_ARGUMENTS = {"type": "object", "properties": {}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image() -> dict[str, Any]:
    return {"type": "image", "data": PNG, "mimeType": "image/png"}


def resource(uri: str, mime_type: str, body: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": body}}


def fixed(*blocks: dict[str, Any], is_error: bool = False) -> Any:
    """An invoker that always answers the same content blocks."""

    async def invoke(arguments: dict[str, Any], context: CallContext) -> ToolResult:
        return ToolResult(list(blocks), is_error=is_error)

    return invoke


async def header_echo(arguments: dict[str, Any], context: CallContext) -> str:
    return str(arguments["text"])


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def tool(name: str, description: str, invoker: Any, schema: dict[str, Any] = NO_ARGUMENTS, **options: Any) -> Tool:
    return Tool(name=name, description=description, input_schema=schema, invoker=invoker, **options)


tools = [
    tool(
        "test_simple_text",
        "Tests simple text content response",
        fixed(text("This is a simple text response for testing.")),
    ),
    tool("test_image_content", "Tests image content response", fixed(image())),
    tool(
        "test_audio_content",
        "Tests audio content response",
        fixed({"type": "audio", "data": WAV, "mimeType": "audio/wav"}),
    ),
    tool(
        "test_embedded_resource",
        "Tests embedded resource content response",
        fixed(resource("test://embedded-resource", "text/plain", "This is an embedded resource content.")),
    ),
    tool(
        "test_multiple_content_types",
        "Tests response with multiple content types (text, image, resource)",
        fixed(
            text("Multiple content types test:"),
            image(),
            resource("test://mixed-content-resource", "application/json", '{"test": "data", "value": 123}'),
        ),
    ),
    tool(
        "test_error_handling",
        "Tests error response handling",
        fixed(text("This tool intentionally returns an error for testing"), is_error=True),
    ),
    tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", fixed(text("ok")), JSON_SCHEMA_2020_12),
    tool(
        "test_header_echo",
        "Echoes the argument that clients mirror into the Mcp-Param-Text header",
        header_echo,
        {"type": "object", "properties": {"text": {"type": "string", "x-mcp-header": "Text"}}, "required": ["text"]},
    ),
    # server-stateless diagnostics (2026-07-28)
    tool(
        "test_missing_capability",
        "Needs the client's sampling capability",
        fixed(text("sampling is available")),
        required_client_capabilities={"sampling": {}},
    ),
    tool("test_streaming_elicitation", "Answers without any server-to-client request", fixed(text("no input needed"))),
    tool("test_logging_tool", "Runs without sending log messages", fixed(text("done"))),
]

endpoint = MCPEndpoint(Catalog(tools), server_info=ServerInfo(name="crank-conformance", version="1.0.0"))
app = Starlette(routes=[mount("/mcp", endpoint)])
