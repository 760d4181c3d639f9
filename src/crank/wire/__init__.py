"""The bottom layer: JSON-RPC envelopes and codes, ASGI primitives, HTTP grammar and the request checks
that wrap any ASGI app. Every layer above (rpc, mcp, gateway, admin) imports these; nothing here imports
a layer above."""

from __future__ import annotations

from crank.wire.asgi import (
    DEFAULT_MAX_BODY_SIZE,
    JSON_CONTENT_TYPE,
    header,
    read_body,
    send_response,
    serve_lifespan,
)
from crank.wire.checks import Passed, Refused, check_request
from crank.wire.connection_limits import ConnectionLimits
from crank.wire.http import IDEMPOTENT_METHODS, accepts_json, bearer_token, is_json_media_type, is_token
from crank.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RequestId,
    encode_error,
    encode_result,
    error_response,
    is_request_id,
    is_response,
    request_envelope_error,
    request_message,
    result_response,
)
from crank.wire.listen import bind_listener, serve_on
from crank.wire.middleware import (
    AUTH_SCOPE_KEY,
    BearerAuth,
    BearerAuthMiddleware,
    BodyLimitMiddleware,
    HostOriginMiddleware,
    RequestChecksMiddleware,
    RequestGate,
    jsonrpc_refusal,
)
from crank.wire.security import LOOPBACK_HOSTS, HostOriginPolicy, is_loopback

__all__ = [
    "AUTH_SCOPE_KEY",
    "BearerAuth",
    "BearerAuthMiddleware",
    "BodyLimitMiddleware",
    "ConnectionLimits",
    "DEFAULT_MAX_BODY_SIZE",
    "HostOriginMiddleware",
    "HostOriginPolicy",
    "IDEMPOTENT_METHODS",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "JSON_CONTENT_TYPE",
    "LOOPBACK_HOSTS",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "Passed",
    "Refused",
    "RequestChecksMiddleware",
    "RequestGate",
    "RequestId",
    "accepts_json",
    "bearer_token",
    "bind_listener",
    "check_request",
    "encode_error",
    "encode_result",
    "error_response",
    "header",
    "is_json_media_type",
    "is_loopback",
    "is_request_id",
    "is_response",
    "is_token",
    "jsonrpc_refusal",
    "read_body",
    "request_envelope_error",
    "request_message",
    "result_response",
    "send_response",
    "serve_lifespan",
    "serve_on",
]
