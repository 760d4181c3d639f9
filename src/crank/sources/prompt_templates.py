"""Stored prompt templates: Jinja2 in a sandbox with a small language, checked at publish, bounded at render.

A prompt's text is written by a tenant and its arguments come from a client, so both are hostile. A template may
use its declared arguments, `{% if %}`, string literals, comparisons, `~` and the filters in `ALLOWED_FILTERS`.
Loops, macros, calls, attribute and item access, assignments, includes and arithmetic are refused at publish
with the place of the first one: a prompt argument is a string, so nothing needs them, and without them no
template can loop or reach a Python object. A template uses arguments at most `MAX_REFERENCES` times and no chain
of filters multiplies (`GROWING_FILTERS`), so one expression is a few MiB at worst. Rendering also runs in
Jinja2's `SandboxedEnvironment`, with no globals, as a second wall.

One workspace's prompts render one at a time (`RenderGates`), at most `MAX_RENDER_WAITERS` more waiting, and
together they take at most `RENDER_SHARE` of a second of rendering each second, and every workspace's together
`RENDER_PROCESS_SHARE`: past either a new render is refused (-32003, retry in a second), so no tenant's prompts
take more than a quarter of the process's time from the others, nor all of them more than half.
A whole prompt renders within one `RenderBudget`: `RENDER_TIMEOUT` seconds of its own work (`RENDER_WALL_TIMEOUT`
with the other requests' turns between its slices) and `MAX_RENDERED` characters for all its messages together,
each answered with an error naming the prompt. The budget is checked between the pieces of a message and inside a
piece, before every filter runs; a filter whose cost grows faster than its input
(`COSTLY_FILTERS`) takes at most `MAX_FILTER_INPUT` characters. Between pieces the renderer hands the event loop
back every `RENDER_SLICE` seconds, so one prompt never holds the other requests of the process for longer than a
piece. With arguments of at most 64 KiB and templates of 16 KiB, no template that means no harm reaches a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from cachetools import LRUCache
from jinja2 import Template, TemplateError, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from crank.exceptions import ConfigurationError, InvalidParamsError, RateLimitedError
from crank.wire.budgets import Budget

__all__ = [
    "ALLOWED_FILTERS",
    "MAX_RENDERED",
    "MAX_RENDER_WAITERS",
    "RENDER_PROCESS_SHARE",
    "RENDER_SHARE",
    "RENDER_TIMEOUT",
    "RENDER_WALL_TIMEOUT",
    "PromptTemplate",
    "RenderBudget",
    "RenderGate",
    "RenderGates",
]

MAX_RENDERED: Final = 1024 * 1024
"""The longest text a whole prompt may render to (characters, every message together)."""
RENDER_TIMEOUT: Final = 0.25
"""Seconds a whole prompt may take to render (every message together)."""
RENDER_SLICE: Final = 0.002
"""Seconds of rendering after which the renderer hands the event loop back to other requests (between pieces)."""
RENDER_WALL_TIMEOUT: Final = 5.0
"""Seconds a prompt may take from its turn to its answer, the other requests' turns between its slices included."""
RENDER_SHARE: Final = 0.25
"""Seconds of rendering one workspace's prompts may take each second, all together (bursts of twice as much)."""
RENDER_PROCESS_SHARE: Final = 0.5
"""Seconds of rendering every workspace's prompts may take each second, all together: the rest is the others'."""
MAX_RENDER_WAITERS: Final = 8
"""Renders of one workspace that may wait for their turn; past it a new one is refused at once (-32003)."""
MAX_FILTER_INPUT: Final = 16 * 1024
"""The longest value a filter of `COSTLY_FILTERS` takes (characters): about 3 ms of work at most."""
ALLOWED_FILTERS: Final = frozenset({
    "capitalize", "default", "d", "e", "escape", "first", "last", "length", "count", "lower", "striptags", "title",
    "trim", "truncate", "upper", "urlencode", "wordcount",
})  # fmt: skip
"""Filters whose output is at most a small multiple of their input: none repeats, pads or replaces."""
COSTLY_FILTERS: Final = frozenset({"striptags", "title", "urlencode", "wordcount"})
"""Filters that cost over a hundred times more per character than a copy (up to 160 ns on a test machine, where
`upper` costs 3): their input is bounded by `MAX_FILTER_INPUT`."""
GROWING_FILTERS: Final = frozenset({"e", "escape", "urlencode"})
"""Filters whose output may be a few times their input (`&` becomes `&amp;`): at most one in a chain, so that no
chain multiplies (`tojson`, which doubles quotes at each use, is not allowed at all)."""
MAX_REFERENCES: Final = 16
"""Uses of arguments in one template: with 64 KiB arguments and one growing filter, one expression is a few MiB at
worst before `MAX_RENDERED` refuses it (`{{ a ~ a ~ ... }}` is built whole)."""
MAX_DEPTH: Final = 32
"""How deeply a template's expressions and blocks may nest."""
ALLOWED_TESTS: Final = frozenset({"defined", "undefined", "none", "string", "eq", "ne", "in"})
_ALLOWED_NODES: Final = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const, nodes.If, nodes.Filter, nodes.Test,
    nodes.Compare, nodes.Operand, nodes.And, nodes.Or, nodes.Not, nodes.Concat, nodes.CondExpr, nodes.Keyword,
)  # fmt: skip
_ENVIRONMENT = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)
_ENVIRONMENT.globals.clear()  # no `range`, `lipsum`, `cycler`...: a name is a declared argument or nothing


