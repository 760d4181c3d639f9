"""Crank's exceptions, in one tree.

```
CrankError
├── ConfigurationError      a bad definition or setting, found at start or publish; never sent to a client
├── RPCError                a JSON-RPC error `{code, message, data}` from a method or the rpc pipeline
│   ├── InvalidParamsError      -32602
│   ├── MethodNotFoundError     -32601
│   ├── InternalError           -32603
│   ├── AccessDeniedError       -32001
│   ├── NotFoundError           -32002  (raise it from a method: "no such user")
│   └── RateLimitedError        -32003  (with `retry_after` seconds)
└── ToolError               a tool call failed: the client gets `isError: true` with a structured error
    │                           (raised as is by a tool for its own business failure: class `tool`)
    ├── SchemaValidationError   arguments do not match the tool's inputSchema (class `schema_validation`)
    ├── MappingError            input/output mapping failed (class `mapping`)
    ├── AdapterError            the adapter could not execute the call (class `adapter`)
    ├── ExternalServiceError    the upstream service failed or refused (class `external_service`)
    └── InternalRuntimeError    anything unexpected (class `internal_runtime`)
```

Every `ToolError` carries the structured fields of DESIGN.md: `error_code`, `message`,
`recoverable`, `suggested_action`, and its class; the MCP layer adds the `request_id`.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AccessDeniedError",
    "AdapterError",
    "ConfigurationError",
    "ConfirmationError",
    "CrankError",
    "ExternalServiceError",
    "IdempotencyError",
    "InternalError",
    "InternalRuntimeError",
    "InvalidParamsError",
    "MappingError",
    "MethodNotFoundError",
    "NotFoundError",
    "RPCError",
    "RateLimitedError",
    "SchemaValidationError",
    "ToolError",
]


class CrankError(Exception):
    """Base of every error Crank raises on purpose."""


class ConfigurationError(CrankError, ValueError):
    """A definition or setting is invalid. The message names what is wrong and where."""


class RPCError(CrankError):
    """A JSON-RPC error. Raise a subclass (or this with your own code) from a method."""

    default_code: ClassVar[int] = -32000
    default_message: ClassVar[str] = "Server error"

    def __init__(self, message: str | None = None, *, data: Any = None, code: int | None = None) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)
        self.data = data
        self.code = self.default_code if code is None else code


class InvalidParamsError(RPCError):
    default_code = -32602
    default_message = "Invalid params"


class MethodNotFoundError(RPCError):
    default_code = -32601
    default_message = "Method not found"


class InternalError(RPCError):
    default_code = -32603
    default_message = "Internal error"


class AccessDeniedError(RPCError):
    default_code = -32001
    default_message = "Access denied"


class NotFoundError(RPCError):
    default_code = -32002
    default_message = "Not found"


class RateLimitedError(RPCError):
    default_code = -32003
    default_message = "Rate limit exceeded"

    def __init__(self, message: str | None = None, *, retry_after: int = 1, data: Any = None) -> None:
        super().__init__(message, data=data)
        self.retry_after = retry_after


class ToolError(CrankError):
    """A tool call failed in a way the client should see as a tool execution error."""

    error_class: ClassVar[str] = "tool"
    default_code: ClassVar[str] = "tool_error"
    may_have_taken_effect: bool = True
    """Whether the upstream may have acted on the request (a timeout, say). Idempotency keeps the key of
    such a failure instead of releasing it for a retry; errors raised before anything was sent say False."""

    def __init__(
        self,
        message: str,
        *,
        error_code: str | None = None,
        recoverable: bool = False,
        suggested_action: str | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code or self.default_code
        self.recoverable = recoverable
        self.suggested_action = suggested_action
        self.details = details

    def to_payload(self, request_id: str) -> dict[str, Any]:
        """The structured error a client sees. Override to publish another shape."""
        payload: dict[str, Any] = {
            "error_code": self.error_code,
            "error_class": self.error_class,
            "message": self.message,
            "recoverable": self.recoverable,
            "suggested_action": self.suggested_action,
            "request_id": request_id,
        }
        if self.details is not None:
            payload["details"] = self.details
        return payload


class SchemaValidationError(ToolError):
    error_class = "schema_validation"
    default_code = "invalid_arguments"
    may_have_taken_effect = False


class MappingError(ToolError):
    error_class = "mapping"
    default_code = "mapping_error"
    may_have_taken_effect = False


class AdapterError(ToolError):
    error_class = "adapter"
    default_code = "adapter_error"


class ExternalServiceError(ToolError):
    error_class = "external_service"
    default_code = "upstream_error"


class ConfirmationError(ToolError):
    """A destructive call that needs (or was given a wrong) confirmation token; the upstream was not called."""

    error_class = "confirmation"
    default_code = "confirmation_required"
    may_have_taken_effect = False


class IdempotencyError(ToolError):
    """An idempotency key used with other arguments, or still in flight; the upstream was not called."""

    error_class = "idempotency"
    default_code = "idempotency_key_reused"
    may_have_taken_effect = False


class InternalRuntimeError(ToolError):
    error_class = "internal_runtime"
    default_code = "internal_error"
