"""The console's "try it": a form made from a tool's `inputSchema`, the call sent to the agent's real MCP endpoint
(the gateway app of this process, over ASGI: the same pipeline as any client's call, with the operator's API
key), and the answer as a person reads it: the structured result, its text in each result format, or the
structured error. A destructive tool's `confirmation_required` becomes a question on the page; "Run it" sends
the call again with its token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import quote

import anyio
import httpx

from crank import _json
from crank.gateway.safety import CONFIRMATION_ARGUMENT
from crank.mcp.calls import failure_of
from crank.mcp.formats import FORMATS, render
from crank.types import ASGIApp, JSONObject

__all__ = ["MAX_ARGUMENTS_BYTES", "Answer", "FormField", "call_tool", "form_fields", "read_arguments"]

FieldKind = Literal["text", "integer", "number", "boolean", "choice", "json"]
MAX_ARGUMENTS_BYTES: Final = 32 * 1024
"""The most a form's arguments may hold, as JSON."""
CALL_TIMEOUT: Final = 60.0
"""Seconds the page waits for the endpoint (the tool's own timeout applies inside)."""
_PROTOCOL_VERSION: Final = "2025-11-25"


@dataclass(frozen=True)
class FormField:
    """One top-level argument of a tool, as a form control."""

    name: str
    kind: FieldKind
    required: bool
    description: str = ""
    choices: tuple[str, ...] = ()
    """An enum's values as the form shows them (JSON text for those that are not strings)."""
    options: tuple[Any, ...] = ()
    """The enum's values themselves, in the same order."""
    value: str = ""


@dataclass(frozen=True)
class Answer:
    """What the endpoint answered to one call, for the page."""

    structured: str | None = None
    """The structured result as indented JSON."""
    texts: dict[str, str] = field(default_factory=dict)
    """The result's text in each result format, rendered as the endpoint renders it."""
    error: JSONObject | None = None
    """The structured error (`isError`), or the JSON-RPC error."""
    confirmation: JSONObject | None = None
    """A destructive call's `confirmation_required` error: the page asks before sending the token."""
    status: int = 200


def form_fields(schema: JSONObject | None, values: dict[str, str] | None = None) -> list[FormField]:
    """The controls of a tool's `inputSchema`: its top-level properties, required ones first; nested objects and
    arrays are JSON text. The confirmation token is never a field: the page asks for it itself."""
    schema = schema or {}
    required = set(schema.get("required") or [])
    properties = schema.get("properties") or {}
    given = values or {}
    fields = [
        _field(name, sub if isinstance(sub, dict) else {}, name in required, given.get(name, ""))
        for name, sub in properties.items()
        if name != CONFIRMATION_ARGUMENT
    ]
    return sorted(fields, key=lambda field_: not field_.required)


def _field(name: str, schema: JSONObject, required: bool, value: str) -> FormField:
    description = str(schema.get("description") or schema.get("title") or "")
    if isinstance(schema.get("enum"), list):
        options = tuple(schema["enum"])
        return FormField(name, "choice", required, description, tuple(_text(item) for item in options), options, value)
    kind = schema.get("type")
    kinds: dict[Any, FieldKind] = {"string": "text", "integer": "integer", "number": "number", "boolean": "boolean"}
    return FormField(name, kinds.get(kind, "json"), required, description, value=value)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json.dumps(value).decode()


def read_arguments(fields: list[FormField], form: dict[str, str]) -> tuple[JSONObject, list[str]]:
    """The arguments a filled form gives, typed by its fields, and a problem per value that cannot be one. An
    empty optional field is left out; the endpoint validates the rest against the schema, as for any client."""
    arguments: JSONObject = {}
    problems: list[str] = []
    for control in fields:
        raw = form.get(control.name, "")
        if control.kind == "boolean":
            if raw or control.required:
                arguments[control.name] = raw == "true"
            continue
        if raw == "":
            continue
        try:
            arguments[control.name] = _typed(control, raw)
        except ValueError as wrong:
            problems.append(f"{control.name}: {wrong}")
    if len(_json.dumps(arguments)) > MAX_ARGUMENTS_BYTES:
        problems.append(f"the arguments hold more than {MAX_ARGUMENTS_BYTES} bytes of JSON")
    return arguments, problems


def _typed(control: FormField, raw: str) -> Any:
    if control.kind == "integer":
        if not raw.lstrip("-").isdigit() or len(raw) > 20:
            raise ValueError("a whole number is expected")
        return int(raw)
    if control.kind == "number":
        try:
            return float(raw)
        except ValueError:
            raise ValueError("a number is expected") from None
    if control.kind == "choice":
        if raw not in control.choices:
            raise ValueError("choose one of the listed values")
        return control.options[control.choices.index(raw)]
    if control.kind == "json":
        try:
            return _json.loads_bounded(raw.encode())
        except (_json.JSONDecodeError, _json.JSONDepthError):
            raise ValueError("JSON is expected") from None
    return raw


async def call_tool(mcp: ASGIApp, workspace: str, agent: str, key: str, tool: str, arguments: JSONObject) -> Answer:
    """Send `tools/call` to the agent's endpoint in this process, as an MCP client would, and read its answer."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": _PROTOCOL_VERSION, "Authorization": f"Bearer {key}"}  # fmt: skip
    transport = httpx.ASGITransport(app=mcp, client=("127.0.0.1", 0))
    try:
        with anyio.fail_after(CALL_TIMEOUT):  # an ASGI transport applies no timeout of its own
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                response = await client.post(f"/mcp/v1/{quote(workspace)}/{quote(agent)}", json=body, headers=headers)
    except TimeoutError:
        return Answer(error={"message": f"the endpoint did not answer within {CALL_TIMEOUT:g} s"}, status=504)
    return _answer(response)


def _answer(response: httpx.Response) -> Answer:
    try:
        message = _message(response)
    except ValueError:
        return Answer(error={"message": f"the endpoint answered {response.status_code} without JSON"},
                      status=response.status_code)  # fmt: skip
    if not isinstance(message, dict):
        return Answer(error={"message": "the endpoint's answer is not a JSON-RPC response"}, status=502)
    if "error" in message:
        return Answer(error=message["error"], status=response.status_code)
    result = message.get("result") or {}
    if result.get("isError"):
        error = _structured_error(result)
        if error.get("error_code") == "confirmation_required":
            return Answer(confirmation=error)
        return Answer(error=error)
    value = result.get("structuredContent")
    if value is None:
        texts = {"text": "\n".join(str(block.get("text", "")) for block in result.get("content", []))}
        return Answer(texts=texts)
    pretty = render(value, "pretty_json")
    return Answer(structured=pretty, texts={name: render(value, name) for name in FORMATS})


def _message(response: httpx.Response) -> Any:
    """The JSON-RPC answer: the body, or, when the endpoint answered with an event stream (a call that reported
    progress), the stream's last message that has an id."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return response.json()
    answer: Any = None
    for line in response.text.splitlines():
        if line.startswith("data:"):
            message = _json.loads(line[5:].strip() or "null")
            if isinstance(message, dict) and message.get("id") == 1 and ("result" in message or "error" in message):
                answer = message  # the call's answer (a request the server sends has an id too, and a method)
    if answer is None:
        raise ValueError("no answer in the event stream")
    return answer


def _structured_error(result: JSONObject) -> JSONObject:
    """The failed call's structured error, or its own words as the message."""
    content = result.get("content")
    data, text = failure_of(content if isinstance(content, list) else [])
    return data if data is not None else {"message": text or ""}
