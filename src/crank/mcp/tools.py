"""What a tool is: a definition (name, texts, schemas, hints) plus an async invoker.

Every source of tools (in-process methods, published gateway agents, a hand-written list)
builds `Tool` objects; the MCP layer neither knows nor cares what the invoker calls.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from crank.exceptions import ClientRequestError, ToolError
from crank.ids import new_request_id
from crank.mcp.formats import DEFAULT_FORMAT
from crank.mcp.input_required import CAPABILITY_OF_METHOD, InputRequired, NeedsInput
from crank.mcp.protocol import MODERN_PROTOCOL_VERSIONS
from crank.mcp.sessions import URL_ELICITATION
from crank.mcp.streams import Channel, RequestInfo, owner_of
from crank.types import JSONObject
from crank.wire.auth import Principal

__all__ = [
    "TOOL_NAME_PATTERN",
    "CallObserver",
    "CallContext",
    "Icon",
    "Invoker",
    "NotedResult",
    "Tool",
    "ToolAnnotations",
    "ToolResult",
    "new_request_id",
]

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
"""Tool names as the MCP specification recommends (tools.mdx §Tool Names, SEP-986)."""

EMPTY_INPUT_SCHEMA: JSONObject = {"type": "object", "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class ToolAnnotations:
    """MCP ToolAnnotations. `None` means "not specified" and is left out of the wire form."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None

    def to_wire(self) -> JSONObject | None:
        """The `annotations` object, or None when no field is set (the client then uses the spec defaults)."""
        pairs = (
            ("title", self.title),
            ("readOnlyHint", self.read_only_hint),
            ("destructiveHint", self.destructive_hint),
            ("idempotentHint", self.idempotent_hint),
            ("openWorldHint", self.open_world_hint),
        )
        wire = {key: value for key, value in pairs if value is not None}
        return wire or None


@dataclass(frozen=True, slots=True)
class Icon:
    """An icon for clients that show tools (`src` is an https or data: URI)."""

    src: str
    mime_type: str | None = None
    sizes: tuple[str, ...] = ()
    theme: Literal["light", "dark"] | None = None

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {"src": self.src}
        if self.mime_type is not None:
            wire["mimeType"] = self.mime_type
        if self.sizes:
            wire["sizes"] = list(self.sizes)
        if self.theme is not None:
            wire["theme"] = self.theme
        return wire


_TOKEN_TYPES = (str, int)


