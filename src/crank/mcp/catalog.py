"""A catalog: what one endpoint offers at one version (its surface), with everything a request needs precomputed.

The tools, resources, resource templates and prompts of an endpoint, in one typed container whatever source
filled it. Built once per catalog version: names are checked, argument validators and URI templates compiled,
and the serialized list pages made for every language. A request then only looks things up. `features` says
which parts of MCP it offers; the server derives its capabilities from them (`crank.mcp.server`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from crank import _json
from crank.exceptions import ConfigurationError, InvalidCursorError, UnknownFormatError
from crank.mcp.formats import check_format
from crank.mcp.headers import HeaderParam, find_header_params
from crank.mcp.prompts import Prompt
from crank.mcp.resources import MAX_URI_LENGTH, Resource, ResourceTemplate, match_variables, variable_kinds
from crank.mcp.tools import TOOL_NAME_PATTERN, CallObserver, Tool
from crank.mcp.translations import Translations
from crank.mcp.validation import ArgumentValidator, OutputValidator
from crank.types import JSONObject
from crank.wire.auth import Principal

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "Catalog",
    "CatalogEntry",
    "ListKind",
    "TemplateEntry",
    "estimate_tokens",
    "identity_of",
]

DEFAULT_PAGE_SIZE = 100
_MAX_VIEWS = 64  # scope views kept per catalog
_CURSOR_PREFIX = "crank-page:"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    tool: Tool
    validator: ArgumentValidator | None
    """None when the tool's invoker validates its own arguments (`Tool.validate_arguments`)."""
    header_params: tuple[HeaderParam, ...]
    output_validator: OutputValidator | None = None
    """Compiled from the tool's outputSchema (None when it has none): every answer is checked with it."""


@dataclass(frozen=True, slots=True)
class TemplateEntry:
    template: ResourceTemplate
    pattern: re.Pattern[str]
    variables: tuple[str, ...]
    kinds: dict[str, frozenset[str]]
    """A tool-backed template's variables that its tool types other than as strings (`typed_variables`)."""


ListKind = Literal["resources", "resourceTemplates", "prompts"]
"""The lists beside `tools`, named by the key of their answer."""


def estimate_tokens(entries: list[JSONObject]) -> int:
    """Compact JSON of the `tools/list` entries, UTF-8 bytes divided by three, rounded up."""
    return math.ceil(len(_json.dumps(entries)) / 3)


