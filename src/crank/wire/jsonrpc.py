"""JSON-RPC 2.0: codes, request ids, envelope checks and the bytes of responses and requests.

The one error class is `crank.exceptions.RPCError` (its subclasses own the standard codes); the rpc
endpoint, the MCP core and the gateway's `jsonrpc` adapter all build and read envelopes here.
"""

from __future__ import annotations

from typing import Any, Final

from crank import _json
from crank.exceptions import (
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    ParseError,
    RPCError,
)
from crank.types import JSONObject

__all__ = [
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
    "is_request_id",
    "is_response",
    "request_envelope_error",
    "result_response",
]

PARSE_ERROR: Final = ParseError.default_code
INVALID_REQUEST: Final = InvalidRequestError.default_code
METHOD_NOT_FOUND: Final = MethodNotFoundError.default_code
INVALID_PARAMS: Final = InvalidParamsError.default_code
INTERNAL_ERROR: Final = InternalError.default_code

RequestId = str | int


def is_request_id(value: Any) -> bool:
    """A request id as MCP allows it: a string or an integer, never null or a boolean (basic/index.mdx)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def request_envelope_error(message: JSONObject) -> RPCError | None:
    """Why `message` is not a well-formed request or notification, or None. The errors carry HTTP 400."""
    if message.get("jsonrpc") != "2.0":
        return InvalidRequestError('Invalid request: jsonrpc must be "2.0"', http_status=400)
    if not isinstance(message.get("method"), str):
        return InvalidRequestError("Invalid request: method must be a string", http_status=400)
    if "id" in message and not is_request_id(message["id"]):
        return InvalidRequestError("Invalid request: id must be a string or an integer", http_status=400)
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return InvalidRequestError("Invalid request: params must be an object", http_status=400)
    return None


def is_response(message: Any) -> bool:
    """A JSON-RPC 2.0 response object: `jsonrpc` "2.0" and a `result` or an `error`."""
    return isinstance(message, dict) and message.get("jsonrpc") == "2.0" and ("result" in message or "error" in message)


def result_response(request_id: Any, result: Any) -> JSONObject:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: Any, error: JSONObject) -> JSONObject:
    """A response carrying an error object already in wire form (`RPCError.to_wire()` or richer)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def encode_result(request_id: RequestId, result: Any) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(request_id: RequestId | None, error: RPCError) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()})


def request_message(request_id: RequestId, method: str, params: Any) -> JSONObject:
    """A request object (the gateway's `jsonrpc` adapter sends it as the body of a POST)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
