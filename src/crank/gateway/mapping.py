"""Input and output mappings, compiled once per published version.

Input rules (a list, applied in order), each with a destination `to`:

    {"from": "user_id", "to": "path.id"}          an argument
    {"value": "2", "to": "header.X-Api-Version"}  a constant
    {"template": "{first} {last}", "to": "body.full_name"}   a template over the arguments
    {"from": "payload", "to": "body"}             the whole JSON body

Destinations: `path.<name>`, `query.<name>`, `header.<name>`, `body` and `body.<field>`. Arguments no
rule mentions go where the HTTP method suggests: to the query for GET, HEAD and DELETE, to the JSON
body otherwise; an argument named like a `{placeholder}` of the URL goes to the path.

Output (an object): `select`, a JMESPath expression; `rename`, old key -> new key on the selected
object or on each selected item; `max_items`, the longest list kept (the tool says how many it left
out). JMESPath expressions are compiled once. The rules arrive typed (`crank.registry.runtime`:
`InputRule`, `OutputSpec`); what is checked here is what the types cannot say: destinations, header
names, templates and JMESPath.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jmespath
import jmespath.exceptions
import jmespath.parser

from crank import _json
from crank.exceptions import ConfigurationError, MappingError
from crank.registry.runtime import ArgumentRule, ConstantRule, InputRule, OutputSpec
from crank.wire.http import is_token

__all__ = ["InputMapping", "OutputMapping", "RequestParts"]

_PLACEHOLDER = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)}")
_QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})


@dataclass
class RequestParts:
    path: dict[str, Any] = field(default_factory=dict)
    query: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass(frozen=True)
class _Rule:
    kind: str  # "from" | "value" | "template"
    source: Any
    place: str  # path | query | header | body
    name: str | None  # None: the whole body


class InputMapping:
    def __init__(self, rules: list[_Rule], http_method: str, url: str, unplaced: frozenset[str] = frozenset()) -> None:
        self._rules = rules
        self._default_place = "query" if http_method in _QUERY_METHODS else "body"
        self._placeholder_order = tuple(dict.fromkeys(_PLACEHOLDER.findall(url)))
        self._placeholders = set(self._placeholder_order)
        self._mapped = {rule.source for rule in rules if rule.kind == "from"}
        self._unplaced = unplaced - self._mapped

    @classmethod
    def compile(
        cls,
        rules: Sequence[InputRule],
        http_method: str,
        url: str,
        *,
        where: str,
        unplaced: frozenset[str] = frozenset(),
    ) -> InputMapping:
        """`unplaced`: arguments that go upstream only where a rule puts them (an idempotency key, say,
        which travels in its own header), not to the default place."""
        compiled = [_compile_rule(rule, f"{where}: input_mapping[{index}]") for index, rule in enumerate(rules)]
        return cls(compiled, http_method.upper(), url, unplaced)

    def path_arguments(self, declared: Iterable[str]) -> list[str]:
        """The arguments that fill the URL's placeholders, in the URL's order: a rule's `from` for `path.<name>`,
        else a `declared` argument named like the placeholder."""
        by_rule = {rule.name: rule.source for rule in self._rules if rule.kind == "from" and rule.place == "path"}
        known = set(declared) - self._mapped - self._unplaced
        found = []
        for placeholder in self._placeholder_order:
            if placeholder in by_rule:
                found.append(by_rule[placeholder])
            elif placeholder in known:
                found.append(placeholder)
        return found

    def apply(self, arguments: dict[str, Any]) -> RequestParts:
        parts = RequestParts()
        for rule in self._rules:
            if rule.kind == "from":
                if rule.source not in arguments:
                    continue
                value = arguments[rule.source]
            elif rule.kind == "value":
                value = rule.source
            else:
                value = _render(rule.source, arguments)
            _put(parts, rule.place, rule.name, value)
        for name, value in arguments.items():
            if name in self._mapped or name in self._unplaced:
                continue
            place = "path" if name in self._placeholders else self._default_place
            _put(parts, place, name, value)
        return parts


def _compile_rule(rule: InputRule, where: str) -> _Rule:
    place, _, name = rule.to.partition(".")
    if place not in ("path", "query", "header", "body") or (place != "body" and not name):
        raise ConfigurationError(
            f"{where}: 'to' must be path.<name>, query.<name>, header.<name>, body or body.<field>"
        )
    if place == "header" and not is_token(name):
        raise ConfigurationError(f"{where}: {name!r} is not a valid header name")
    if isinstance(rule, ArgumentRule):
        return _Rule("from", rule.argument, place, name or None)
    if isinstance(rule, ConstantRule):
        return _Rule("value", rule.value, place, name or None)
    try:
        list(string.Formatter().parse(rule.template))
    except ValueError:
        raise ConfigurationError(f"{where}: template {rule.template!r} is not a valid format string") from None
    return _Rule("template", rule.template, place, name or None)


def _render(template: str, arguments: dict[str, Any]) -> str:
    try:
        return template.format(**arguments)
    except KeyError as exc:
        raise MappingError(
            f"template needs argument {exc.args[0]!r}", recoverable=True, suggested_action=f"Pass {exc.args[0]!r}."
        ) from None


def _put(parts: RequestParts, place: str, name: str | None, value: Any) -> None:
    if place == "body":
        if name is None:
            parts.body = value
        else:
            if not isinstance(parts.body, dict):
                parts.body = {}
            parts.body[name] = value
    elif place == "header":
        assert name is not None
        if value is not None:  # as in the query: a missing optional value leaves the header out
            parts.headers[name] = _json.as_text(value)
    else:
        getattr(parts, place)[name] = value


class OutputMapping:
    def __init__(self, select: jmespath.parser.ParsedResult | None, rename: dict[str, str], max_items: int | None):
        self._select = select
        self._rename = rename
        self.max_items = max_items

    @classmethod
    def compile(cls, spec: OutputSpec, *, where: str) -> OutputMapping:
        select = None
        if spec.select:  # an empty expression selects nothing: the whole answer, as without one
            try:
                select = jmespath.compile(spec.select)
            except jmespath.exceptions.ParseError as exc:
                raise ConfigurationError(f"{where}: output_mapping.select is not valid JMESPath: {exc}") from None
        return cls(select, dict(spec.rename), spec.max_items)

    def apply(self, data: Any) -> tuple[Any, int]:
        """The mapped value and how many list items were left out."""
        try:
            value = self._select.search(data) if self._select is not None else data
        except jmespath.exceptions.JMESPathError as exc:
            raise MappingError(f"output mapping failed: {exc}") from None
        if self._rename:
            value = [self._renamed(item) for item in value] if isinstance(value, list) else self._renamed(value)
        omitted = 0
        if self.max_items is not None and isinstance(value, list) and len(value) > self.max_items:
            omitted = len(value) - self.max_items
            value = value[: self.max_items]
        return value, omitted

    def _renamed(self, item: Any) -> Any:
        if not isinstance(item, dict):
            return item
        return {self._rename.get(key, key): value for key, value in item.items()}