class Catalog:
    """The immutable, precomputed set of tools served by an endpoint at one version."""

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        version: str = "1",
        translations: Translations | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        labels: Mapping[str, str] | None = None,
        observer: CallObserver | None = None,
        resources: Iterable[Resource] = (),
        resource_templates: Iterable[ResourceTemplate] = (),
        prompts: Iterable[Prompt] = (),
        logging: bool = False,
        asks: bool = False,
        reads: Catalog | None = None,
        anonymous_scopes: frozenset[str] = frozenset(),
    ) -> None:
        """`anonymous_scopes`: what a caller without credentials (lazy sign-in) is listed as if it held: the
        scopes every caller the endpoint admits holds (an agent's own), so that it sees what signing in with the
        least opens, never a tool or template that needs a scope of its own."""
        if page_size < 1:
            raise ConfigurationError(f"page_size must be at least 1, got {page_size}")
        self.version = version
        self.labels = dict(labels or {})
        """Put on every call's context, for logs (the gateway's workspace and agent)."""
        self.observer = observer
        """Told about every finished call (metrics, logs)."""
        self.translations = translations or Translations()
        self.default_language = self.translations.default_language
        self.languages = self.translations.languages
        tools = list(tools)
        self._entries = _build_entries(tools)
        self._reads = reads._entries if reads is not None else self._entries
        """The entries of the tools that answer tool-backed reads: this catalog's, or (discovery) the one behind it."""
        surface = _Surface.build(resources, resource_templates, prompts, self._reads)
        self._surface = surface
        self._settings = (tools, version, translations, page_size, labels, observer, surface, logging, asks, reads)
        self.features = surface.features(logging) | ({"asks"} if asks else set())
        """The parts of MCP this catalog offers: `tools` always, `resources`, `prompts`, `completions` and
        `logging` when it has something for them. The server's capabilities come from these. `asks`: a tool may
        ask the user (a confirmation), so 2025-11-25 clients get a session id that carries their capabilities."""
        self._scopes = frozenset(scope for tool in tools for scope in tool.required_scopes)
        """Every scope some tool requires: what a principal's granted scopes are cut to, to key its view."""
        self.scoped = bool(self._scopes)
        """Whether some tool requires a scope: only then may a caller's listing differ (`listed_for`)."""
        self._views: dict[frozenset[str], Catalog] = {}
        self._anonymous_scopes = anonymous_scopes
        listed = [entry.tool for entry in self._entries.values() if entry.tool.listed]
        wire = {language: [self._wire_entry(tool, language) for tool in listed] for language in self.languages}
        self._listing = {
            language: _json.dumps({"tools": [_plain_entry(item, tool.plain_fields)
                                             for item, tool in zip(entries, listed, strict=True)]})
            for language, entries in wire.items()
        }  # fmt: skip
        self._pages, self._next_cursors = _paged(wire, version, page_size)
        self._page_count = len(self._next_cursors)
        self._lists = {kind: _paged(entries, version, page_size) for kind, entries in self._surface_entries().items()}
        self.token_estimate = estimate_tokens(self.tool_entries(self.default_language))
        self.identity: Hashable = identity_of(self.labels) if self.labels else object()
        """What stays the same across the catalog's versions (its labels: the gateway's workspace and agent): the
        key of its clients' list-change listeners (`crank.mcp.changes`). A catalog without labels is its own
        identity: unlabeled catalogs never hear of each other's changes (label catalogs that replace each other)."""
        self._offers: dict[str, int] | None = None
        self.derived: dict[Hashable, bytes] = {}
        """Bytes an endpoint derives from this catalog (a whole `tools/list` answer but its id, say), kept as
        long as the catalog: a new version starts empty. Keys must come from a bounded set."""

    def __len__(self) -> int:
        return len(self._entries)

    def listed_for(self, caller: Principal | None) -> Catalog:
        """The catalog as `caller` sees it: for a scope-limited `Principal`, the tools whose `required_scopes` it
        lacks left out of `tools/list` (still known, so that their call is answered 403, not "unknown tool"). An
        anonymous caller (before sign-in) is listed what `anonymous_scopes` open. Itself for anyone else (an API
        key, no authentication) or when no tool requires a scope; built once per distinct set of scopes."""
        if not self._scopes or not isinstance(caller, Principal):
            return self
        granted = self._anonymous_scopes if caller.anonymous else caller.scopes
        if granted is None:
            return self
        key = granted & self._scopes
        if key == self._scopes:
            return self
        view = self._views.get(key)
        if view is None:
            tools, version, translations, page_size, labels, observer, surface, logging, asks, reads = self._settings
            cut = [tool if tool.required_scopes <= key else replace(tool, listed=False) for tool in tools]
            # A resource its caller's tool cannot answer is not listed either (nor read: the call is refused).
            hidden = {tool.name for tool in tools if not tool.required_scopes <= key}
            resources = [item for item in surface.resources.values() if item.tool not in hidden]
            templates = [item for item in surface.templates_given if item.tool not in hidden]
            if len(self._views) >= _MAX_VIEWS:  # bounded: the key is a subset of a few known scopes
                self._views.clear()
            view = self._views[key] = Catalog(
                cut, version=version, translations=translations, page_size=page_size, labels=labels,
                observer=observer, resources=resources, resource_templates=templates,
                prompts=surface.prompts.values(), logging=logging, asks=asks, reads=reads,
            )  # fmt: skip
        return view

    def get(self, name: str) -> CatalogEntry | None:
        return self._entries.get(name)

    def tool_entries(self, language: str) -> list[JSONObject]:
        """The `tools/list` entries in one language (decoded; for tests, tools and the budget)."""
        return [entry for page in self._pages[language] for entry in _json.loads(page)]

    def listing(self, language: str) -> bytes:
        """`{"tools": [...]}` with every tool, for the plain HTTP pair: each tool's `plain_fields` included."""
        return self._listing[language]

    def page(self, language: str, cursor: str | None) -> tuple[bytes, str | None]:
        """The serialized `tools` array of one page and the cursor of the next page, if any."""
        return self.page_at(language, self.page_index(cursor))

    def page_index(self, cursor: str | None) -> int:
        """The page a cursor points to (0 for none); raises `InvalidCursorError` for one not issued here.

        A cursor names the catalog version that issued it: one issued before a publish (or by a replica that
        serves another version) is refused rather than answered with a page of another version, which the
        client would append to its pages of the old one (a listing of tools that never existed together)."""
        return 0 if cursor is None else _decode_cursor(cursor, self.version, self._page_count)

    def page_at(self, language: str, index: int) -> tuple[bytes, str | None]:
        return self._pages[language][index], self._next_cursors[index]

    # -- resources, resource templates, prompts -----------------------------------------------------

    def list_page(self, kind: ListKind, language: str, cursor: str | None) -> tuple[bytes, str | None]:
        """The serialized array of one page of a list beside `tools`, and the next page's cursor; raises
        `InvalidCursorError` for a cursor not issued for this version."""
        pages, cursors = self._lists[kind]
        index = 0 if cursor is None else _decode_cursor(cursor, self.version, len(cursors))
        return pages[language][index], cursors[index]

    def offers(self) -> dict[str, int]:
        """A fingerprint of each list a client sees (tools, resources, prompts), in every language: two versions
        whose fingerprints differ for a kind changed that list. Made on first use and kept: every listening
        stream asks for it at each change."""
        if self._offers is None:
            lists = {kind: pages for kind, (pages, _) in self._lists.items()}
            tools = {language: [listing] for language, listing in self._listing.items()}
            self._offers = {
                "tools": _fingerprint(tools),
                "resources": _fingerprint(lists["resources"], lists["resourceTemplates"]),
                "prompts": _fingerprint(lists["prompts"]),
            }
        return self._offers

    def resource(self, uri: str) -> Resource | None:
        return self._surface.resources.get(uri)

    def match_template(self, uri: str) -> tuple[ResourceTemplate, dict[str, str]] | None:
        """The first template `uri` matches, and its decoded variables; None for none (or a URI too long)."""
        found = self.match(uri)
        return (found[0].template, found[1]) if found is not None else None

    def match(self, uri: str) -> tuple[TemplateEntry, dict[str, str]] | None:
        """`match_template`, with the template's compiled entry (what the server reads a resource through)."""
        if len(uri) > MAX_URI_LENGTH:
            return None
        for entry in self._surface.templates:
            variables = match_variables(entry.pattern, entry.variables, uri)
            if variables is not None:
                return entry, variables
        return None

    def reading_entry(self, name: str) -> CatalogEntry | None:
        """The entry of the tool that answers a tool-backed resource (`Resource.tool`, `ResourceTemplate.tool`)."""
        return self._reads.get(name)

    def reader_of(self, uri: str) -> CatalogEntry | None:
        """The entry of the tool that answers a read of `uri` (a fixed resource's or the first matching template's
        `tool`); None when nothing, or a reader of its own, answers it."""
        resource = self.resource(uri)
        if resource is not None:
            own_reader, tool = resource.reader is not None, resource.tool
        else:
            matched = self.match(uri)
            if matched is None:
                return None
            own_reader, tool = matched[0].template.reader is not None, matched[0].template.tool
        return self.reading_entry(tool) if not own_reader and tool is not None else None

    def template(self, uri_template: str) -> ResourceTemplate | None:
        entry = self._surface.templates_by_uri.get(uri_template)
        return entry.template if entry is not None else None

    def prompt(self, name: str) -> Prompt | None:
        return self._surface.prompts.get(name)

    def _surface_entries(self) -> dict[ListKind, dict[str, list[JSONObject]]]:
        """Every language's entries of the three lists, with titles and descriptions along the translation
        chain (a resource's and a template's texts are keyed by their `name`, as a tool's)."""
        texts, surface = self.translations, self._surface
        lists: dict[ListKind, dict[str, list[JSONObject]]] = {"resources": {}, "resourceTemplates": {}, "prompts": {}}
        for language in self.languages:

            def say(name: str, language: str = language) -> tuple[str | None, str | None]:
                return texts.text(name, "title", language), texts.text(name, "description", language)

            lists["resources"][language] = [item.listing(*say(item.name)) for item in surface.resources.values()]
            lists["resourceTemplates"][language] = [entry.template.listing(*say(entry.template.name))
                                                    for entry in surface.templates]  # fmt: skip
            lists["prompts"][language] = [item.listing(*say(item.name)) for item in surface.prompts.values()]
        return lists

    def tool_entry(self, name: str, language: str) -> JSONObject | None:
        """One tool's `tools/list` entry in `language`, made when asked (an unlisted one's too: discovery's
        operations); None for a name the catalog does not have."""
        entry = self._entries.get(name)
        return self._wire_entry(entry.tool, language) if entry is not None else None

    def _wire_entry(self, tool: Tool, language: str) -> JSONObject:
        """The one rule for a tool's listing entry: its texts along the translation chain, schemas, hints."""
        texts = self.translations
        title = texts.text(tool.name, "title", language) or tool.title or tool.name
        description = texts.text(tool.name, "description", language) or tool.description
        wire: JSONObject = {"name": tool.name, "title": title}
        if description:
            wire["description"] = description
        wire["inputSchema"] = tool.input_schema
        if tool.output_schema is not None:
            wire["outputSchema"] = tool.output_schema
        annotations = tool.annotations.to_wire() if tool.annotations else None
        if annotations is not None:
            wire["annotations"] = annotations
        if tool.icons:
            wire["icons"] = [icon.to_wire() for icon in tool.icons]
        if tool.meta:
            wire["_meta"] = tool.meta
        return wire


