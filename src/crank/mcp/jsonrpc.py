"""JSON-RPC 2.0 envelopes: protocol errors and the bytes of responses."""

from __future__ import annotations

from typing import Any

from crank import _json
from crank.mcp.protocol import INVALID_REQUEST
from crank.types import JSONObject

__all__ = ["JSONRPCError", "RequestId", "encode_error", "encode_result", "is_request_id", "request_envelope_error"]

RequestId = str | int


class JSONRPCError(Exception):
    """A protocol error answered as a JSON-RPC error object.

    `http_status` forces the HTTP status; when None the era decides (200 in the legacy era, the
    2026-07-28 status table in the modern one).
    """

    def __init__(self, code: int, message: str, data: Any = None, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status

    def to_wire(self) -> JSONObject:
        error: JSONObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def is_request_id(value: Any) -> bool:
    """A JSON-RPC id as MCP allows it: a string or an integer, never null (basic/index.mdx)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def request_envelope_error(message: JSONObject) -> JSONRPCError | None:
    """Why `message` is not a well-formed request or notification, or None."""
    if message.get("jsonrpc") != "2.0":
        return JSONRPCError(INVALID_REQUEST, 'Invalid request: jsonrpc must be "2.0"', http_status=400)
    if not isinstance(message.get("method"), str):
        return JSONRPCError(INVALID_REQUEST, "Invalid request: method must be a string", http_status=400)
    if "id" in message and not is_request_id(message["id"]):
        return JSONRPCError(INVALID_REQUEST, "Invalid request: id must be a string or an integer", http_status=400)
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return JSONRPCError(INVALID_REQUEST, "Invalid request: params must be an object", http_status=400)
    return None


def encode_result(request_id: RequestId, result: JSONObject) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(request_id: RequestId | None, error: JSONRPCError) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error.to_wire()})