@dataclass(slots=True)
class CallContext:
    """What an invoker may know about the call it serves."""

    tool_name: str
    protocol_version: str
    headers: Mapping[str, str] = field(default_factory=dict)
    client_info: Any = None
    client_capabilities: Mapping[str, Any] | None = None
    """Declared in the request's `_meta` (2026-07-28); None when the era has no per-request capabilities."""
    input_responses: Mapping[str, Any] | None = None
    """The client's answers to an earlier `InputRequired`, keyed as the requests were."""
    request_state: Any = None
    """The state returned with that `InputRequired`, verified."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The endpoint's labels for logs (the gateway's workspace and agent)."""
    requested_format: str | None = None
    """The result format the request asked for (`X-Mcp-Format`, `?format=`), checked; None when it asked for
    none. A tool that runs another tool (discovery's `call_operation`) passes it on."""
    default_format: str = DEFAULT_FORMAT
    """The endpoint's `default_format`: what `result_format` falls back to."""
    caller: Principal | None = None
    """Who calls, as the endpoint's `authenticate` said (the gateway's API key scope); None without it."""
    channel: Channel | tuple[RequestInfo, JSONObject, bool] | None = None
    """The call's way to its client (`progress`, `log`, `elicit`, `sample`): given as what a `Channel` is made
    from (the request, its params, and whether the endpoint sends log messages), made on first use, so that a
    call that sends nothing pays nothing. None where nothing can reach the client (the plain pair)."""
    _request_id: str | None = None

    @property
    def request_id(self) -> str:
        """Generated on first use, so that successful calls on the hot path never pay for it."""
        if self._request_id is None:
            self._request_id = new_request_id()
        return self._request_id

    def result_format(self, tool_format: str | None) -> str:
        """The one rule for a result's format: the request's (header, then query parameter), then the tool's
        own, then the endpoint's default. A tool that runs another (discovery) asks it for that tool."""
        return self.requested_format or tool_format or self.default_format

    @property
    def modern(self) -> bool:
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def progress_token(self) -> str | int | None:
        """The request's `_meta.progressToken`: whether anyone listens to `progress` (read without making the
        channel, so a call that checks it and sends nothing pays almost nothing)."""
        channel = self.channel
        if type(channel) is tuple:  # the common case: nothing sent yet
            meta = channel[1].get("_meta")
            token = meta.get("progressToken") if type(meta) is dict else None
            return token if type(token) in _TOKEN_TYPES else None  # str or int, never a bool
        return channel.progress_token if channel is not None else None  # type: ignore[union-attr]

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress, when the request asked for it (`_meta.progressToken`); otherwise nothing is sent."""
        channel = self._open_channel()
        if channel is not None:
            await channel.progress(progress, total, message)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """Send the client a log message (`notifications/message`), when its level is at or above the one the
        client asked for (2025-11-25: the session's, `info` by default; 2026-07-28: the request's, none by
        default) and the endpoint sends log messages at all."""
        channel = self._open_channel()
        if channel is not None:
            await channel.log(level, data, logger)

    def can_ask(self, capability: str) -> bool:
        """Whether the client declared `capability` (`elicitation`, `sampling`, `roots`): 2026-07-28 in the
        request's `_meta`; 2025-11-25 at `initialize`, carried in its signed session id; and it can take
        questions here (not on the plain pair, nor in a batch)."""
        if self.modern:
            return isinstance(self.client_capabilities, Mapping) and capability in self.client_capabilities
        channel = self._open_channel()
        return channel is not None and channel.can_stream() and capability in (channel.session_capabilities() or ())

    def can_open_url(self) -> bool:
        """Whether the client declared URL-mode elicitation (`elicitation: {url: {}}`) and can be asked here: it
        can send its user to a page of this server (`elicit_url`)."""
        if self.modern:
            declared = self.client_capabilities.get("elicitation") if isinstance(self.client_capabilities,
                                                                                   Mapping) else None  # fmt: skip
            return isinstance(declared, Mapping) and isinstance(declared.get("url"), Mapping)
        return self.can_ask(URL_ELICITATION)

    async def elicit_url(
        self, message: str, url: str, elicitation_id: str, *, timeout: float | None = None
    ) -> JSONObject:
        """Ask the client to send its user to `url` (URL-mode elicitation); returns the client's `ElicitResult`
        (`action`: `accept` says the user agreed to open it, not that they finished). 2025-11-25: an
        `elicitation/create` request naming `elicitation_id` (a `notifications/elicitation/complete` may name it
        later: `notify`); 2026-07-28: an `input_required` round, as `elicit` (that era has no ids)."""
        params: JSONObject = {"mode": "url", "message": message, "url": url}
        if not self.modern:
            params["elicitationId"] = elicitation_id
        # Its own key: a URL asked only while something is missing (a connection) is not asked on the rounds after,
        # and must not shift the keys of the questions that follow it.
        return await self._ask("elicitation/create", params, timeout, key="crank-url")

    async def notify(self, method: str, params: JSONObject) -> None:
        """Send the client a notification on this call's stream (2025-11-25, when it streams); else nothing."""
        channel = self._open_channel()
        if channel is not None and not self.modern and channel.can_stream():
            await channel.notify(method, params)

    def answer_id(self) -> str | None:
        """2026-07-28: an id of the questions this call was answered (the same when the client sends the same
        answers again), for a tool that must act once per answer; None in the other era, where an answer is
        given once on the live stream."""
        state = self.request_state if isinstance(self.request_state, dict) else {}
        nonce = state.get("crank-nonce") if state.get("crank-owner") == owner_of(self.caller) else None
        return nonce if isinstance(nonce, str) else None

    async def elicit(self, message: str, schema: JSONObject, *, timeout: float | None = None) -> JSONObject:
        """Ask the user to fill in a form; returns the client's `ElicitResult` (`action`, and `content` on accept).

        2025-11-25: an `elicitation/create` request on the response stream, answered by the client's next POST.
        2026-07-28: the call ends with an `input_required` result; the client asks again with the answer, the
        invoker runs again from the start, and this time `elicit` returns it (so code before it must be safe to
        run twice: ask first, act after)."""
        params = {"mode": "form", "message": message, "requestedSchema": schema}
        return await self._ask("elicitation/create", params, timeout)

    async def sample(self, prompt: str, max_tokens: int = 1000, **options: Any) -> JSONObject:
        """Ask the client's model (`sampling/createMessage`) about `prompt`; returns its `CreateMessageResult`.
        Works as `elicit` does in each era."""
        message = {"role": "user", "content": {"type": "text", "text": prompt}}
        return await self._ask("sampling/createMessage", {"messages": [message], "maxTokens": max_tokens, **options})

    async def _ask(
        self, method: str, params: JSONObject, timeout: float | None = None, *, key: str | None = None
    ) -> JSONObject:
        if not self.modern:
            channel = self._open_channel()
            declared = channel.session_capabilities() if channel is not None else None
            if channel is None or (declared is not None and CAPABILITY_OF_METHOD[method] not in declared):
                raise ClientRequestError(f"This client cannot be sent {method}: it did not declare the capability.",
                                error_code="client_request_unavailable")  # fmt: skip
            return await channel.request(method, params, timeout)
        channel = self._open_channel()
        if key is None:
            key = f"crank-input-{channel.asked() if channel is not None else 0}"
        # Answers count only when they come with the signed state of the round that asked for them, issued to
        # this same caller: answers made up by a client, or another caller's state, are asked for again.
        state = self.request_state if isinstance(self.request_state, dict) else {}
        owner = owner_of(self.caller)
        own = state.get("crank-owner") == owner
        earlier: dict[str, Any] = state.get("crank-answers", {}) if own else {}
        asked: list[str] = state.get("crank-asked", []) if own else []  # signed by this server: its own shapes
        given = self.input_responses or {}
        answers = {**earlier, **{name: given[name] for name in asked if name in given}}
        answer = answers.get(key)
        if isinstance(answer, dict):
            return answer
        nonce = (state.get("crank-nonce") if own else None) or secrets.token_urlsafe(16)  # `answer_id`
        remembered = {"crank-answers": answers, "crank-asked": [key], "crank-nonce": nonce, "crank-owner": owner}
        raise NeedsInput(InputRequired({key: {"method": method, "params": params}}, remembered))

    def _open_channel(self) -> Channel | None:
        channel = self.channel
        if type(channel) is tuple:
            info, params, logging = channel
            channel = self.channel = Channel(info, params, modern=self.modern, logging=logging)
        return channel  # type: ignore[return-value]


