"""One tool call: validate the arguments, run the invoker, shape the result, check it against the tool's
outputSchema, or shape the error.

Shared by MCP `tools/call` and the plain `POST <base>/call`, so both behave the same. No answer carries
`structuredContent` that fails the published outputSchema: a client (the official SDK's raises on one)
gets `output_schema_mismatch` with the paths instead.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, Literal

from crank import _json
from crank.exceptions import (
    ArgumentsRejectedError,
    AuthChallengeError,
    InternalRuntimeError,
    OutputValidationError,
    RPCError,
    SchemaValidationError,
    ToolError,
    Violation,
)
from crank.mcp.catalog import Catalog, CatalogEntry
from crank.mcp.formats import render
from crank.mcp.input_required import InputRequired, NeedsInput
from crank.mcp.tools import CallContext, CallObserver, NotedResult, Tool, ToolResult
from crank.mcp.validation import OutputValidator
from crank.types import JSONObject, JSONValue
from crank.wire.auth import Principal
from crank.wire.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

__all__ = [
    "InvalidArgumentsMode",
    "authorize_call",
    "authorize_request",
    "call_tool",
    "error_result",
    "failure_of",
    "success_result",
    "tool_contents",
]

logger = logging.getLogger("crank.mcp")

InvalidArgumentsMode = Literal["result", "error"]
"""`result`: a tool execution error (`isError: true`), as the current MCP specification asks, so that a
model can correct itself. `error`: JSON-RPC -32602, as seed 001 describes."""


def authorize_call(tool: Tool, caller: Principal | None, arguments: Mapping[str, Any] | None = None) -> None:
    """Whether `caller` may call `tool` with `arguments`: an anonymous principal (an endpoint that leaves its listing
    open) is asked to sign in (401), a principal without the tool's `required_scopes` to get them (403
    `insufficient_scope`, naming every scope the call needs), and the tool's own `Tool.authorize` judges the
    arguments (the operation a discovery call names). Anyone else, or a caller that is no `Principal` (an endpoint
    without authentication), may. The one rule for a single call, a batch's items and a tool-backed read."""
    if not isinstance(caller, Principal):
        return
    needed = tool.required_scopes
    if caller.anonymous:
        raise AuthChallengeError(f"Calling {tool.name} needs a signed-in user", scopes=sorted(needed))
    if caller.scopes is not None and caller.lacks(needed):  # an API key has no scopes: no call to `lacks`
        missing = ", ".join(sorted(needed - (caller.scopes or frozenset())))
        raise AuthChallengeError(
            f"Calling {tool.name} needs the scopes {', '.join(sorted(needed))} (missing: {missing})",
            status=403, error="insufficient_scope", scopes=sorted(needed),
        )  # fmt: skip
    if tool.authorize is not None:
        tool.authorize(arguments or {}, caller)


def authorize_request(method: JSONValue, params: JSONValue, catalog: Catalog, caller: Principal | None) -> None:
    """Whether `caller` may make this request, decided before it runs: `tools/call` of a tool (its scopes, and its
    own `Tool.authorize` over the arguments: the operation a discovery call names) and `resources/read` of a
    resource a tool answers (that tool's scopes). Raises `AuthChallengeError`; any other request passes here (its
    handler refuses what is malformed). What a batch checks for every item before any runs."""
    if not isinstance(caller, Principal) or not isinstance(params, dict):
        return
    if method == "tools/call":
        name = params.get("name")
        entry = catalog.get(name) if isinstance(name, str) else None
        if entry is None:
            return
        arguments = params.get("arguments")
        authorize_call(entry.tool, caller, arguments if isinstance(arguments, dict) else None)
    elif method == "resources/read":
        uri = params.get("uri")
        reader = catalog.reader_of(uri) if isinstance(uri, str) else None
        if reader is not None:
            authorize_call(reader.tool, caller)


