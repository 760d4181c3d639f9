"""Stored prompt templates: Jinja2 in a sandbox with a small language, checked at publish, bounded at render.

A prompt's text is written by a tenant and its arguments come from a client, so both are hostile. A template may
use its declared arguments, `{% if %}`, string literals, comparisons, `~` and the filters in `ALLOWED_FILTERS`.
Loops, macros, calls, attribute and item access, assignments, includes and arithmetic are refused at publish
with the place of the first one: a prompt argument is a string, so nothing needs them, and without them no
template can loop or reach a Python object. Rendering also runs in Jinja2's `SandboxedEnvironment`, as a second
wall. Its output is cut off at `MAX_RENDERED` characters and its time at `RENDER_TIMEOUT`, both answered with an
error naming the prompt; with arguments of at most 64 KiB and templates of 16 KiB, neither should ever be reached
by a template that means no harm.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from jinja2 import Template, TemplateSyntaxError, nodes
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from crank.exceptions import ConfigurationError, InvalidParamsError

__all__ = ["ALLOWED_FILTERS", "MAX_RENDERED", "RENDER_TIMEOUT", "PromptTemplate"]

MAX_RENDERED: Final = 256 * 1024
"""The longest text one message may render to (characters)."""
RENDER_TIMEOUT: Final = 0.25
"""Seconds one message may take to render."""
ALLOWED_FILTERS: Final = frozenset({
    "capitalize", "default", "d", "e", "escape", "first", "last", "length", "count", "lower", "striptags", "title",
    "tojson", "trim", "truncate", "upper", "urlencode", "wordcount",
})  # fmt: skip
"""Filters whose output is at most a small multiple of their input: none repeats, pads or replaces."""
ALLOWED_TESTS: Final = frozenset({"defined", "undefined", "none", "string", "eq", "ne", "in", "empty"})
_ALLOWED_NODES: Final = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Const, nodes.If, nodes.Filter, nodes.Test,
    nodes.Compare, nodes.Operand, nodes.And, nodes.Or, nodes.Not, nodes.Concat, nodes.CondExpr, nodes.Keyword,
)  # fmt: skip
_ENVIRONMENT = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


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
        except TemplateSyntaxError as exc:
            raise ConfigurationError(
                f"{where}: the template does not parse (line {exc.lineno}: {exc.message})"
            ) from None
        for node in tree.find_all(nodes.Node):
            _check_node(node, arguments, where)
        return cls(_ENVIRONMENT.from_string(source), where)

    def render(self, arguments: Mapping[str, str]) -> str:
        """The text for these (checked) arguments; `InvalidParamsError` when it would be too long or too slow,
        or the sandbox refused something."""
        deadline = time.monotonic() + RENDER_TIMEOUT
        pieces: list[str] = []
        size = 0
        try:
            for piece in self.template.generate(dict(arguments)):
                size += len(piece)
                if size > MAX_RENDERED:
                    raise InvalidParamsError(f"{self.where}: the text would be longer than {MAX_RENDERED} characters")
                if time.monotonic() > deadline:
                    raise InvalidParamsError(f"{self.where}: rendering took longer than {RENDER_TIMEOUT:g} s")
                pieces.append(piece)
        except (SecurityError, UndefinedError) as exc:
            raise InvalidParamsError(f"{self.where}: the template was refused: {str(exc)[:200]}") from None
        return "".join(pieces)


def _check_node(node: nodes.Node, arguments: frozenset[str], where: str) -> None:
    line = getattr(node, "lineno", None)
    at = f"{where}, line {line}" if line else where
    if not isinstance(node, _ALLOWED_NODES):
        raise ConfigurationError(
            f"{at}: {type(node).__name__} is not allowed in a prompt template, which has its arguments, if, ~ "
            "and a few filters (docs/gateway.md, Prompts)"
        )
    if isinstance(node, nodes.Name) and node.name not in arguments:
        raise ConfigurationError(f"{at}: {node.name!r} is not an argument of the prompt")
    if isinstance(node, nodes.Filter) and node.name not in ALLOWED_FILTERS:
        raise ConfigurationError(
            f"{at}: the filter {node.name!r} is not allowed ({', '.join(sorted(ALLOWED_FILTERS))})"
        )
    if isinstance(node, nodes.Test) and node.name not in ALLOWED_TESTS:
        raise ConfigurationError(f"{at}: the test {node.name!r} is not allowed ({', '.join(sorted(ALLOWED_TESTS))})")