@dataclass(frozen=True, slots=True)
class _Surface:
    """A catalog's resources, templates and prompts, checked and indexed."""

    resources: dict[str, Resource]
    templates: tuple[TemplateEntry, ...]
    templates_by_uri: dict[str, TemplateEntry]
    prompts: dict[str, Prompt]

    @property
    def templates_given(self) -> list[ResourceTemplate]:
        return [entry.template for entry in self.templates]

    @classmethod
    def build(
        cls,
        resources: Iterable[Resource],
        templates: Iterable[ResourceTemplate],
        prompts: Iterable[Prompt],
        tools: Mapping[str, CatalogEntry],
    ) -> _Surface:
        by_uri: dict[str, Resource] = {}
        for resource in resources:
            if not resource.uri or ":" not in resource.uri or len(resource.uri) > MAX_URI_LENGTH:
                raise ConfigurationError(f"resource {resource.name!r}: {resource.uri!r} is not a URI")
            if resource.uri in by_uri:
                raise ConfigurationError(f"resource {resource.uri!r} is offered twice")
            _check_answer(f"resource {resource.uri!r}", resource.reader, resource.tool, tools)
            by_uri[resource.uri] = resource
        compiled: dict[str, TemplateEntry] = {}
        for template in templates:
            if template.uri_template in compiled:
                raise ConfigurationError(f"resource template {template.uri_template!r} is offered twice")
            entry = _check_answer(f"resource template {template.uri_template!r}", template.reader, template.tool, tools)
            variables = template.variables
            kinds = variable_kinds(variables, entry.tool.input_schema) if entry is not None else {}
            compiled[template.uri_template] = TemplateEntry(template, template.compile(), variables, kinds)
        by_name: dict[str, Prompt] = {}
        for prompt in prompts:
            if not TOOL_NAME_PATTERN.match(prompt.name):
                raise ConfigurationError(f"prompt {prompt.name!r}: name must be 1 to 128 of A-Z, a-z, 0-9, _ - .")
            if prompt.name in by_name:
                raise ConfigurationError(f"prompt {prompt.name!r}: name is used by more than one prompt")
            names = [argument.name for argument in prompt.arguments]
            if len(set(names)) != len(names):
                raise ConfigurationError(f"prompt {prompt.name!r}: an argument is declared twice")
            by_name[prompt.name] = prompt
        return cls(by_uri, tuple(compiled.values()), compiled, by_name)

    def features(self, logging: bool) -> frozenset[str]:
        found = {"tools"}
        if self.resources or self.templates:
            found.add("resources")
        if self.prompts:
            found.add("prompts")
        # A client may ask to complete any template variable or prompt argument (one without values gets none).
        if self.templates or any(prompt.arguments for prompt in self.prompts.values()):
            found.add("completions")
        if logging:
            found.add("logging")
        return frozenset(found)