async def call_tool(
    entry: CatalogEntry,
    arguments: dict[str, Any],
    context: CallContext,
    *,
    result_format: str,
    invalid_arguments: InvalidArgumentsMode = "result",
    debug: bool = False,
    on_input_required: Callable[[InputRequired, CallContext, dict[str, Any]], JSONObject] | None = None,
    observer: CallObserver | None = None,
) -> JSONObject:
    """Run one call and return the `CallToolResult` object. Never raises for a tool's own failure.

    The invoker is awaited here, not in a helper coroutine: every `await` level is resumed again at each
    suspension of the upstream call, so the hot path keeps its coroutine chain short (docs/benchmarks.md).
    """
    started = time.perf_counter() if observer is not None else 0.0
    tool = entry.tool
    error: ToolError | None
    violations = entry.validator.violations(arguments) if entry.validator is not None else None
    if violations:
        result, error = _rejected(tool.name, violations, invalid_arguments, context)
    else:
        try:
            value = await tool.invoker(arguments, context)
        except NeedsInput as need:  # `context.elicit` in the 2026-07-28 era: the answer comes with the next call
            result, error = _shaped(need.value, tool.name, tool.wrap_result, result_format, context, arguments,
                                    on_input_required)  # fmt: skip
        except ToolError as exc:
            result, error = error_result(exc, context.request_id), exc
        except ArgumentsRejectedError as exc:  # the invoker's own validation: the same answer as the catalog's
            result, error = _rejected(tool.name, exc.violations, invalid_arguments, context)
        except AuthChallengeError:
            raise  # a tool that runs another (discovery's call_operation) found scopes missing: 401/403
        except Exception as exc:
            result, error = _unexpected(exc, tool.name, context, debug)
        else:
            result, error = _shaped(value, tool.name, tool.wrap_result, result_format, context, arguments,
                                    on_input_required)  # fmt: skip
            checker = entry.output_validator
            if checker is not None and result.get("isError") is False:
                structured = result.get("structuredContent", _MISSING)
                if structured is _MISSING or not checker.is_valid(structured):
                    result, error = _mismatch(checker, structured, tool.name, context)
    if error is not None and isinstance(context.caller, Principal):  # who failed, for the operator's log line
        error.log_context = {**(error.log_context or {}), **context.caller.log_fields()}
    if observer is not None:
        seconds = time.perf_counter() - started
        caller = context.caller
        observer(tool.name, error, seconds, context.request_id if error is not None else None, caller, arguments)
    elif error is not None:  # without an observer, failures are still logged
        logger.info("tool %s failed: %s%s (request_id=%s)", tool.name, error.error_code, error.log_note(),
                    context.request_id, extra={**_labels(context), **(error.log_context or {})})  # fmt: skip
    return result


def tool_contents(uri: str, result: JSONObject, mime_type: str | None) -> list[JSONObject]:
    """The `contents` of a read a tool answered (`Resource.tool`, `ResourceTemplate.tool`).

    A value the tool returned is its JSON text (the resource's MIME type, `application/json` by default), and a
    note it added is a plain text item. A tool that answers its own content blocks (`ToolResult`) gives its text
    as text, its images and audio as blobs and its embedded resources as they are; links are left out.

    A failed call is a JSON-RPC error whose data is the structured error: -32602 for arguments the tool refuses
    (the URI's variables), -32603 for anything else."""
    content = result["content"]
    if result["isError"]:
        raise _read_failure(content)
    contents: list[JSONObject] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            text_type = (mime_type or "application/json") if not contents else "text/plain"
            contents.append({"uri": uri, "mimeType": text_type, "text": block["text"]})
        elif kind in ("image", "audio"):
            contents.append({"uri": uri, "mimeType": block.get("mimeType"), "blob": block.get("data")})
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            contents.append(block["resource"])
    return contents


def failure_of(content: list[JSONObject]) -> tuple[JSONObject | None, str | None]:
    """What a failed call's `content` says: its structured error (the JSON object of its first text block, as
    `error_result` writes it), or None with the tool's own words when it gave none (None when no text either)."""
    text = content[0].get("text") if content and content[0].get("type") == "text" else None
    try:
        data = _json.loads(text) if isinstance(text, str) else None
    except _json.JSONDecodeError:
        data = None
    return (data, text) if isinstance(data, dict) else (None, text if isinstance(text, str) else None)


def _read_failure(content: list[JSONObject]) -> RPCError:
    """The error a failed tool-backed read answers: the tool's structured error when it gave one, else the
    tool's own words as the message."""
    data, text = failure_of(content)
    if data is None:
        return RPCError(text[:1000] if text is not None else "The tool failed", code=INTERNAL_ERROR)
    code = INVALID_PARAMS if data.get("error_code") == SchemaValidationError.default_code else INTERNAL_ERROR
    return RPCError(str(data.get("message")), code=code, data=data)


