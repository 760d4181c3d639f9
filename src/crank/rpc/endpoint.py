"""The JSON-RPC 2.0 endpoint of one API version: POST for calls (single, batch, notifications), GET for
the OpenRPC document. Every call runs through the shared `Executor`; envelopes come from `crank.wire`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from crank import _json
from crank.exceptions import (
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    ParseError,
    RateLimitedError,
    RPCError,
    UnavailableError,
)
from crank.rpc.context import RPCContext
from crank.rpc.executor import Call, Executor, error_wire
from crank.rpc.method import Method
from crank.types import JSONObject, Receive, Scope, Send
from crank.wire.asgi import DEFAULT_MAX_BODY_SIZE, read_body, send_response
from crank.wire.jsonrpc import (
    DEFAULT_MAX_BATCH_ITEMS,
    encode_error,
    error_response,
    gather_batch,
    id_of,
    request_envelope_error,
    result_response,
)
from crank.wire.middleware import BodyLimitMiddleware

__all__ = ["JSONRPCEndpoint", "MethodSource"]


class MethodSource(Protocol):
    """What the endpoint asks of the application it serves (`crank.rpc.app.RPCApp`): its methods by version,
    the caller's roles, the executor, and its OpenRPC document. A narrow contract, so that the app may build
    endpoints without the endpoint importing the app."""

    debug: bool
    logger: logging.Logger
    executor: Executor

    def method_for(self, name: str, version: str) -> Method | None: ...

    def openrpc(self, version: str) -> JSONObject: ...

    async def resolve_roles(self, scope: Scope) -> frozenset[str]: ...


@dataclass
class _Request:
    roles: frozenset[str]
    after: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


class JSONRPCEndpoint:
    """One API version at `/rpc[/<version>]`; bodies over `max_body_size` are refused with 413."""

    def __init__(self, app: MethodSource, version: str, *, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self.app = app
        self.version = version
        self._limited = BodyLimitMiddleware(self._post, max_body_size)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            await send_response(send, 200, _json.dumps(self.app.openrpc(self.version)))
        elif scope["method"] == "POST":
            await self._limited(scope, receive, send)
        else:
            await send_response(send, 405, b"", [(b"allow", b"GET, POST")], content_type=None)

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            message = _json.loads_bounded(await read_body(receive))
        except _json.JSONDecodeError:
            await send_response(send, 200, encode_error(None, ParseError()))
            return
        except _json.JSONDepthError as deep:
            await send_response(send, 200, encode_error(None, InvalidRequestError(f"Invalid Request: {deep}")))
            return
        request = _Request(await self.app.resolve_roles(scope))
        if isinstance(message, list) and len(message) > DEFAULT_MAX_BATCH_ITEMS:
            refused = InvalidRequestError(f"Invalid Request: a batch may carry at most {DEFAULT_MAX_BATCH_ITEMS} calls")
            await send_response(send, 200, encode_error(None, refused))
            return
        if isinstance(message, list) and message:
            replies = await gather_batch(message, lambda item: self._encoded(item, request), size=len, refused=_refused)
            payload = b"[" + b",".join(replies) + b"]" if replies else None  # each answer encoded once
            request.headers = []  # Retry-After belongs to a single call
        else:
            answer = await self._one(message if message != [] else None, request)
            payload = _json.dumps(answer) if answer is not None else None
        await send_response(send, 200 if payload is not None else 204, payload or b"", request.headers)
        for callback in request.after:  # post_response: the response is sent
            try:
                await callback()
            except Exception:
                self.app.logger.exception("post_response handler failed")

    async def _encoded(self, message: Any, request: _Request) -> bytes | None:
        """One batch item's answer, encoded (None for a notification)."""
        answer = await self._one(message, request)
        return _json.dumps(answer) if answer is not None else None

    async def _one(self, message: Any, request: _Request) -> JSONObject | None:
        # JSON-RPC 2.0 §4 allows a null id (discouraged) and params by position; MCP's rule is stricter.
        invalid = request_envelope_error(message, json_rpc=True)
        if invalid is not None:
            return error_response(None, invalid.to_wire())
        notification = "id" not in message
        request_id = message.get("id")
        try:
            result = await self._dispatch(message, request)
        except RPCError as error:
            if isinstance(error, RateLimitedError | UnavailableError):
                request.headers.append((b"retry-after", str(error.retry_after).encode()))
            return None if notification else error_response(request_id, error_wire(error, debug=self.app.debug))
        return None if notification else result_response(request_id, result)

    async def _dispatch(self, message: JSONObject, request: _Request) -> Any:
        name = message["method"]
        if name == "rpc.discover":
            return self.app.openrpc(self.version)
        method = self.app.method_for(name, self.version)
        if method is None:
            raise MethodNotFoundError(f"Method not found: {name}")
        params = message.get("params", {})
        if isinstance(params, list):
            names = list(method.schemas.params_model.model_fields)
            if len(params) > len(names):
                raise InvalidParamsError(f"{name} takes at most {len(names)} positional params")
            params = dict(zip(names, params, strict=False))
        elif not isinstance(params, dict):
            raise InvalidParamsError("params must be an object or an array")
        call = Call(method, params, self.version, "rpc", RPCContext(), request.roles, True, request.after.append)
        return await self.app.executor.run(call)


def _refused(item: Any, reason: str) -> bytes:
    return _json.dumps(error_response(id_of(item), InvalidRequestError(f"Invalid Request: {reason}").to_wire()))
