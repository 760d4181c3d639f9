"""The JSON-RPC 2.0 endpoint of one API version: POST for calls (single, batch, notifications), GET for
the OpenRPC document. Every call runs through the shared `Executor`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crank import _json
from crank.exceptions import InvalidParamsError, MethodNotFoundError, RateLimitedError, RPCError
from crank.ids import new_request_id
from crank.rpc.executor import Call, error_wire
from crank.types import JSONObject, Receive, Scope, Send

if TYPE_CHECKING:
    from crank.rpc.app import RPCApp

__all__ = ["JSONRPCEndpoint"]

_MAX_BODY = 4 * 1024 * 1024


@dataclass
class _Request:
    roles: frozenset[str]
    after: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


class JSONRPCEndpoint:
    def __init__(self, app: RPCApp, version: str) -> None:
        self.app = app
        self.version = version

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            await _send(send, 200, _json.dumps(self.app.openrpc(self.version)))
            return
        if scope["method"] != "POST":
            await _send(send, 405, b"", [(b"allow", b"GET, POST")])
            return
        body = await _read(receive)
        if body is None:
            await _send(send, 413, _error(None, -32600, f"Request body exceeds {_MAX_BODY} bytes"))
            return
        try:
            message = _json.loads(body)
        except _json.JSONDecodeError:
            await _send(send, 200, _error(None, -32700, "Parse error"))
            return
        request = _Request(await self.app.resolve_roles(scope))
        if isinstance(message, list) and message:
            answers = await asyncio.gather(*(self._one(item, request) for item in message))
            replies = [answer for answer in answers if answer is not None]
            payload = _json.dumps(replies) if replies else None
            request.headers = []  # Retry-After belongs to a single call
        else:
            answer = await self._one(message if message != [] else None, request)
            payload = _json.dumps(answer) if answer is not None else None
        await _send(send, 200 if payload is not None else 204, payload or b"", request.headers)
        for callback in request.after:  # post_response: the response is sent
            try:
                await callback()
            except Exception:
                self.app.logger.exception("post_response handler failed")

    async def _one(self, message: Any, request: _Request) -> JSONObject | None:
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not isinstance(message.get("method"), str)
        ):
            return _reply_error(None, RPCError("Invalid Request", code=-32600), debug=False)
        notification = "id" not in message
        request_id = message.get("id")
        if not notification and not (request_id is None or type(request_id) in (str, int)):
            return _reply_error(None, RPCError("Invalid Request", code=-32600), debug=False)
        try:
            result = await self._dispatch(message, request)
        except RPCError as error:
            if isinstance(error, RateLimitedError):
                request.headers.append((b"retry-after", str(error.retry_after).encode()))
            return None if notification else _reply_error(request_id, error, debug=self.app.debug)
        return None if notification else {"jsonrpc": "2.0", "id": request_id, "result": result}

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
        call = Call(method, params, self.version, "rpc", new_request_id(), request.roles, True, request.after.append)
        outcome = await self.app.executor.run(call)
        return outcome.result


def _reply_error(request_id: Any, error: RPCError, *, debug: bool) -> JSONObject:
    return {"jsonrpc": "2.0", "id": request_id, "error": error_wire(error, debug=debug)}


def _error(request_id: Any, code: int, message: str) -> bytes:
    return _json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


async def _read(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
