"""JSON-RPC 2.0: codes, request ids, envelope checks and the bytes of responses and requests.

The one error class is `crank.exceptions.RPCError` (its subclasses own the standard codes); the rpc
endpoint, the MCP core and the gateway's `jsonrpc` adapter all build and read envelopes here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

from crank import _json
from crank.exceptions import (
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    ParseError,
    RPCError,
)
from crank.types import JSONObject, JSONValue

__all__ = [
    "DEFAULT_MAX_BATCH_ANSWER_BYTES",
    "DEFAULT_MAX_BATCH_ITEMS",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "RequestId",
    "encode_error",
    "request_message",
    "encode_result",
    "error_response",
    "id_of",
    "is_request_id",
    "is_response",
    "gather_batch",
    "request_envelope_error",
    "result_response",
]

PARSE_ERROR: Final = ParseError.default_code
INVALID_REQUEST: Final = InvalidRequestError.default_code
METHOD_NOT_FOUND: Final = MethodNotFoundError.default_code
INVALID_PARAMS: Final = InvalidParamsError.default_code
INTERNAL_ERROR: Final = InternalError.default_code

RequestId = str | int

DEFAULT_MAX_BATCH_ITEMS: Final = 100
"""The most messages one JSON-RPC batch may carry; a longer batch is refused whole (-32600), nothing run."""
DEFAULT_MAX_BATCH_ANSWER_BYTES: Final = 4 * 1024 * 1024
"""The most bytes of answers one batch may collect; the items not started by then are not run (-32600)."""
_BATCH_CONCURRENCY: Final = 8
"""How many items of one batch run at once: a batch never takes more of the server than a few requests."""

_Answer = TypeVar("_Answer")


async def gather_batch(
    items: Sequence[Any],
    run: Callable[[Any], Awaitable[_Answer | None]],
    *,
    size: Callable[[_Answer], int],
    refused: Callable[[Any, str], _Answer],
    max_answer_bytes: int = DEFAULT_MAX_BATCH_ANSWER_BYTES,
) -> list[_Answer]:
    """The answers of a batch's items, in order (None answers, for notifications, left out).

    At most a few items run at once; once the answers passed `max_answer_bytes`, the items not started yet
    are answered with `refused(item, reason)` and never run, so one request can neither fill the memory
    nor hold the server."""
    gate = asyncio.Semaphore(_BATCH_CONCURRENCY)
    total = 0

    async def one(item: Any) -> _Answer | None:
        nonlocal total
        async with gate:
            if total > max_answer_bytes:
                return refused(item, f"not run: the batch's answers passed {max_answer_bytes} bytes")
            answer = await run(item)
            if answer is not None:
                total += size(answer)
            return answer

    return [answer for answer in await asyncio.gather(*(one(item) for item in items)) if answer is not None]


def is_request_id(value: JSONValue) -> bool:
    """A request id as MCP allows it: a string or an integer, never null or a boolean (basic/index.mdx)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def request_envelope_error(message: JSONValue, *, json_rpc: bool = False) -> RPCError | None:
    """Why `message` is not a well-formed request or notification, or None: the one envelope rule of both
    endpoints. MCP's (the default) is stricter than JSON-RPC 2.0's (`json_rpc=True`, the rpc endpoint's), which
    also allows a null id, and leaves params (an object, or an array by position) to the method, whose answer
    to anything else is -32602. The errors carry HTTP 400."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return InvalidRequestError('Invalid request: jsonrpc must be "2.0"', http_status=400)
    if not isinstance(message.get("method"), str):
        return InvalidRequestError("Invalid request: method must be a string", http_status=400)
    if "id" in message and not (is_request_id(message["id"]) or (json_rpc and message["id"] is None)):
        return InvalidRequestError("Invalid request: id must be a string or an integer", http_status=400)
    params = message.get("params")
    if params is not None and not json_rpc and not isinstance(params, dict):  # JSON-RPC's: the method's -32602
        return InvalidRequestError("Invalid request: params must be an object", http_status=400)
    return None


def id_of(message: JSONValue) -> RequestId | None:
    """A message's id when it is a valid one, else None: what an error answer to it carries."""
    found = message.get("id") if isinstance(message, dict) else None
    return found if is_request_id(found) else None


def is_response(message: JSONValue) -> bool:
    """A JSON-RPC 2.0 response object: `jsonrpc` "2.0" and a `result` or an `error`."""
    return isinstance(message, dict) and message.get("jsonrpc") == "2.0" and ("result" in message or "error" in message)


def result_response(request_id: JSONValue, result: JSONValue) -> JSONObject:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: JSONValue, error: JSONObject) -> JSONObject:
    """A response carrying an error object already in wire form (`RPCError.to_wire()` or richer)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def encode_result(request_id: RequestId, result: JSONValue) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(request_id: RequestId | None, error: RPCError) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()})


def request_message(request_id: RequestId, method: str, params: JSONValue) -> JSONObject:
    """A request object (the gateway's `jsonrpc` adapter sends it as the body of a POST)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