@dataclass(slots=True)
class RenderBudget:
    """What one prompt may still spend rendering: `RENDER_TIMEOUT` seconds of its own work (`spent`, and the slice
    under way since `slice_started`), `RENDER_WALL_TIMEOUT` seconds in all (`deadline`), and characters left."""

    where: str
    deadline: float = field(default_factory=lambda: time.monotonic() + RENDER_WALL_TIMEOUT)
    characters: int = MAX_RENDERED
    spent: float = 0.0
    """Seconds spent rendering so far (not those other requests took between its slices)."""
    slice_started: float = field(default_factory=time.monotonic)

    def check(self) -> None:
        now = time.monotonic()
        if self.spent + (now - self.slice_started) > RENDER_TIMEOUT:
            raise InvalidParamsError(f"{self.where}: rendering took longer than {RENDER_TIMEOUT:g} s")
        if now > self.deadline:
            raise InvalidParamsError(f"{self.where}: rendering took longer than {RENDER_WALL_TIMEOUT:g} s, with the "
                                     "other requests' turns")  # fmt: skip

    def spend(self, characters: int) -> None:
        self.characters -= characters
        if self.characters < 0:
            raise InvalidParamsError(f"{self.where}: the text would be longer than {MAX_RENDERED} characters")


_BUDGET: ContextVar[RenderBudget | None] = ContextVar("crank_prompt_budget", default=None)
"""The budget of the prompt rendering now: what every filter checks before it runs."""


