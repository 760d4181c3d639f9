"""Crank's exceptions, in one tree.

```
CrankError
├── ConfigurationError          a bad definition or setting, found at start, import or publish; never sent to a client
│   ├── SettingsError               `CRANK_*` settings or the settings file (one line per bad value)
│   ├── SpecError                   an API description that cannot be loaded or imported
│   ├── ApplyError                  a catalog file for `crank apply`
│   └── RegistryError               a registry action that cannot be done
│       ├── RegistryNotFoundError       the workspace, operation, agent or version does not exist
│       └── RegistryConflictError       the thing to create exists already
├── UnknownFormatError          a result format name Crank does not know (a setting, or a request: -32602)
├── RPCError                    the one JSON-RPC error `{code, message, data}`: rpc methods, the rpc pipeline and
│   │                               the MCP core's protocol errors (`http_status` forces an HTTP status)
│   ├── ParseError                  -32700
│   ├── InvalidRequestError         -32600
│   ├── MethodNotFoundError         -32601
│   ├── InvalidParamsError          -32602
│   │   └── ParamsValidationError       the rpc conversion refused the params, with every `Violation`
│   ├── InternalError               -32603
│   ├── AccessDeniedError           -32001
│   ├── NotFoundError               -32002  (raise it from a method: "no such user")
│   ├── RateLimitedError            -32003  (with `retry_after` seconds)
│   └── UnavailableError            -32004  the lock or rate limit cannot be checked: Redis does not answer
│       └── LockTimeoutError            -32004  a `lock=True` method stayed locked by other calls for the whole wait
├── RequestTooLargeError        a request body over the endpoint's limit (413)
├── DependencyUnavailableError  the registry or Redis does not answer, or a replica's key list is too old to trust (503)
├── CatalogNotFoundError        no MCP endpoint at the requested path (404)
├── CatalogUnauthorizedError    the request's credentials do not open this endpoint (401)
├── AuthChallengeError          the request needs other credentials: 401, or 403 `insufficient_scope`, with a
│                                   `WWW-Authenticate: Bearer` challenge (crank.wire.auth)
├── InvalidCursorError          a `tools/list` cursor this catalog did not issue
├── InvalidRequestStateError    a `requestState` not issued for this call, altered, or expired
├── ArgumentsRejectedError      arguments refused, with every `Violation` (a tool result, or -32602)
├── UpstreamError               the gateway's HTTP client could not get an answer
│   ├── UpstreamTimeoutError        no answer within the deadline
│   │   └── UpstreamBusyError           no connection free for the workspace within it: never sent
│   ├── UpstreamConnectionError     not reached (`sent` False), or dropped after the request was sent
│   ├── UpstreamTooLargeError       an answer larger than the client accepts
│   ├── UpstreamRequestTooLargeError  a request head larger than the client sends: never sent
│   └── UpstreamRefusedError        the egress policy refuses every address of the upstream (crank.gateway.egress)
└── ToolError                   a tool call failed: the client gets `isError: true` with a structured error
    │                               (raised as is by a tool for its own business failure: class `tool`)
    ├── SchemaValidationError       arguments do not match the tool's inputSchema (class `schema_validation`)
    │   └── UnknownOperationError       discovery's `call_operation` or `get_operation_schema` of a name the agent
    │                                       does not have
    ├── MappingError                input/output mapping failed (class `mapping`)
    ├── AdapterError                the adapter could not execute the call (class `adapter`)
    ├── ExternalServiceError        the upstream service failed or refused (class `external_service`)
    ├── ConfirmationError           a destructive call without (or with a wrong) confirmation token
    ├── IdempotencyError            an idempotency key reused with other arguments, or still in flight
    ├── StateStoreFullError         the in-process state store holds all it may: nothing was sent (class `state`)
    ├── StateStoreUnavailableError  Redis does not answer: nothing was sent (class `state`, `details.retry_after`)
    ├── LimitReachedError           a rate limit or quota of the workspace, agent or API key is used up: nothing
    │                                   was sent (class `rate_limit`, code `rate_limited`, `details.retry_after`)
    ├── OutputValidationError       an answer that fails the tool's published outputSchema (class `output_validation`)
    ├── UserCredentialsError        the tool acts as the signed-in user, and the call has none (an API key), or
    │                                   the user's token was refused for the API: nothing sent (`user_credentials`)
    ├── ToolConfigurationError      a secret the tool needs is missing or not allowed on this server, or its
    │                                   upstream's address is refused by the egress policy (class `configuration`)
    ├── ClientRequestError          a question to the client (`elicit`, `sample`) that cannot be asked or was not
    │                                   answered; also a `CallSignal`
    ├── RPCToolError                an rpc method's `RPCError` as a tool error (class `rpc`)
    └── InternalRuntimeError        anything unexpected (class `internal_runtime`)

CallSignal (not a CrankError)   raised by a call's context to end the call in the protocol's own way (an
                                    `input_required` result, a question that cannot be asked): the rpc executor
                                    passes it on untouched, as the method's own failure it is not
```

Every `ToolError` carries the structured fields of DESIGN.md: `error_code`, `message`,
`recoverable`, `suggested_action`, and its class; the MCP layer adds the `request_id`. A
`suggested_action` is never empty: each class has a `default_action`, used when none is given, and a
class whose default is blank cannot be raised (`ValueError` when it is constructed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from crank.types import JSONObject

__all__ = [
    "AccessDeniedError",
    "AdapterError",
    "ApplyError",
    "ArgumentsRejectedError",
    "CallSignal",
    "CatalogNotFoundError",
    "CatalogUnauthorizedError",
    "AuthChallengeError",
    "ClientRequestError",
    "ConfigurationError",
    "ConfirmationError",
    "CrankError",
    "DependencyUnavailableError",
    "ExternalServiceError",
    "IdempotencyError",
    "StateStoreFullError",
    "StateStoreUnavailableError",
    "InternalError",
    "InternalRuntimeError",
    "InvalidCursorError",
    "InvalidParamsError",
    "InvalidRequestError",
    "InvalidRequestStateError",
    "LimitReachedError",
    "LockTimeoutError",
    "MappingError",
    "MethodNotFoundError",
    "NotFoundError",
    "OutputValidationError",
    "ParamsValidationError",
    "ParseError",
    "RPCError",
    "RPCToolError",
    "RateLimitedError",
    "RegistryConflictError",
    "RegistryError",
    "RegistryNotFoundError",
    "RequestTooLargeError",
    "SchemaValidationError",
    "SettingsError",
    "SpecError",
    "ToolConfigurationError",
    "ToolError",
    "UnknownFormatError",
    "UnavailableError",
    "UnknownOperationError",
    "UnsupportedOperationError",
    "UpstreamBusyError",
    "UpstreamConnectionError",
    "UpstreamError",
    "UpstreamRefusedError",
    "UpstreamRequestTooLargeError",
    "UpstreamTimeoutError",
    "UpstreamTooLargeError",
    "UserCredentialsError",
    "Violation",
]


class CrankError(Exception):
    """Base of every error Crank raises on purpose."""


# -- definitions and settings -------------------------------------------------------------------------


class ConfigurationError(CrankError, ValueError):
    """A definition or setting is invalid. The message names what is wrong and where."""


class SettingsError(ConfigurationError):
    """One or more settings are wrong; the message has one line per bad value."""


class SpecError(ConfigurationError):
    """An API description that cannot be loaded or imported. The message names the place and the problem."""


class UnsupportedOperationError(SpecError):
    """One operation of an API description that Crank cannot call as described (a body it cannot send): an import
    leaves it out and says so, or, strict, refuses the document. `where` names its place, `reason` the problem."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class ApplyError(ConfigurationError):
    """The catalog file is wrong; the message names the file and the place."""