def _check_answer(what: str, reader: Any, tool: str | None, tools: Mapping[str, CatalogEntry]) -> CatalogEntry | None:
    """A resource is answered by a reader or by one of the catalog's tools, never both; the tool's entry."""
    if (reader is None) == (tool is None):
        raise ConfigurationError(f"{what}: give a reader or a tool, not both or neither")
    if tool is None:
        return None
    entry = tools.get(tool)
    if entry is None:
        raise ConfigurationError(f"{what}: no tool {tool!r} answers it")
    return entry


def _fingerprint(*lists: dict[str, list[bytes]]) -> int:
    """The same on every replica and after a restart (unlike `hash`, salted per process): resuming clients send
    it back to whichever replica answers them."""
    digest = hashlib.blake2b(digest_size=8)
    for pages in lists:
        for language, found in sorted(pages.items()):
            digest.update(language.encode())
            for page in found:
                digest.update(len(page).to_bytes(8, "big"))
                digest.update(page)
    return int.from_bytes(digest.digest(), "big")


def _paged(
    entries: dict[str, list[JSONObject]], version: str, page_size: int
) -> tuple[dict[str, list[bytes]], list[str | None]]:
    """Pages of serialized entries per language, and each page's next cursor (None after the last)."""
    pages = {
        language: [_json.dumps(wire[start : start + page_size]) for start in range(0, max(len(wire), 1), page_size)]
        for language, wire in entries.items()
    }
    count = len(next(iter(pages.values())))
    return pages, [_encode_cursor(version, index) for index in range(1, count)] + [None]