def _budgeted(name: str, run: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that checks the prompt's budget before it runs, and (a costly one) the size of its input."""
    costly = name in COSTLY_FILTERS
    at = 1 if hasattr(run, "jinja_pass_arg") else 0  # where the filtered value is: after the environment, if given

    def budgeted(*args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.check()
            value = args[at] if len(args) > at else None
            if costly and isinstance(value, str) and len(value) > MAX_FILTER_INPUT:
                raise InvalidParamsError(f"{budget.where}: the filter {name!r} takes at most {MAX_FILTER_INPUT} "
                                         "characters")  # fmt: skip
        return run(*args, **kwargs)

    if hasattr(run, "jinja_pass_arg"):  # Jinja2 gives such a filter its environment first: so must the wrapper
        budgeted.jinja_pass_arg = run.jinja_pass_arg  # type: ignore[attr-defined]
    return budgeted


for _name in ALLOWED_FILTERS:
    _ENVIRONMENT.filters[_name] = _budgeted(_name, _ENVIRONMENT.filters[_name])


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """One message's template, compiled and checked: render it with the prompt's arguments."""

    template: Template
    where: str

    @classmethod
    def compile(cls, source: str, arguments: frozenset[str], *, where: str) -> PromptTemplate:
        """Raises `ConfigurationError` naming `where` for a template that does not parse or uses more than the
        small language (module docstring), or a name that is not a declared argument."""
        try:
            tree = _ENVIRONMENT.parse(source)
            references = _check(tree, arguments, where, 0)
            if references > MAX_REFERENCES:
                raise ConfigurationError(f"{where}: the template uses arguments {references} times (at most "
                                         f"{MAX_REFERENCES})")  # fmt: skip
            return cls(_ENVIRONMENT.from_string(source), where)
        except TemplateSyntaxError as exc:
            raise ConfigurationError(
                f"{where}: the template does not parse (line {exc.lineno}: {exc.message})"
            ) from None
        except (TemplateError, SyntaxError, RecursionError, MemoryError):  # too deep for Jinja2's own compiler
            raise ConfigurationError(f"{where}: the template is nested too deeply") from None

    async def render(self, arguments: Mapping[str, str], budget: RenderBudget) -> str:
        """The text for these (checked) arguments, within the prompt's `budget`; `InvalidParamsError` when it would
        be too long or too slow, or the sandbox refused something. The event loop is handed back between pieces
        every `RENDER_SLICE` seconds."""
        pieces: list[str] = []
        token = _BUDGET.set(budget)
        try:
            generated = self.template.generate(dict(arguments))
            budget.slice_started = time.monotonic()
            for piece in generated:
                budget.spend(len(piece))
                budget.check()
                pieces.append(piece)
                now = time.monotonic()
                if now - budget.slice_started > RENDER_SLICE:
                    budget.spent += now - budget.slice_started
                    await asyncio.sleep(0)  # the others' turn: not counted as this prompt's work
                    budget.slice_started = time.monotonic()
            budget.spent += time.monotonic() - budget.slice_started
            budget.slice_started = time.monotonic()
        except (SecurityError, UndefinedError) as exc:
            raise InvalidParamsError(f"{self.where}: the template was refused: {str(exc)[:200]}") from None
        except (TemplateError, TypeError, ValueError, RecursionError) as exc:  # a filter given what it cannot take
            raise InvalidParamsError(f"{self.where}: the template cannot render these arguments "
                                     f"({type(exc).__name__})") from None  # fmt: skip
        finally:
            _BUDGET.reset(token)
        return "".join(pieces)


class RenderGate:
    """One workspace's turn at rendering: one prompt at a time, `RENDER_SHARE` of each second at most, and within the
    process's `RENDER_PROCESS_SHARE` for every workspace together."""

    def __init__(self, process: Budget) -> None:
        self._process = process
        self._share = Budget(RENDER_SHARE * 1000, 2 * RENDER_SHARE * 1000)  # in milliseconds of rendering
        self._waiting = 0
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.asynccontextmanager
    async def turn(self, budget: RenderBudget) -> AsyncIterator[None]:
        """Wait for this workspace's turn, render (the block), and charge what `budget` spent; `RateLimitedError`
        when the workspace's share or the process's is spent, or too many of its renders wait."""
        if not self._share.available() or not self._process.available() or self._waiting >= MAX_RENDER_WAITERS:
            raise RateLimitedError(
                "This workspace's prompts have used their share of rendering time; retry in a second.",
                retry_after=1, data={"retry_after": 1},
            )  # fmt: skip
        lock = self._own_lock()
        self._waiting += 1
        try:
            await lock.acquire()
        finally:
            self._waiting -= 1
        try:
            budget.deadline = time.monotonic() + RENDER_WALL_TIMEOUT  # the wait for the turn is not the render's
            yield
        finally:
            milliseconds = budget.spent * 1000
            self._share.spend(milliseconds)
            self._process.spend(milliseconds)
            lock.release()

    def _own_lock(self) -> asyncio.Lock:
        """The lock of the event loop that serves now (a lock is bound to the loop it first waits in)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        return self._lock


class RenderGates:
    """Each workspace's `RenderGate`, as one process serves them (`AgentSource` keeps one for every build); past
    `max_workspaces` the least recently used is forgotten (a render under way keeps its own gate)."""

    def __init__(self, max_workspaces: int = 4096) -> None:
        self._gates: LRUCache[str, RenderGate] = LRUCache(maxsize=max_workspaces)
        self._process = Budget(RENDER_PROCESS_SHARE * 1000, 2 * RENDER_PROCESS_SHARE * 1000)

    def gate(self, workspace: str) -> RenderGate:
        found = self._gates.get(workspace)
        if found is None:
            found = self._gates[workspace] = RenderGate(self._process)
        return found


def _check(node: nodes.Node, arguments: frozenset[str], where: str, depth: int) -> int:
    """Checks `node` and everything under it; returns how many times they use an argument."""
    if depth > MAX_DEPTH:
        raise ConfigurationError(f"{where}: the template is nested more than {MAX_DEPTH} deep")
    line = getattr(node, "lineno", None)
    at = f"{where}, line {line}" if line else where
    if not isinstance(node, _ALLOWED_NODES):
        raise ConfigurationError(
            f"{at}: {type(node).__name__} is not allowed in a prompt template, which has its arguments, if, ~ "
            "and a few filters (docs/gateway.md, Prompts)"
        )
    if isinstance(node, nodes.Name) and node.name not in arguments:
        raise ConfigurationError(f"{at}: {node.name!r} is not an argument of the prompt")
    if isinstance(node, nodes.Filter):
        _check_filter(node, at)
    if isinstance(node, nodes.Test) and node.name not in ALLOWED_TESTS:
        raise ConfigurationError(f"{at}: the test {node.name!r} is not allowed ({', '.join(sorted(ALLOWED_TESTS))})")
    found = int(isinstance(node, nodes.Name))
    for child in node.iter_child_nodes():
        found += _check(child, arguments, where, depth + 1)
    return found


def _check_filter(node: nodes.Filter, at: str) -> None:
    if node.name not in ALLOWED_FILTERS:
        raise ConfigurationError(
            f"{at}: the filter {node.name!r} is not allowed ({', '.join(sorted(ALLOWED_FILTERS))})"
        )
    if node.name in GROWING_FILTERS and node.node is not None:
        inner = [node.node, *node.node.find_all(nodes.Filter)]
        if any(isinstance(item, nodes.Filter) and item.name in GROWING_FILTERS for item in inner):
            raise ConfigurationError(f"{at}: {node.name!r} over a value already through one of "
                                     f"{', '.join(sorted(GROWING_FILTERS))}: at most one per value")  # fmt: skip
