"""One pipeline for every call, from /rpc or from MCP: access, conversion, cache, lock, rate limit, events.

Order: roles (refused without running) -> `request` event -> arguments converted into the method's types
and validated -> cache (a hit does not run the method) -> lock -> rate limit -> the call (sync methods
in a worker thread) -> result normalized to JSON types -> `response` event; `post_response` is handed
to the caller to run after its response is sent. Any failure becomes an `RPCError` and fires `error`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import pydantic
from cachetools import TLRUCache
from pydantic_core import to_jsonable_python
from starlette.concurrency import run_in_threadpool

from crank import _json
from crank.exceptions import (
    AccessDeniedError,
    ConfigurationError,
    InternalError,
    InvalidParamsError,
    ParamsValidationError,
    RateLimitedError,
    RPCError,
    Violation,
)
from crank.rpc.events import Event, Events
from crank.rpc.method import Method
from crank.schema import DatetimeFormat, Problem, json_path, problems_of

__all__ = ["DEFAULT_CACHE_SIZE", "Call", "Executor", "Outcome", "error_data", "error_wire"]

logger = logging.getLogger("crank.rpc")

Defer = Callable[[Callable[[], Awaitable[None]]], Any]


@dataclass
class Call:
    method: Method
    params: dict[str, Any]
    version: str
    source: Literal["rpc", "mcp"]
    request_id: str
    roles: frozenset[str] = frozenset()
    apply_rate_limit: bool = True
    defer: Defer | None = None  # schedules post_response after the response is sent


@dataclass
class Outcome:
    result: Any


DEFAULT_CACHE_SIZE: Final = 10_000
"""The most results the in-process cache keeps (every cached method together)."""


class Executor:
    def __init__(
        self,
        events: Events,
        *,
        datetime_format: DatetimeFormat = "date-time",
        cache_size: int = DEFAULT_CACHE_SIZE,
        debug: bool = False,
    ) -> None:
        if cache_size < 1:
            raise ConfigurationError(f"cache_size must be at least 1, got {cache_size}")
        self.events = events
        self.datetime_format = datetime_format
        self.debug = debug
        # Bounded and expiring: a result leaves at its method's TTL, or earlier when the least recently used
        # ones make room, so distinct arguments from callers cannot grow the process (one entry per key).
        self._cache: TLRUCache[tuple[str, str, bytes], tuple[float, Any]] = TLRUCache(
            maxsize=cache_size, ttu=_expiry, timer=time.monotonic
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._windows: dict[str, tuple[float, int]] = {}

    async def run(self, call: Call) -> Outcome:
        try:
            return await self._run(call)
        except Exception as exc:
            error = as_rpc_error(exc)
            level = logging.ERROR if isinstance(error, InternalError) else logging.INFO
            logger.log(level, "rpc %s failed: %s (request_id=%s)", call.method.name, error.message, call.request_id,
                       exc_info=exc if level == logging.ERROR else None)  # fmt: skip
            if self.events.wants("error"):
                await self.events.emit(self._event("error", call, error=error))
            raise error from exc

    async def _run(self, call: Call) -> Outcome:
        method = call.method
        logger.debug("rpc %s %s from %s (request_id=%s)", method.name, call.version, call.source, call.request_id)
        if method.roles and not method.roles & call.roles:
            raise AccessDeniedError(f"Calling {method.name} needs one of the roles: {', '.join(sorted(method.roles))}")
        if self.events.wants("request"):
            await self.events.emit(self._event("request", call))
        kwargs = self._convert(call)
        key = (method.name, call.version, _json.dumps_sorted(call.params)) if method.cache_ttl else None
        if key is not None and (hit := self._cache.get(key)) is not None:
            return Outcome(hit[1])
        if method.lock:
            async with self._locks.setdefault(method.name, asyncio.Lock()):
                result = await self._invoke(call, kwargs)
        else:
            result = await self._invoke(call, kwargs)
        if key is not None:
            self._cache[key] = (method.cache_ttl or 0.0, result)
        if self.events.wants("response"):
            await self.events.emit(self._event("response", call, result=result))
        if call.defer is not None and self.events.wants("post_response"):
            event = self._event("post_response", call, result=result)
            call.defer(lambda: self.events.emit(event))
        return Outcome(result)

    def _convert(self, call: Call) -> dict[str, Any]:
        try:
            model = call.method.schemas.params_model.model_validate(call.params)
        except pydantic.ValidationError as exc:
            violations = [Violation(_input_path(problem, call.params), problem.message) for problem in problems_of(exc)]
            raise ParamsValidationError(call.method.name, violations) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    async def _invoke(self, call: Call, kwargs: dict[str, Any]) -> Any:
        if call.apply_rate_limit and call.method.rate_limit is not None:
            self._count(call.method)
        if call.method.is_async:
            result = await call.method.func(**kwargs)
        else:
            result = await run_in_threadpool(call.method.func, **kwargs)
        return self.normalize(result)

    def _count(self, method: Method) -> None:
        limit = method.rate_limit
        assert limit is not None
        now = time.monotonic()
        start, count = self._windows.get(method.name, (now, 0))
        if now - start >= limit.seconds:
            start, count = now, 0
        if count >= limit.calls:
            retry_after = max(1, int(limit.seconds - (now - start) + 0.999))
            raise RateLimitedError(f"{method.name} allows {limit.calls} calls per {limit.seconds:g} s",
                                   retry_after=retry_after, data={"retry_after": retry_after})  # fmt: skip
        self._windows[method.name] = (start, count + 1)

    def normalize(self, result: Any) -> Any:
        """JSON types only: models, dataclasses, enums and dates become what JSON can carry."""
        if self.datetime_format == "timestamp":
            result = _timestamps(_python(result))
        return to_jsonable_python(result)

    def _event(self, name: Any, call: Call, *, result: Any = None, error: BaseException | None = None) -> Event:
        return Event(name, call.method.name, call.version, call.source, call.request_id, call.params, result, error)


def _expiry(key: Any, value: tuple[float, Any], now: float) -> float:
    return now + value[0]


def _input_path(problem: Problem, params: dict[str, Any]) -> str:
    """The JSON path of the offending value in the params. pydantic's `loc` also names the union member or
    validator that failed (`("when", "date")` for `when: date | int`): those steps are not in the input."""
    loc = problem.loc
    value: Any = params
    path: list[str | int] = []
    for index, part in enumerate(loc):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        elif not (problem.type == "missing" and index == len(loc) - 1):
            continue  # a union member's or validator's name
        path.append(part)
    return json_path(path)


_ANY: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)


def _python(value: Any) -> Any:
    """Models and dataclasses as plain Python values, dates left as dates."""
    return _ANY.dump_python(value, mode="python")


def _timestamps(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, dict):
        return {key: _timestamps(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_timestamps(item) for item in value]
    return value


def as_rpc_error(exc: BaseException) -> RPCError:
    if isinstance(exc, RPCError):
        return exc
    return InternalError()


def error_data(error: RPCError, cause: BaseException | None, *, debug: bool) -> dict[str, Any]:
    """`data` of an error: the exception class, the error's own details; file, line and trace in debug only."""
    source = cause if cause is not None and not isinstance(cause, RPCError) else error
    # The conversion step's refinement goes out as the public class it refines: /rpc clients see one name.
    name = InvalidParamsError.__name__ if isinstance(source, ParamsValidationError) else type(source).__name__
    data: dict[str, Any] = {"exception": name}
    if isinstance(error.data, dict):
        data.update(error.data)
    elif error.data is not None:
        data["details"] = error.data
    if debug and cause is not None and cause.__traceback__ is not None:
        frame = traceback.extract_tb(cause.__traceback__)[-1]
        data.update(file=frame.filename, line=frame.lineno, trace="".join(traceback.format_exception(cause)))
    return data


def error_wire(error: RPCError, *, debug: bool) -> dict[str, Any]:
    """The `{code, message, data}` object a client sees, on /rpc and in an MCP tool error alike."""
    cause = error.__cause__ if error.__cause__ is not error else None
    return {"code": error.code, "message": error.message, "data": error_data(error, cause, debug=debug)}