class RegistryError(ConfigurationError):
    """A registry action that cannot be done; the message says what and where."""


class RegistryNotFoundError(RegistryError):
    """The workspace, operation, agent or version named does not exist."""


class RegistryConflictError(RegistryError):
    """The thing to create exists already."""


class UnknownFormatError(CrankError, ValueError):
    """A format name that Crank does not know; the message lists the allowed ones."""

    def __init__(self, name: str, where: str, allowed: Sequence[str]) -> None:
        super().__init__(f"unknown result format {name!r} in {where}; allowed: {', '.join(allowed)}")
        self.name = name


# -- JSON-RPC -----------------------------------------------------------------------------------------


class RPCError(CrankError):
    """A JSON-RPC error object. Raise a subclass (or this with your own code) from a method.

    `http_status` forces the HTTP status of an MCP protocol error; when None the endpoint decides
    (200 on /rpc and in the legacy MCP era, the 2026-07-28 status table in the modern one).
    """

    default_code: ClassVar[int] = -32000
    default_message: ClassVar[str] = "Server error"

    def __init__(
        self, message: str | None = None, *, code: int | None = None, data: Any = None, http_status: int | None = None
    ) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)
        self.code = self.default_code if code is None else code
        self.data = data
        self.http_status = http_status

    def to_wire(self) -> JSONObject:
        """The error object as JSON-RPC sends it; `data` only when there is some."""
        error: JSONObject = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(RPCError):
    default_code = -32700
    default_message = "Parse error"


