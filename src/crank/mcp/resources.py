"""What a resource is: a document a client reads by URI (`resources/read`), fixed or from a URI template.

A `Resource` has one URI; a `ResourceTemplate` has an RFC 6570 template of simple `{name}` expressions (level 1),
each standing for one path segment. Both read through an async reader that returns text, bytes, a
`ResourceContents` or a list of them; the MCP layer neither knows nor cares what the reader does. Or a tool of
the catalog answers the read (`tool=`): the URI's variables are its arguments, the call runs as a `tools/call`
would (scopes, validation, the invoker, the output check), and its JSON text is the contents.

A template's variables are hostile input: a value is one segment of unreserved and percent-encoded
characters, and once decoded it may not hold a slash, a backslash, a NUL or be `.` or `..`. A URI that does not
match is "not found", never a read of something else.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from crank.exceptions import ConfigurationError
from crank.mcp.completions import Completer
from crank.mcp.tools import Icon
from crank.types import JSONObject

__all__ = [
    "MAX_URI_LENGTH",
    "Resource",
    "ResourceContents",
    "ResourceReader",
    "ResourceTemplate",
    "TemplateReader",
    "contents_wire",
    "match_variables",
    "typed_variables",
    "variable_kinds",
]

MAX_URI_LENGTH = 2048
"""The longest URI `resources/read` accepts: a longer one is refused before any template is tried."""
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")
_SEGMENT_CLASS = r"A-Za-z0-9\-._~!$&'()*+,;=:@%"
"""What a variable's value may hold, raw: unreserved and sub-delims characters, `:`, `@` and percent-escapes."""
_SEGMENT_CHARS = frozenset("-._~!$&'()*+,;=:@%") | frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)
_FORBIDDEN = re.compile(r"[/\\\x00]")
"""What a decoded value may not hold: a slash, a backslash or NUL."""
_NUMERIC = frozenset({"integer", "number"})
_INTEGER = re.compile(r"-?[0-9]{1,18}")
_NUMBER = re.compile(r"-?[0-9]{1,18}(\.[0-9]{1,18})?([eE][-+]?[0-9]{1,2})?")


@dataclass(frozen=True, slots=True)
class ResourceContents:
    """One item of a `resources/read` answer: text, or bytes (sent base64 as `blob`)."""

    uri: str
    text: str | None = None
    blob: bytes | None = None
    mime_type: str | None = None

    def to_wire(self) -> JSONObject:
        wire: JSONObject = {"uri": self.uri}
        if self.mime_type is not None:
            wire["mimeType"] = self.mime_type
        if self.blob is not None:
            wire["blob"] = base64.b64encode(self.blob).decode("ascii")
        else:
            wire["text"] = self.text or ""
        return wire


ResourceReader = Callable[[Any], Awaitable[Any]]
"""`async (context) -> str | bytes | ResourceContents | list[ResourceContents]` for a fixed resource."""
TemplateReader = Callable[[str, Mapping[str, str], Any], Awaitable[Any]]
"""`async (uri, variables, context) -> ...` for a template: the URI read and its decoded variables."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A document with one URI."""

    uri: str
    name: str
    reader: ResourceReader | None = None
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    icons: tuple[Icon, ...] = ()
    meta: JSONObject | None = None
    tool: str | None = None
    """The catalog's tool that answers a read (instead of `reader`)."""

    def listing(self, title: str | None, description: str | None) -> JSONObject:
        """The `resources/list` entry, with the texts of the request's language."""
        wire: JSONObject = {"uri": self.uri, "name": self.name}
        _describe(wire, title or self.title, description or self.description, self.mime_type, self.icons, self.meta)
        if self.size is not None:
            wire["size"] = self.size
        return wire


