"""One pipeline for every call, from /rpc or from MCP: access, conversion, cache, lock, rate limit, events.

Order: roles (refused without running) -> `request` event -> arguments converted into the method's types
and validated -> cache (a hit does not run the method) -> lock -> rate limit -> the call (sync methods
in a worker thread) -> result normalized to JSON types -> `response` event; `post_response` is handed
to the caller to run after its response is sent. Any failure becomes an `RPCError` and fires `error`.

Cache, lock and rate limit live in a `Coordinator` (crank.state.coordination): this process's memory by
default, Redis when every worker and replica must act as one.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import pydantic
from pydantic_core import to_jsonable_python
from starlette.concurrency import run_in_threadpool

from crank import _json
from crank.exceptions import (
    AccessDeniedError,
    CallSignal,
    DependencyUnavailableError,
    InternalError,
    InvalidParamsError,
    LockTimeoutError,
    ParamsValidationError,
    RateLimitedError,
    RPCError,
    UnavailableError,
    Violation,
)
from crank.rpc.context import Context
from crank.rpc.events import Event, Events
from crank.rpc.method import Method
from crank.schema import DatetimeFormat, Problem, json_path, problems_of
from crank.state.coordination import DEFAULT_CACHE_SIZE, Coordinator, Held, LocalCoordinator
from crank.wire.http import retry_after_seconds

__all__ = ["DEFAULT_CACHE_SIZE", "Call", "Executor", "error_data", "error_wire", "fencing_token"]

logger = logging.getLogger("crank.rpc")

Defer = Callable[[Callable[[], Awaitable[None]]], Any]


@dataclass(slots=True)
class Call:
    method: Method
    params: dict[str, Any]
    version: str
    source: Literal["rpc", "mcp"]
    context: Context
    """The caller's context: the MCP call's, or a /rpc call's `RPCContext`. It owns the request id, made on first
    use, so that a call that logs nothing and fires no event never makes one."""
    roles: frozenset[str] = frozenset()
    apply_rate_limit: bool = True
    defer: Defer | None = None  # schedules post_response after the response is sent

    @property
    def request_id(self) -> str:
        return self.context.request_id


_FENCING_TOKEN: contextvars.ContextVar[int | None] = contextvars.ContextVar("crank_fencing_token", default=None)


def fencing_token() -> int | None:
    """Inside a `lock=True` method: the fencing token of the lock this call holds (None elsewhere).

    Tokens of one method's lock only grow, across every process sharing its Redis. A lock's lease can lapse
    under a holder that stalled longer than the lease; hand the token to the storage the method writes and
    have it refuse a token lower than the highest it has seen, and the stalled holder's late writes are
    refused instead of overwriting the newer holder's.
    """
    return _FENCING_TOKEN.get()


class Executor:
    def __init__(
        self,
        events: Events,
        *,
        coordinator: Coordinator | None = None,
        datetime_format: DatetimeFormat = "date-time",
        debug: bool = False,
    ) -> None:
        self.events = events
        self.coordinator: Coordinator = coordinator or LocalCoordinator()
        self.datetime_format = datetime_format
        self.debug = debug

    async def run(self, call: Call) -> Any:
        """Run one call and return its result, made JSON: its roles, its arguments, then the method (through the
        cache, the lock and the rate limit it has). One coroutine level for the common call, whose method is
        awaited here."""
        method = call.method
        try:
            if logger.isEnabledFor(logging.DEBUG):  # its arguments would make the request id
                logger.debug("rpc %s %s from %s (request_id=%s)", method.name, call.version, call.source,
                             call.request_id)  # fmt: skip
            if method.roles and not method.roles & call.roles:
                needed = ", ".join(sorted(method.roles))
                raise AccessDeniedError(f"Calling {method.name} needs one of the roles: {needed}")
            if self.events.wants("request"):
                await self.events.emit(self._event("request", call))
            kwargs = self._convert(call)
            if method.cache_ttl:
                hit, result = await self._cached(call, kwargs)
                if hit:  # answered from the cache: the method did not run, and no response event is told
                    return result
            else:
                result = self.normalize(await self._started(call, kwargs))
            if self.events.wants("response"):
                await self.events.emit(self._event("response", call, result=result))
            if call.defer is not None and self.events.wants("post_response"):
                event = self._event("post_response", call, result=result)
                call.defer(lambda: self.events.emit(event))
            return result
        except CallSignal:
            raise  # the context ends the call in the protocol's way: not the method's failure
        except Exception as exc:
            error = as_rpc_error(exc)
            level = logging.ERROR if isinstance(error, InternalError) else logging.INFO
            logger.log(level, "rpc %s failed: %s (request_id=%s)", call.method.name, error.message, call.request_id,
                       exc_info=exc if level == logging.ERROR else None)  # fmt: skip
            if self.events.wants("error"):
                await self.events.emit(self._event("error", call, error=error))
            raise error from exc

    async def _cached(self, call: Call, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """A `cache=` method's result: (True, the one cached for these arguments), or (False, the method's), which
        is then cached."""
        method = call.method
        params = _json.dumps_sorted(call.params)
        hit, cached = await self.coordinator.cache_get(method.name, call.version, params)
        if hit:
            return True, cached
        result = self.normalize(await self._started(call, kwargs))
        await self.coordinator.cache_put(method.name, call.version, params, result, method.cache_ttl or 0.0)
        return False, result

    def _started(self, call: Call, kwargs: dict[str, Any]) -> Awaitable[Any]:
        """The method's run, to await: under its lock, after its rate limit, in a thread when it is not async; the
        plain async method's own coroutine, with no level of ours around it."""
        return self._locked(call, kwargs) if call.method.lock else self._unlocked(call, kwargs)

    def _unlocked(self, call: Call, kwargs: dict[str, Any]) -> Awaitable[Any]:
        """The method's run once any lock is held: after its rate limit when it has one."""
        if call.apply_rate_limit and call.method.rate_limit is not None:
            return self._counted(call, kwargs)
        return self._called(call.method, kwargs)

    def _convert(self, call: Call) -> dict[str, Any]:
        schemas = call.method.schemas
        try:
            # The model's validator itself: `model_validate` adds only its keyword defaults, at twice the cost.
            model = schemas.params_validator.validate_python(call.params)
        except pydantic.ValidationError as exc:
            violations = [Violation(_input_path(problem, call.params), problem.message) for problem in problems_of(exc)]
            raise ParamsValidationError(call.method.name, violations) from None
        kwargs: dict[str, Any] = model.__dict__  # the fields' values (pydantic keeps extras and private ones apart)
        if schemas.context_parameter is not None:
            kwargs = {**kwargs, schemas.context_parameter: call.context}
        return kwargs

    async def _locked(self, call: Call, kwargs: dict[str, Any]) -> Any:
        held = await self._acquire(call.method)
        token = _FENCING_TOKEN.set(held.token)
        try:
            # Made JSON under the lock too: a result that reads shared state reads it while the lock is held.
            return self.normalize(await self._unlocked(call, kwargs))
        finally:
            _FENCING_TOKEN.reset(token)
            await self.coordinator.release(held)

    async def _acquire(self, method: Method) -> Held:
        try:
            held = await self.coordinator.acquire(method.name)
        except DependencyUnavailableError:
            raise UnavailableError(f"{method.name} cannot run now: its lock cannot be taken (Redis does not "
                                   "answer)") from None  # fmt: skip
        if held is None:
            waited = self.coordinator.lock_timeout
            raise LockTimeoutError(f"{method.name} is locked by another call: waited {waited:g} s")
        return held

    async def _counted(self, call: Call, kwargs: dict[str, Any]) -> Any:
        await self._count(call.method)
        return await self._called(call.method, kwargs)

    @staticmethod
    def _called(method: Method, kwargs: dict[str, Any]) -> Awaitable[Any]:
        if method.is_async:
            awaitable: Awaitable[Any] = method.func(**kwargs)
            return awaitable
        return run_in_threadpool(method.func, **kwargs)

    async def _count(self, method: Method) -> None:
        limit = method.rate_limit
        assert limit is not None
        try:
            wait = await self.coordinator.count(method.name, limit.calls, limit.seconds)
        except DependencyUnavailableError:
            raise UnavailableError(f"{method.name} cannot run now: its rate limit cannot be counted (Redis does "
                                   "not answer)") from None  # fmt: skip
        if wait is not None:
            retry_after = retry_after_seconds(wait)
            raise RateLimitedError(f"{method.name} allows {limit.calls} calls per {limit.seconds:g} s",
                                   retry_after=retry_after, data={"retry_after": retry_after})  # fmt: skip

    def normalize(self, result: Any) -> Any:
        """JSON types only: models, dataclasses, enums and dates become what JSON can carry (a JSON scalar is one
        already, and is not handed to pydantic)."""
        if type(result) in _JSON_SCALARS:
            return result
        if self.datetime_format == "timestamp":
            result = _timestamps(_python(result))
        return to_jsonable_python(result)

    def _event(self, name: Any, call: Call, *, result: Any = None, error: BaseException | None = None) -> Event:
        return Event(name, call.method.name, call.version, call.source, call.request_id, call.params, result, error)


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


_JSON_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


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