class InvalidRequestError(RPCError):
    default_code = -32600
    default_message = "Invalid Request"


class MethodNotFoundError(RPCError):
    default_code = -32601
    default_message = "Method not found"


class InvalidParamsError(RPCError):
    default_code = -32602
    default_message = "Invalid params"


class ParamsValidationError(InvalidParamsError):
    """-32602 from the rpc conversion step: the params do not fit the method's types (pydantic, lax mode).

    This conversion is the one argument rule of an rpc method, on /rpc and over MCP alike; `violations` lets
    the MCP layer answer it as its own argument rejection, and `data` carries them for /rpc.
    """

    def __init__(self, method_name: str, violations: list[Violation]) -> None:
        wire = [violation.to_wire() for violation in violations]
        super().__init__(f"Invalid params for {method_name}", data={"violations": wire})
        self.violations = violations


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


class UnavailableError(RPCError):
    """-32004: what the call needs before it may run (its lock, its rate limit count) cannot be had now, in
    Redis for every process. Nothing ran; trying again after `retry_after` seconds may work. `/rpc` adds
    `Retry-After`."""

    default_code = -32004
    default_message = "Service unavailable"

    def __init__(self, message: str | None = None, *, retry_after: int = 1) -> None:
        super().__init__(message, data={"retry_after": retry_after})
        self.retry_after = retry_after


class LockTimeoutError(UnavailableError):
    """A `lock=True` method stayed locked by other calls for the whole lock wait (`RPCApp(lock_timeout=...)`)."""


# -- serving ------------------------------------------------------------------------------------------


class RequestTooLargeError(CrankError):
    """A request body larger than the endpoint accepts (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeds {limit} bytes")
        self.limit = limit


class DependencyUnavailableError(CrankError):
    """A service Crank needs (`dependency`: `registry` or `redis`) cannot be reached, or this replica could
    not confirm its API keys with the registry for too long. Answered 503 with `Retry-After: retry_after`;
    the message is one line, for a client or a terminal, and names no secret."""

    def __init__(self, dependency: str, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.dependency = dependency
        self.message = message
        self.retry_after = retry_after


class CatalogNotFoundError(CrankError, LookupError):
    """Raised by a `CatalogProvider` when no endpoint exists at the requested path (404); its message, when it has
    one, is what the client is told (it must name nothing the credentials may not know)."""


class CatalogUnauthorizedError(CrankError, PermissionError):
    """Raised by a `CatalogProvider` when the request's credentials do not open this endpoint (401)."""


