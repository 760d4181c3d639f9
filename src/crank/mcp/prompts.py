"""What a prompt is: a named message template a user picks (`prompts/list`, `prompts/get`), with declared arguments.

A `Prompt` renders through an async renderer `(arguments, context) -> ...` that returns a string (one user
message), a list of messages (`PromptMessage` or wire dicts), a `PromptResult`, or `InputRequired` (2026-07-28:
the client answers and asks again). Arguments are strings, as the specification has them; a required one that is
missing is refused before the renderer runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from crank.exceptions import InvalidParamsError
from crank.mcp.completions import Completer
from crank.mcp.tools import Icon
from crank.types import JSONObject, JSONValue

__all__ = [
    "MAX_PROMPT_ARGUMENT",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "PromptRenderer",
    "PromptResult",
    "check_prompt_arguments",
    "messages_wire",
]

MAX_PROMPT_ARGUMENT = 64 * 1024
"""The longest value one prompt argument may have (characters)."""

PromptRenderer = Callable[[Mapping[str, str], Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class PromptArgument:
    """A declared argument; `completions` are the values `completion/complete` offers for it."""

    name: str
    description: str | None = None
    required: bool = False
    title: str | None = None
    completions: Completer | None = None

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {"name": self.name}
        if self.title:
            wire["title"] = self.title
        if self.description:
            wire["description"] = self.description
        wire["required"] = self.required
        return wire


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One message of a rendered prompt: a role and one content block (text, image, audio, resource)."""

    role: Literal["user", "assistant"]
    content: JSONObject

    @classmethod
    def text(cls, text: str, role: Literal["user", "assistant"] = "user") -> PromptMessage:
        return cls(role, {"type": "text", "text": text})

    def to_wire(self) -> JSONObject:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class PromptResult:
    """A rendered prompt with a description of its own."""

    messages: Sequence[PromptMessage | JSONObject]
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt definition plus the renderer that makes its messages."""

    name: str
    renderer: PromptRenderer
    title: str | None = None
    description: str | None = None
    arguments: tuple[PromptArgument, ...] = ()
    icons: tuple[Icon, ...] = ()
    meta: JSONObject | None = None

    def listing(self, title: str | None, description: str | None) -> JSONObject:
        """The `prompts/list` entry, with the texts of the request's language."""
        wire: JSONObject = {"name": self.name}
        if title or self.title:
            wire["title"] = title or self.title
        if description or self.description:
            wire["description"] = description or self.description
        if self.arguments:
            wire["arguments"] = [argument.to_wire() for argument in self.arguments]
        if self.icons:
            wire["icons"] = [icon.to_wire() for icon in self.icons]
        if self.meta:
            wire["_meta"] = self.meta
        return wire

    def argument(self, name: str) -> PromptArgument | None:
        return next((argument for argument in self.arguments if argument.name == name), None)


def check_prompt_arguments(prompt: Prompt, arguments: JSONValue) -> dict[str, str]:
    """The arguments of a `prompts/get`, checked: an object of strings, each declared, no required one missing."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidParamsError("prompts/get: params.arguments must be an object")
    declared = {argument.name for argument in prompt.arguments}
    unknown = sorted(set(arguments) - declared)
    if unknown:
        raise InvalidParamsError(f"Prompt {prompt.name!r} has no argument {', '.join(map(repr, unknown))}")
    for name, value in arguments.items():
        if not isinstance(value, str) or len(value) > MAX_PROMPT_ARGUMENT:
            raise InvalidParamsError(
                f"Prompt {prompt.name!r}: argument {name!r} must be a string of at most"
                f" {MAX_PROMPT_ARGUMENT} characters"
            )
    missing = [argument.name for argument in prompt.arguments if argument.required and argument.name not in arguments]
    if missing:
        raise InvalidParamsError(f"Prompt {prompt.name!r} needs the argument(s) {', '.join(map(repr, missing))}")
    return dict(arguments)


def messages_wire(value: JSONValue) -> JSONObject:
    """A renderer's answer as a `GetPromptResult` (without the `resultType` of its era)."""
    description = None
    if isinstance(value, PromptResult):
        description, value = value.description, value.messages
    if isinstance(value, str):
        value = [PromptMessage.text(value)]
    if not isinstance(value, list | tuple):
        raise TypeError(f"a prompt renderer returned {type(value).__name__}: expected str, messages or PromptResult")
    messages = [item.to_wire() if isinstance(item, PromptMessage) else item for item in value]
    result: JSONObject = {"messages": messages}
    if description:
        result["description"] = description
    return result