def _rejected(
    name: str, violations: list[Violation], invalid_arguments: InvalidArgumentsMode, context: CallContext
) -> tuple[JSONObject, ToolError]:
    if invalid_arguments == "error":
        raise ArgumentsRejectedError(name, violations)
    rejected = SchemaValidationError(
        f"Invalid arguments for tool {name!r}: {len(violations)} violation(s)",
        recoverable=True,
        suggested_action="Correct the arguments listed in details and call the tool again.",
        details=[violation.to_wire() for violation in violations],
    )
    return error_result(rejected, context.request_id), rejected


_MISSING: Any = object()


def _mismatch(
    checker: OutputValidator, structured: Any, name: str, context: CallContext
) -> tuple[JSONObject, ToolError]:
    """The answer fails the published outputSchema: the paths (never the values) go to the client and, through
    the observer, to the metrics and the log."""
    if structured is _MISSING:
        violations, more = [Violation("$", "structuredContent is missing")], False
    else:
        violations, more = checker.violations(structured)
    details: JSONObject = {"violations": [violation.to_wire() for violation in violations]}
    if more:
        details["truncated"] = True
    mismatch = OutputValidationError(f"The answer of tool {name!r} does not match its output schema.", details=details)
    return error_result(mismatch, context.request_id), mismatch


def _unexpected(exc: Exception, name: str, context: CallContext, debug: bool) -> tuple[JSONObject, ToolError]:
    logger.exception("tool %s raised an unexpected error (request_id=%s)", name, context.request_id,
                     extra=_labels(context))  # fmt: skip
    details = {"exception": type(exc).__name__, "trace": traceback.format_exc()} if debug else None
    internal = InternalRuntimeError(
        "The tool failed unexpectedly.",
        suggested_action="Retry later; if it keeps failing, report the request_id to the operator.",
        details=details,
    )
    return error_result(internal, context.request_id), internal


def _shaped(
    value: Any,
    name: str,
    wrap: bool,
    result_format: str,
    context: CallContext,
    arguments: dict[str, Any],
    on_input_required: Callable[[InputRequired, CallContext, dict[str, Any]], JSONObject] | None,
) -> tuple[JSONObject, ToolError | None]:
    if isinstance(value, ToolResult):
        return value.to_wire(), None
    if isinstance(value, InputRequired):
        if on_input_required is None:
            unsupported = InternalRuntimeError(
                f"Tool {name!r} needs input from the client, which this protocol version cannot carry.",
                error_code="input_required_unsupported",
                suggested_action="Connect with protocol version 2026-07-28 to answer the tool's questions.",
            )
            return error_result(unsupported, context.request_id), unsupported
        return on_input_required(value, context, arguments), None
    if isinstance(value, NotedResult):
        result = success_result(value.value, result_format=result_format, wrap=wrap)
        result["content"].append({"type": "text", "text": value.note})
        return result, None
    return success_result(value, result_format=result_format, wrap=wrap), None


def _labels(context: CallContext) -> dict[str, str]:
    return {"tool": context.tool_name, "request_id": context.request_id, **context.labels}


def success_result(value: JSONValue, *, result_format: str, wrap: bool) -> JSONObject:
    """Text in the chosen format plus `structuredContent`.

    Wrapped tools always get `{"result": value}` (seed 001). Otherwise an object is structured as it
    is, a list is wrapped the same way (2025-11-25 requires an object), and a scalar goes as text only.
    """
    result: JSONObject = {"content": [{"type": "text", "text": render(value, result_format)}]}
    if wrap or isinstance(value, list):
        result["structuredContent"] = {"result": value}
    elif isinstance(value, dict):
        result["structuredContent"] = value
    result["isError"] = False
    return result


def error_result(error: ToolError, request_id: str) -> JSONObject:
    """`isError: true` with the structured error as JSON text, and no `structuredContent`."""
    text = _json.dumps(error.to_payload(request_id)).decode()
    return {"content": [{"type": "text", "text": text}], "isError": True}