class AuthChallengeError(CrankError, PermissionError):
    """The request's credentials do not allow it: 401 (`error` None: no token; `invalid_token`: a token that is
    malformed, expired, for another resource or unknown), or 403 (`insufficient_scope`). `scopes` are every scope
    the request needs, all in one challenge. Answered as an HTTP status on the request itself, never as an
    in-band error (clients start OAuth only on a real 401, or a 403 with `insufficient_scope`)."""

    def __init__(
        self, description: str, *, status: int = 401, error: str | None = None, scopes: Sequence[str] = ()
    ) -> None:
        super().__init__(description)
        self.description = description
        self.status = status
        self.error = error
        self.scopes = tuple(scopes)


class InvalidCursorError(CrankError, ValueError):
    """A `tools/list` cursor this catalog did not issue."""


class InvalidRequestStateError(CrankError, ValueError):
    """A `requestState` that was not issued for this call, was altered, or expired."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One reason some arguments were refused, with the JSON path of the offending value.

    Found by the rpc executor (pydantic) or by the MCP catalog's validator (JSON Schema): a refusal has one
    shape whichever of them found it.
    """

    path: str
    message: str

    def to_wire(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class ArgumentsRejectedError(CrankError):
    """Arguments were refused, with every violation.

    Raised by an invoker that validates its own arguments (`Tool(validate_arguments=False)`): `call_tool`
    answers it exactly as a refusal by the catalog's validator. Raised by `call_tool` on an endpoint that
    answers such calls with JSON-RPC -32602.
    """

    def __init__(self, tool_name: str, violations: list[Violation]) -> None:
        super().__init__(f"Invalid arguments for tool {tool_name!r}")
        self.violations = violations

    def as_invalid_params(self) -> InvalidParamsError:
        """The JSON-RPC -32602 that answers this refusal, every violation in its data."""
        violations = [violation.to_wire() for violation in self.violations]
        return InvalidParamsError(str(self), data={"violations": violations})


# -- the gateway's upstream client --------------------------------------------------------------------


class UpstreamError(CrankError):
    """The upstream HTTP client could not get a usable answer."""


class UpstreamTimeoutError(UpstreamError):
    """No answer within the operation's timeout. `sent` False: the deadline passed before the request
    left (while connecting), so the upstream cannot have acted on it."""

    cause = "timeout"

    def __init__(self, *, sent: bool = True) -> None:
        super().__init__("no answer within the deadline" if sent else "not connected within the deadline")
        self.sent = sent


class UpstreamBusyError(UpstreamTimeoutError):
    """The deadline passed while the call waited for a connection (the workspace's share of the origin's
    pool, or the whole pool, was busy): the request was never sent."""

    cause = "busy"

    def __init__(self) -> None:
        super().__init__(sent=False)


class UpstreamConnectionError(UpstreamError):
    """The upstream could not be reached (`sent` False: nothing left this process), or dropped the
    connection or answered with something that is not HTTP after the request was sent (`sent` True:
    it may have acted on it). `cause`, for the log: `refused`, `dns`, `tls`, `unreachable` (before
    sending), `closed` or `invalid_answer` (after)."""

    def __init__(self, reason: str, *, sent: bool, cause: str | None = None) -> None:
        super().__init__(reason)
        self.sent = sent
        self.cause = cause or ("closed" if sent else "unreachable")


class UpstreamTooLargeError(UpstreamError):
    """The answer is larger than the client accepts."""


class UpstreamRequestTooLargeError(UpstreamError):
    """The request head (request line and headers) would be larger than the client sends
    (`crank.gateway.client.MAX_REQUEST_HEAD_BYTES`); nothing was sent."""


class UpstreamRefusedError(UpstreamError):
    """The egress policy refuses every address the upstream's host resolves to; nothing was sent. The
    message says which address and why (for the operator's log, never a client)."""


# -- tool calls ---------------------------------------------------------------------------------------


class ToolError(CrankError):
    """A tool call failed in a way the client should see as a tool execution error."""

    error_class: ClassVar[str] = "tool"
    default_code: ClassVar[str] = "tool_error"
    default_action: ClassVar[str] = (
        "Check the arguments against the tool's description and try again; if it keeps failing, report the "
        "request_id to the operator."
    )
    """The `suggested_action` when the raiser gives none: every structured error tells the model what to do."""
    may_have_taken_effect: bool = True
    """Whether the upstream may have acted on the request (a timeout, say). Idempotency keeps the key of
    such a failure instead of releasing it for a retry; errors raised before anything was sent say False."""
    log_context: dict[str, Any] | None = None
    """What the operator's log line adds and the client never sees (an upstream failure's `cause` and
    `origin`, say)."""

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
        self.suggested_action: str = suggested_action or self.default_action
        if not self.suggested_action.strip():
            raise ValueError(f"{type(self).__name__}: a structured error needs a non-empty suggested_action")
        self.details = details

    def log_note(self) -> str:
        """What a failed call's log message adds after the error code: ` (refused, http://host:port)`."""
        context = self.log_context
        if not context:
            return ""
        return " (" + ", ".join(str(context[key]) for key in ("cause", "origin", "detail") if context.get(key)) + ")"

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
    default_action = "Correct the arguments listed in details and call the tool again."
    may_have_taken_effect = False


class UnknownOperationError(SchemaValidationError):
    """A discovery tool was given an operation name the agent does not serve."""

    default_code = "unknown_operation"


class MappingError(ToolError):
    error_class = "mapping"
    default_code = "mapping_error"
    default_action = (
        "Check the arguments against the tool's input schema and try again; if it keeps failing, report the "
        "request_id to the operator."
    )
    may_have_taken_effect = False


class AdapterError(ToolError):
    error_class = "adapter"
    default_code = "adapter_error"
    default_action = (
        "The upstream's answer could not be used: retry later, and if it keeps failing, report the request_id "
        "to the operator."
    )


class ExternalServiceError(ToolError):
    error_class = "external_service"
    default_code = "upstream_error"
    default_action = "Retry later."


class ConfirmationError(ToolError):
    """A destructive call that needs (or was given a wrong) confirmation token; the upstream was not called."""

    error_class = "confirmation"
    default_code = "confirmation_required"
    default_action = "Make sure the user wants this, then repeat the call with the confirmation token in details."
    may_have_taken_effect = False


class IdempotencyError(ToolError):
    """An idempotency key used with other arguments, or still in flight; the upstream was not called."""

    error_class = "idempotency"
    default_code = "idempotency_key_reused"
    default_action = "Use a new idempotency key for a new request; reuse one only to repeat a call."
    may_have_taken_effect = False


class StateStoreFullError(ToolError):
    """The in-process state store (`MemoryStore`) holds as many live records as it may, and none has expired:
    a new idempotency claim or confirmation token is refused rather than another's record dropped (which
    would let that call run twice). Raised before anything is sent."""

    error_class = "state"
    default_code = "state_store_full"
    default_action = "Nothing was sent. Wait a minute and repeat the call; if it keeps failing, tell the operator."
    may_have_taken_effect = False


class StateStoreUnavailableError(ToolError):
    """The shared state store (Redis) refused the connection or did not answer within its timeout. A call that
    needs it first (an idempotency claim, a confirmation token, a rate-limited call's count) is refused before
    anything is sent: running it unrecorded or uncounted would break the promise. `details.retry_after` is a
    suggestion (`RETRY_AFTER` seconds); the cause goes to the log, never to the client."""

    error_class = "state"
    default_code = "state_unavailable"
    may_have_taken_effect = False
    RETRY_AFTER: ClassVar[int] = 5

    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            recoverable=True,
            suggested_action=f"Nothing was sent. Retry in {self.RETRY_AFTER} s.",
            details={"retry_after": self.RETRY_AFTER},
        )
        self.retry_after = self.RETRY_AFTER