class Invoker(Protocol):
    """Runs a tool. Returns a JSON-compatible value (formatted by the MCP layer), a `NotedResult` or a
    `ToolResult`.

    Raising `crank.exceptions.ToolError` gives the client a structured error; any other
    exception is logged with a request id and reported as `internal_error`.
    """

    async def __call__(self, arguments: dict[str, Any], context: CallContext) -> Any: ...


_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A result whose content blocks the tool chose itself (images, audio, resources, several blocks)."""

    content: Sequence[JSONObject]
    structured_content: Any = _UNSET
    is_error: bool = False

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {"content": list(self.content)}
        if self.structured_content is not _UNSET:
            wire["structuredContent"] = self.structured_content
        wire["isError"] = self.is_error
        return wire


@dataclass(frozen=True, slots=True)
class NotedResult:
    """A result value plus a sentence for the model (say, that a list was cut short): the value is shaped
    and formatted like any result, in the format the request chose, and the note follows it as a text
    block of its own."""

    value: Any
    note: str


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool definition plus the invoker that runs it.

    `wrap_result` says that `output_schema` is the `{"result": ...}` wrapper of seed 001, so
    successful results become `structuredContent: {"result": value}`. `format` is the tool's own
    result format (json, pretty_json, markdown, plain, toon); a request header or the endpoint
    default may choose another.
    """

    name: str
    invoker: Invoker
    title: str | None = None
    description: str | None = None
    input_schema: JSONObject = field(default_factory=lambda: dict(EMPTY_INPUT_SCHEMA))
    output_schema: JSONObject | None = None
    wrap_result: bool = False
    annotations: ToolAnnotations | None = None
    icons: tuple[Icon, ...] = ()
    format: str | None = None
    meta: JSONObject | None = None
    listed: bool = True
    """False: callable but left out of `tools/list` (a tool this caller may not use, refused when called)."""
    required_client_capabilities: JSONObject | None = None
    """Client capabilities the tool needs (for example `{"sampling": {}}`); a 2026-07-28 call from a
    client that did not declare them is refused with -32021 before the invoker runs."""
    required_scopes: frozenset[str] = frozenset()
    """OAuth scopes a scope-limited principal needs to see and call the tool (`crank.wire.auth.Principal`):
    without them it is left out of `tools/list`, and its call is 403 `insufficient_scope` naming them."""
    plain_fields: JSONObject | None = None
    """Fields that only the plain `GET <base>/tools` listing shows for this tool, after its description
    (seed 002's `roles`, which the rpc source sets); never part of MCP `tools/list`."""
    authorize: Callable[[Mapping[str, Any], Any], None] | None = None
    """A check of a call's arguments against its caller, made before anything runs (besides `required_scopes`):
    raises `AuthChallengeError` to refuse (discovery's `call_operation` checks the operation it names). A batch's
    items are all checked before any of them runs (`crank.mcp.calls.authorize_request`)."""
    validate_arguments: bool = True
    """False: the invoker is the one judge of the arguments, so the catalog does not check them against
    `input_schema` first (an rpc method: its pydantic conversion is the rule, on /rpc and over MCP alike).
    The invoker refuses arguments by raising `crank.exceptions.ArgumentsRejectedError`, which is answered
    exactly like the catalog's own refusal."""


class CallObserver(Protocol):
    """Told about every finished call: metrics and logs with the endpoint's labels (see `crank.telemetry`), and the
    gateway's audit trail (`crank.sources.audit_trail`).

    `error` is the structured error the client got, or None on success; `request_id` is set for failures
    (the same id the client sees), and None for successes, which do not pay for generating one. `caller` and
    `arguments` are who called and with what (an observer that keeps them keeps a digest, never the arguments).
    """

    def __call__(
        self,
        tool: str,
        error: ToolError | None,
        seconds: float,
        request_id: str | None,
        caller: Principal | None,
        arguments: Mapping[str, Any],
        /,
    ) -> None: ...
