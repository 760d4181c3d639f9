"""Completions (`completion/complete`): values a client may offer for a prompt's argument or a template's variable.

A `Completer` is either a fixed sequence of values (an enum), offered when they start with what the user typed
(case-insensitively), or a function `(value, context_arguments) -> values`, sync or async, that decides itself.
An answer carries at most `MAX_COMPLETION_VALUES` values, as the specification allows, with `total` and `hasMore`
saying how many there were.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeAlias

from crank.types import JSONObject

__all__ = ["MAX_COMPLETION_VALUES", "MAX_COMPLETION_INPUT", "Completer", "complete"]

MAX_COMPLETION_VALUES = 100
"""At most this many values in one answer (completion.mdx: "maximum 100 items")."""
MAX_COMPLETION_INPUT = 1024
"""The longest partial value a completion is asked for: a longer one gets no values, never a search."""

CompleterFunction: TypeAlias = Callable[[str, Mapping[str, str]], Sequence[str] | Awaitable[Sequence[str]]]
Completer: TypeAlias = Sequence[str] | CompleterFunction


async def complete(completer: Completer | None, value: str, arguments: Mapping[str, str]) -> JSONObject:
    """The `completion` object for one argument: values that fit `value`, at most 100 of them."""
    if completer is None or len(value) > MAX_COMPLETION_INPUT:
        found: list[str] = []
    elif callable(completer):
        answer = completer(value, arguments)
        if inspect.isawaitable(answer):
            answer = await answer
        found = [str(item) for item in answer]
    else:
        typed = value.casefold()
        found = [str(item) for item in completer if str(item).casefold().startswith(typed)]
    return {"values": found[:MAX_COMPLETION_VALUES], "total": len(found), "hasMore": len(found) > MAX_COMPLETION_VALUES}
