"""What an `RPCApp` offers beside its methods: documents (resources) and prompts, registered by decorators.

```python
@app.resource("docs://guide", groups=["mcp"], mime_type="text/markdown")
def guide() -> str:
    \"\"\"How to use the shop's tools.\"\"\"
    return GUIDE

@app.resource("docs://products/{sku}", groups=["mcp"], mime_type="application/json")
async def product_sheet(sku: Literal["A-1", "B-2"]) -> str: ...

@app.prompt(groups=["mcp"])
def restock(product: str, urgency: Literal["low", "high"] = "low") -> str:
    \"\"\"Ask for a restock plan.\"\"\"
    return f"Plan a {urgency}-urgency restock of {product}."
```

The rpc core only keeps them, as it keeps a method's `MCP` settings; the MCP layer's rpc source
(`crank.sources.rpc`) publishes the ones of its endpoint's group. A function's parameters are the template's
variables or the prompt's arguments (strings; required unless they have a default), its docstring the description,
and a `Literal` annotation the values `completion/complete` offers (or `completions={"name": function}`).
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.concurrency import run_in_threadpool

from crank.exceptions import ConfigurationError

__all__ = ["Argument", "PromptSpec", "ResourceSpec"]

_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Argument:
    """One parameter of a resource template's or a prompt's function."""

    name: str
    required: bool
    description: str | None = None
    values: tuple[str, ...] | None = None
    """The values a `Literal` annotation allows: what completion offers (and all the function is given)."""
    complete: Callable[..., Any] | None = None


@dataclass(frozen=True)
class ResourceSpec:
    uri: str
    name: str
    func: Callable[..., Any]
    groups: tuple[str, ...]
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    arguments: tuple[Argument, ...] = ()
    roles: frozenset[str] = frozenset()
    """A caller needs one of them to see and read it (none: everyone), as a method's `roles`."""

    @property
    def is_template(self) -> bool:
        return bool(_VARIABLE.search(self.uri))


@dataclass(frozen=True)
class PromptSpec:
    name: str
    func: Callable[..., Any]
    groups: tuple[str, ...]
    title: str | None = None
    description: str | None = None
    arguments: tuple[Argument, ...] = field(default_factory=tuple)
    roles: frozenset[str] = frozenset()
    """A caller needs one of them to see and get it (none: everyone), as a method's `roles`."""


def resource_spec(uri: str, func: Callable[..., Any], *, name: str | None, groups: tuple[str, ...],
                  title: str | None, description: str | None, mime_type: str | None,
                  completions: Mapping[str, Callable[..., Any]],
                  roles: frozenset[str] = frozenset()) -> ResourceSpec:  # fmt: skip
    """A resource's record; its function's parameters must be exactly the URI template's variables."""
    label = name or func.__name__
    arguments = _arguments(func, f"resource {uri!r}", completions)
    variables = _VARIABLE.findall(uri)
    if sorted(variables) != sorted(argument.name for argument in arguments):
        raise ConfigurationError(
            f"resource {uri!r}: the function's parameters {[a.name for a in arguments]} must be the template's "
            f"variables {variables}"
        )
    text = description or _doc(func)
    return ResourceSpec(uri, label, func, groups, title, text, mime_type, arguments, roles)


def prompt_spec(func: Callable[..., Any], *, name: str | None, groups: tuple[str, ...], title: str | None,
                description: str | None, completions: Mapping[str, Callable[..., Any]],
                roles: frozenset[str] = frozenset()) -> PromptSpec:  # fmt: skip
    label = name or func.__name__
    arguments = _arguments(func, f"prompt {label!r}", completions)
    return PromptSpec(label, func, groups, title, description or _doc(func), arguments, roles)


async def call(func: Callable[..., Any], arguments: Mapping[str, str]) -> Any:
    """Run a resource's or a prompt's function with its string arguments: a sync one in the thread pool, as the
    executor runs a sync method, so that it never holds up the event loop."""
    if inspect.iscoroutinefunction(func):
        return await func(**arguments)
    value = await run_in_threadpool(func, **arguments)
    return await value if inspect.isawaitable(value) else value


def _arguments(
    func: Callable[..., Any], what: str, completions: Mapping[str, Callable[..., Any]]
) -> tuple[Argument, ...]:
    try:
        hints = typing.get_type_hints(func)
    except Exception as exc:
        raise ConfigurationError(f"{what}: cannot resolve its type hints: {exc}") from None
    found = []
    for parameter in inspect.signature(func).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ConfigurationError(f"{what}: *args and **kwargs cannot be arguments")
        values = _enum_values(hints.get(parameter.name), what, parameter.name)
        found.append(Argument(parameter.name, parameter.default is parameter.empty, None, values,
                              completions.get(parameter.name)))  # fmt: skip
    unknown = set(completions) - {argument.name for argument in found}
    if unknown:
        raise ConfigurationError(f"{what}: completions for unknown arguments {sorted(unknown)}")
    return tuple(found)


def _enum_values(annotation: Any, what: str, name: str) -> tuple[str, ...] | None:
    if annotation is None or annotation is str:
        return None
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        if all(isinstance(value, str) for value in values):
            return tuple(values)
    raise ConfigurationError(f"{what}: argument {name!r} must be a str or a Literal of strings")


def _doc(func: Callable[..., Any]) -> str | None:
    return inspect.getdoc(func) or None
