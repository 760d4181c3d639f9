"""The fixture the official MCP conformance suite runs against, built with Crank's own API.

    uvicorn examples.conformance_app:app --port 3001     # MCP endpoint at http://127.0.0.1:3001/mcp

Tool, resource and prompt names and contents are the ones the suite's scenarios ask for (tools-call-*,
resources-*, prompts-*, completion-complete, logging, elicitation-*, json-schema-2020-12, http-header-validation,
http-custom-header-server-validation, server-stateless, input-required-result-*, caching). The first tool takes
no arguments because http-header-validation calls the first listed tool with `{}`.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

from crank.mcp import (
    CallContext,
    Catalog,
    EndpointOptions,
    EndpointRouter,
    InputRequired,
    MCPEndpoint,
    Prompt,
    PromptArgument,
    PromptMessage,
    Resource,
    ResourceTemplate,
    ServerInfo,
    Tool,
    ToolResult,
    elicitation,
    roots_listing,
    sampling,
)

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


def accepted(context: CallContext, key: str) -> dict[str, Any] | None:
    """The form content of an accepted elicitation answer, or None."""
    answer = (context.input_responses or {}).get(key)
    if isinstance(answer, dict) and answer.get("action") == "accept" and isinstance(answer.get("content"), dict):
        return answer["content"]
    return None


def answered(context: CallContext, *keys: str) -> bool:
    responses = context.input_responses or {}
    return all(isinstance(responses.get(key), dict) for key in keys)


async def streaming_elicitation(arguments: dict[str, Any], context: CallContext) -> Any:
    if (got := accepted(context, "answer")) is not None:
        return ToolResult([text(f"Got: {got}")])
    return InputRequired({"answer": elicitation("Please answer", {"answer": {"type": "string"}}, ["answer"])})


async def ask_name(arguments: dict[str, Any], context: CallContext) -> Any:
    got = accepted(context, "user_name")
    if got is None or not isinstance(got.get("name"), str):
        return InputRequired({"user_name": elicitation("What is your name?", {"name": {"type": "string"}}, ["name"])})
    return ToolResult([text(f"Hello, {got['name']}!")])


async def ask_capital(arguments: dict[str, Any], context: CallContext) -> Any:
    if not answered(context, "capital_question"):
        return InputRequired({"capital_question": sampling("What is the capital of France?", 100)})
    reply = context.input_responses["capital_question"].get("content", {})  # type: ignore[index]
    return ToolResult([text(f"Sampling response: {reply.get('text', '')}")])


async def ask_roots(arguments: dict[str, Any], context: CallContext) -> Any:
    if not answered(context, "client_roots"):
        return InputRequired({"client_roots": roots_listing()})
    roots = context.input_responses["client_roots"].get("roots", [])  # type: ignore[index]
    return ToolResult([text("Client roots: " + ", ".join(str(root.get("uri")) for root in roots))])


async def confirm_with_state(arguments: dict[str, Any], context: CallContext) -> Any:
    if accepted(context, "confirm") is None or context.request_state != "confirm-v1":
        return InputRequired(
            {"confirm": elicitation("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])}, "confirm-v1"
        )
    return ToolResult([text("state-ok: requestState verified")])


async def ask_everything(arguments: dict[str, Any], context: CallContext) -> Any:
    if not answered(context, "user_name", "greeting", "client_roots"):
        requests = {
            "user_name": elicitation("What is your name?", {"name": {"type": "string"}}, ["name"]),
            "greeting": sampling("Generate a greeting", 50),
            "client_roots": roots_listing(),
        }
        return InputRequired(requests, "multiple-inputs-v1")
    return ToolResult([text("All inputs received")])


async def ask_in_rounds(arguments: dict[str, Any], context: CallContext) -> Any:
    if context.request_state == "round-1" and accepted(context, "step1") is not None:
        color = elicitation("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
        return InputRequired({"step2": color}, "round-2")
    if context.request_state == "round-2" and accepted(context, "step2") is not None:
        return ToolResult([text("Multi-round complete")])
    return InputRequired(
        {"step1": elicitation("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])}, "round-1"
    )


async def ask_what_is_declared(arguments: dict[str, Any], context: CallContext) -> Any:
    declared = context.client_capabilities or {}
    requests: dict[str, Any] = {}
    if "sampling" in declared:
        requests["sample"] = sampling("Say hello", 50)
    if "elicitation" in declared:
        requests["ask"] = elicitation("What is your name?", {"name": {"type": "string"}}, ["name"])
    if "roots" in declared:
        requests["roots"] = roots_listing()
    if not requests:
        return ToolResult([text("No declared capability to ask through")])
    if context.input_responses:
        return ToolResult([text("Declared-capability input answered")])
    return InputRequired(requests)


async def with_progress(arguments: dict[str, Any], context: CallContext) -> Any:
    for step in (0, 50, 100):
        await context.progress(step, 100)
        if step < 100:
            await asyncio.sleep(0.05)
    return ToolResult([text("Progress reported: 0, 50 and 100 of 100")])


async def with_logging(arguments: dict[str, Any], context: CallContext) -> Any:
    for line in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await context.log("info", line)
        await asyncio.sleep(0.05)
    return ToolResult([text("Logged three messages")])


async def ask_model(arguments: dict[str, Any], context: CallContext) -> Any:
    answer = await context.sample(arguments["prompt"], max_tokens=100)
    return ToolResult([text(f"LLM response: {answer.get('content', {}).get('text', '')}")])


async def ask_user(arguments: dict[str, Any], context: CallContext) -> Any:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = await context.elicit(arguments["message"], schema)
    return ToolResult([text(f"User response: {json.dumps(answer)}")])


def form_tool(schema: dict[str, Any]) -> Any:
    """A tool that asks the user to fill in `schema` and reports what came back."""

    async def invoke(arguments: dict[str, Any], context: CallContext) -> ToolResult:
        answer = await context.elicit("Please review and update the form fields", schema)
        completed = f"action={answer.get('action')}, content={json.dumps(answer.get('content', {}))}"
        return ToolResult([text(f"Elicitation completed: {completed}")])

    return invoke


DEFAULTS_FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}
ENUMS_FORM = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


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


async def echo(arguments: dict[str, Any], context: CallContext) -> str:
    return str(arguments["text"])


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
    tool("test_streaming_elicitation", "Asks for input inside its result, never by a request", streaming_elicitation),
    tool("test_logging_tool", "Logs only when the request asks for a level", with_logging),
    tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100", with_progress),
    tool("test_tool_with_logging", "Sends three info log messages", with_logging),
    tool(
        "test_sampling",
        "Asks the client's model",
        ask_model,
        {"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
    ),
    tool(
        "test_elicitation",
        "Asks the user for a name and an email",
        ask_user,
        {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    ),
    tool("test_elicitation_sep1034_defaults", "A form with defaults of every primitive type", form_tool(DEFAULTS_FORM)),
    tool("test_elicitation_sep1330_enums", "A form with every kind of enum", form_tool(ENUMS_FORM)),
    # input_required results (SEP-2322)
    tool("test_input_required_result_elicitation", "Asks the user's name", ask_name),
    tool("test_input_required_result_sampling", "Asks the client's model a question", ask_capital),
    tool("test_input_required_result_list_roots", "Asks for the client's roots", ask_roots),
    tool("test_input_required_result_request_state", "Round trip of a request state", confirm_with_state),
    tool("test_input_required_result_tampered_state", "Refuses an altered request state", confirm_with_state),
    tool("test_input_required_result_multiple_inputs", "Elicitation, sampling and roots at once", ask_everything),
    tool("test_input_required_result_multi_round", "Three rounds with a changing state", ask_in_rounds),
    tool("test_input_required_result_capabilities", "Asks only through declared capabilities", ask_what_is_declared),
    # Not the suite's: what bench/run.py's crank-fixture target calls, to measure this app as it is served.
    tool(
        "echo",
        "Says its text back",
        echo,
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        format="plain",
    ),  # fmt: skip
]


def static(value: str | bytes) -> Any:
    async def read(context: CallContext) -> str | bytes:
        return value

    return read


async def template_data(uri: str, variables: Mapping[str, str], context: CallContext) -> str:
    item = variables["id"]
    return json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"}, separators=(",", ":"))


resources = [
    Resource("test://static-text", "static-text", static("This is the content of the static text resource."),
             description="A fixed text document", mime_type="text/plain"),
    Resource("test://static-binary", "static-binary", static(base64.b64decode(PNG)),
             description="A one-pixel PNG", mime_type="image/png"),
    Resource("test://watched-resource", "watched-resource", static("A resource clients subscribe to."),
             description="The resource the subscription scenarios watch", mime_type="text/plain"),
]  # fmt: skip
templates = [
    ResourceTemplate("test://template/{id}/data", "template-data", template_data,
                     description="Data for one id", mime_type="application/json",
                     completions={"id": ["123", "456", "789"]}),
]  # fmt: skip


def say(message: str) -> Any:
    async def render(arguments: Mapping[str, str], context: CallContext) -> str:
        return message.format(**arguments)

    return render


async def embedded(arguments: Mapping[str, str], context: CallContext) -> list[PromptMessage]:
    body = {"uri": arguments["resourceUri"], "mimeType": "text/plain", "text": "Embedded resource content for testing."}
    return [
        PromptMessage("user", {"type": "resource", "resource": body}),
        PromptMessage.text("Please process the embedded resource above."),
    ]


async def with_image(arguments: Mapping[str, str], context: CallContext) -> list[PromptMessage]:
    return [PromptMessage("user", image()), PromptMessage.text("Please analyze the image above.")]


async def ask_for_context(arguments: Mapping[str, str], context: CallContext) -> Any:
    got = accepted(context, "user_context")
    if got is None:
        question = elicitation("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
        return InputRequired({"user_context": question})
    return f"Use this context: {got.get('context')}"


CITIES = ["paris", "park", "party", "test"]

prompts = [
    Prompt("test_simple_prompt", say("This is a simple prompt for testing."), description="A prompt without arguments"),
    Prompt(
        "test_prompt_with_arguments",
        say("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"),
        description="A prompt with two required arguments",
        arguments=(
            PromptArgument("arg1", "First test argument", required=True, completions=CITIES),
            PromptArgument("arg2", "Second test argument", required=True),
        ),
    ),
    Prompt(
        "test_prompt_with_embedded_resource",
        embedded,
        description="A prompt that embeds a resource",
        arguments=(PromptArgument("resourceUri", "URI of the resource to embed", required=True),),
    ),
    Prompt("test_prompt_with_image", with_image, description="A prompt with an image"),
    Prompt("test_input_required_result_prompt", ask_for_context, description="A prompt that asks the user first"),
]

catalog = Catalog(tools, resources=resources, resource_templates=templates, prompts=prompts, logging=True)
endpoint = MCPEndpoint(catalog, EndpointOptions(server_info=ServerInfo(name="crank-conformance", version="1.0.0")))
# The endpoint in front (`EndpointRouter`), not mounted in a router: a request pays for one path check.
app = EndpointRouter({"/mcp": endpoint})