_WIRE_KEYS = frozenset({"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta"})
_HEAD_KEYS = ("name", "title", "description")


def _plain_entry(wire: JSONObject, fields: JSONObject | None) -> JSONObject:
    """A `tools/list` entry with the tool's plain-only fields after its texts (seed 002's order)."""
    if not fields:
        return wire
    head = {key: wire[key] for key in _HEAD_KEYS if key in wire}
    return {**head, **fields, **{key: value for key, value in wire.items() if key not in head}}


def _build_entries(tools: Iterable[Tool]) -> dict[str, CatalogEntry]:
    entries: dict[str, CatalogEntry] = {}
    for tool in tools:
        if not isinstance(tool.name, str) or not TOOL_NAME_PATTERN.match(tool.name):
            raise ConfigurationError(
                f"tool {tool.name!r}: name must be 1 to 128 characters of A-Z, a-z, 0-9, '_', '-' or '.'"
            )
        if tool.name in entries:
            raise ConfigurationError(f"tool {tool.name!r}: name is used by more than one tool")
        if tool.format is not None:
            try:
                check_format(tool.format, f"tool {tool.name!r}")
            except UnknownFormatError as exc:
                raise ConfigurationError(str(exc)) from None
        if tool.output_schema is not None and not isinstance(tool.output_schema, dict):
            raise ConfigurationError(f"tool {tool.name!r}: outputSchema must be a JSON object")
        if tool.plain_fields is not None and (clash := sorted(_WIRE_KEYS & set(tool.plain_fields))):
            raise ConfigurationError(f"tool {tool.name!r}: plain_fields cannot replace {', '.join(clash)}")
        validator = ArgumentValidator(tool.input_schema, tool_name=tool.name)  # also checks the schema itself
        headers = find_header_params(tool.input_schema, tool_name=tool.name)
        output = OutputValidator(tool.output_schema, tool_name=tool.name) if tool.output_schema is not None else None
        entries[tool.name] = CatalogEntry(tool, validator if tool.validate_arguments else None, headers, output)
    return entries


def _encode_cursor(version: str, index: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{version}:{index}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, version: str, page_count: int) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidCursorError(f"invalid cursor {cursor!r}") from None
    prefix, _, rest = raw.partition(_CURSOR_PREFIX)
    issued, separator, number = rest.rpartition(":")
    if prefix or not separator or not (number.isascii() and number.isdigit()) or not 0 < int(number) < page_count:
        raise InvalidCursorError(f"invalid cursor {cursor!r}")
    if issued != version:
        raise InvalidCursorError(
            f"cursor {cursor!r} belongs to version {issued!r} of this tool list, which is now at version {version!r}:"
            " list the tools again from the first page"
        )
    return int(number)


def identity_of(labels: Mapping[str, str]) -> Hashable:
    """The identity of every catalog with these labels (`Catalog.identity`), for who must name one it does not
    hold (a replica telling the listeners of an agent it has not built that its lists changed)."""
    return tuple(sorted(labels.items()))