class LimitReachedError(ToolError):
    """A rate limit or quota of the gateway (docs/gateway.md, Rate limits and quotas) is used up: the call was
    refused before anything was sent. `retry_after` (whole seconds, at least 1) is when the limit that refused
    it resets; `details` carries it with the limit's name (`workspace_rate`, `key_quota`, ...)."""

    error_class = "rate_limit"
    default_code = "rate_limited"
    default_action = "Nothing was sent. Wait retry_after seconds (in details), then repeat the call."
    may_have_taken_effect = False

    def __init__(self, limit: str, retry_after: int, message: str) -> None:
        super().__init__(
            message,
            recoverable=True,
            suggested_action=f"Nothing was sent. Wait {retry_after} s, then repeat the call.",
            details={"limit": limit, "retry_after": retry_after},
        )
        self.limit = limit
        self.retry_after = retry_after


class OutputValidationError(ToolError):
    """The tool answered, but the answer fails the outputSchema it publishes; the client gets this error
    instead of `structuredContent` it would have to refuse. `details.violations` has the JSON paths
    (relative to `structuredContent`) and what each fails, never the values. The upstream was called, so
    the call may have taken effect."""

    error_class = "output_validation"
    default_code = "output_schema_mismatch"
    default_action = (
        "The call may have taken effect: read the data back before repeating a change. Try other arguments "
        "or another tool; if it keeps failing, report the request_id to the operator (the upstream's answers "
        "no longer match this tool's output schema)."
    )