@dataclass(frozen=True, slots=True)
class ResourceTemplate:
    """A family of documents: `uri_template` like `docs://pages/{slug}`; `completions` name the values a client
    may be offered for each variable (`completion/complete` with `ref/resource`)."""

    uri_template: str
    name: str
    reader: TemplateReader | None = None
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    completions: Mapping[str, Completer] = field(default_factory=dict)
    icons: tuple[Icon, ...] = ()
    meta: JSONObject | None = None
    tool: str | None = None
    """The catalog's tool that answers a read (instead of `reader`), with the URI's variables as its arguments."""

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(_VARIABLE.findall(self.uri_template))

    def listing(self, title: str | None, description: str | None) -> JSONObject:
        wire: JSONObject = {"uriTemplate": self.uri_template, "name": self.name}
        _describe(wire, title or self.title, description or self.description, self.mime_type, self.icons, self.meta)
        return wire

    def compile(self) -> re.Pattern[str]:
        """The pattern a URI of this template matches; raises `ConfigurationError` for a template that is not a
        URI with simple `{name}` variables, or whose variables are not one each."""
        names = self.variables
        if not names:
            raise ConfigurationError(f"resource template {self.name!r}: {self.uri_template!r} has no {{variable}}")
        if len(set(names)) != len(names):
            raise ConfigurationError(f"resource template {self.name!r}: a variable appears twice")
        rest = _VARIABLE.sub("", self.uri_template)
        if "{" in rest or "}" in rest or ":" not in rest:
            raise ConfigurationError(
                f"resource template {self.name!r}: {self.uri_template!r} must be a URI with simple {{name}} variables"
            )
        pieces = _VARIABLE.split(self.uri_template)  # literal, name, literal, name, ... literal
        parts = []
        for index, piece in enumerate(pieces):
            if index % 2 == 0:
                parts.append(re.escape(piece))
                continue
            follower = pieces[index + 1]
            if index + 2 < len(pieces) and not follower:
                raise ConfigurationError(f"resource template {self.name!r}: two variables need a literal between them")
            # A value never holds the character that ends it: each variable matches in one pass, never by trying
            # every split of a long run (`{a}.{b}.{c}` against a URI of dots would backtrack exponentially).
            excluded = re.escape(follower[0]) if follower and follower[0] in _SEGMENT_CHARS else ""
            parts.append(
                f"((?:(?!{excluded})[{_SEGMENT_CLASS}]){{1,512}})" if excluded else f"([{_SEGMENT_CLASS}]{{1,512}})"
            )
        pattern = "".join(parts)
        unknown = set(self.completions) - set(names)
        if unknown:
            raise ConfigurationError(f"resource template {self.name!r}: completions for unknown {sorted(unknown)}")
        return re.compile(pattern)


def match_variables(pattern: re.Pattern[str], names: Sequence[str], uri: str) -> dict[str, str] | None:
    """The decoded variables of `uri` under a compiled template, or None when it does not match or a value,
    once decoded, would step out of its segment (a slash, a backslash, NUL, `.` or `..`)."""
    found = pattern.fullmatch(uri)
    if found is None:
        return None
    values: dict[str, str] = {}
    for name, raw in zip(names, found.groups(), strict=True):
        try:
            value = unquote(raw, errors="strict") if "%" in raw else raw
        except UnicodeDecodeError:
            return None
        if value in (".", "..") or _FORBIDDEN.search(value):
            return None
        values[name] = value
    return values


def variable_kinds(variables: Sequence[str], schema: JSONObject | None) -> dict[str, frozenset[str]]:
    """The JSON types the tool's input schema gives each variable that is not a plain string (computed once per
    catalog, for `typed_variables`)."""
    properties = (schema or {}).get("properties")
    properties = properties if isinstance(properties, dict) else {}
    kinds: dict[str, frozenset[str]] = {}
    for name in variables:
        declared = properties.get(name)
        found = declared.get("type") if isinstance(declared, dict) else None
        named = frozenset(found) if isinstance(found, list) else frozenset({found}) if isinstance(found, str) else None
        if named and "string" not in named and named & {"integer", "number", "boolean"}:
            kinds[name] = named
    return kinds


def typed_variables(variables: Mapping[str, str], kinds: Mapping[str, frozenset[str]]) -> dict[str, Any]:
    """A template's variables as a tool's arguments: a value its input schema types as an integer, a number or a
    boolean (`variable_kinds`) is converted when it reads as one; anything else stays a string, for the tool's
    validation to judge."""
    typed: dict[str, Any] = dict(variables)
    for name, named in kinds.items():
        value = typed.get(name)
        if value is None:
            continue
        if named & _NUMERIC and (value.isdigit() and value.isascii() and len(value) < 19 or _INTEGER.fullmatch(value)):
            typed[name] = int(value)
        elif "number" in named and _NUMBER.fullmatch(value):
            typed[name] = float(value)
        elif "boolean" in named and value in ("true", "false"):
            typed[name] = value == "true"
    return typed


def contents_wire(uri: str, value: Any, mime_type: str | None) -> list[JSONObject]:
    """A reader's answer as `contents`: text and bytes get the resource's URI and MIME type."""
    if isinstance(value, ResourceContents):
        return [value.to_wire()]
    if isinstance(value, str):
        return [ResourceContents(uri, text=value, mime_type=mime_type).to_wire()]
    if isinstance(value, bytes | bytearray):
        return [ResourceContents(uri, blob=bytes(value), mime_type=mime_type).to_wire()]
    if isinstance(value, list):
        wire = []
        for item in value:
            if not isinstance(item, ResourceContents):
                break
            wire.append(item.to_wire())
        else:
            return wire
    raise TypeError(f"a resource reader returned {type(value).__name__}: expected str, bytes or ResourceContents")


def _describe(
    wire: JSONObject,
    title: str | None,
    description: str | None,
    mime_type: str | None,
    icons: tuple[Icon, ...],
    meta: JSONObject | None,
) -> None:
    if title:
        wire["title"] = title
    if description:
        wire["description"] = description
    if mime_type:
        wire["mimeType"] = mime_type
    if icons:
        wire["icons"] = [icon.to_wire() for icon in icons]
    if meta:
        wire["_meta"] = meta
