"""Crank's exceptions, in one tree.

```
CrankError
├── ConfigurationError      a bad definition or setting, found at start or publish; never sent to a client
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
    "AdapterError",
    "ConfigurationError",
    "CrankError",
    "ExternalServiceError",
    "InternalRuntimeError",
    "MappingError",
    "SchemaValidationError",
    "ToolError",
]


class CrankError(Exception):
    """Base of every error Crank raises on purpose."""


class ConfigurationError(CrankError, ValueError):
    """A definition or setting is invalid. The message names what is wrong and where."""


class ToolError(CrankError):
    """A tool call failed in a way the client should see as a tool execution error."""

    error_class: ClassVar[str] = "tool"
    default_code: ClassVar[str] = "tool_error"

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


class MappingError(ToolError):
    error_class = "mapping"
    default_code = "mapping_error"


class AdapterError(ToolError):
    error_class = "adapter"
    default_code = "adapter_error"


class ExternalServiceError(ToolError):
    error_class = "external_service"
    default_code = "upstream_error"


class InternalRuntimeError(ToolError):
    error_class = "internal_runtime"
    default_code = "internal_error"
