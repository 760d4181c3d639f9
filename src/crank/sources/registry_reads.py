"""`registry_read`: one read of the registry on a request's path, in a worker thread, answered 503 when the registry
fails it. A key look-up and a cold agent's build read this way; the request is told to retry, and the log says why
once per episode (`ThrottledLog`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from crank.exceptions import DependencyUnavailableError
from crank.registry import DATABASE_ERRORS, describe_database_error
from crank.wire.notices import ThrottledLog

__all__ = ["registry_read"]

logger = logging.getLogger("crank.gateway")
_notices = ThrottledLog(logger)

T = TypeVar("T")


async def registry_read(read: Callable[..., T], *args: Any, what: str, retry_after: int = 1) -> T:
    """`read(*args)` in a worker thread. A registry that fails it raises `DependencyUnavailableError` (503 with
    `retry_after`): "This server cannot {what} right now (its registry does not answer); retry later."."""
    try:
        return await run_in_threadpool(read, *args)
    except DATABASE_ERRORS as exc:
        _notices.warning(f"registry-read {what}", "the registry failed a read (%s): %s", what,
                         describe_database_error(exc))  # fmt: skip
        raise DependencyUnavailableError(
            "registry",
            f"This server cannot {what} right now (its registry does not answer); retry later.",
            retry_after=retry_after,
        ) from None