class UserCredentialsError(ToolError):
    """The tool acts as the signed-in user (its upstream credentials are the user's own: a token exchange), and this
    call cannot: it has no user (an API key, no credentials), or the user's token was refused for the API. Nothing
    was sent (class `user_credentials`)."""

    error_class = "user_credentials"
    default_code = "user_credentials_required"
    default_action = (
        "Do not retry: this tool needs a signed-in user. Tell the user to connect through an MCP client that signs "
        "them in (OAuth), not with an API key."
    )
    may_have_taken_effect = False


class ToolConfigurationError(ToolError):
    """The tool cannot run on this server as configured: a secret reference of its operation does not
    resolve here (an unset variable, an unreadable file). Nothing was sent upstream."""

    error_class = "configuration"
    default_code = "configuration_error"
    default_action = (
        "This tool is not set up on the server: tell the operator (with the request_id) and use other tools meanwhile."
    )
    may_have_taken_effect = False


class CallSignal(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a call's context to end the call in the protocol's own way: an `input_required` result, or a
    question the client cannot be asked. An rpc method that asks its `Context` lets it through; the rpc executor
    passes it on untouched, so that the MCP layer answers it as it answers any tool's."""


class ClientRequestError(ToolError, CallSignal):
    """A question to the client (`elicitation/create`, `sampling/createMessage`) that cannot be asked here, was
    refused, or was not answered in time (`error_code` says which)."""

    default_code = "client_request_unavailable"


class RPCToolError(ToolError):
    """An rpc method's error as a tool error: the client reads seed 001's `{code, message, data}` object
    (`wire`) plus the call's `request_id` (as in every structured error of DESIGN.md)."""

    error_class = "rpc"

    def __init__(self, error: RPCError, wire: JSONObject) -> None:
        super().__init__(error.message, error_code=str(error.code))
        self.wire = wire

    def to_payload(self, request_id: str) -> dict[str, Any]:
        return {**self.wire, "request_id": request_id}


class InternalRuntimeError(ToolError):
    error_class = "internal_runtime"
    default_code = "internal_error"
    default_action = "Retry later; if it keeps failing, report the request_id to the operator."
