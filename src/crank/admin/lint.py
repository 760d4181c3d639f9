"""The catalog linter and the catalog budget report: seed 004's checklist as rules over a runtime view.

`lint_runtime(runtime)` checks an agent's runtime view (a `crank.registry.runtime.RuntimeView`: what a
publish would serve, see `Registry.draft_runtime`) and returns findings, each naming the tool, the rule
and the fix; `lint_draft` does it for an agent's draft, and reports a draft that cannot make a view at
all as one finding. `crank lint` exits non-zero when any finding is an error, so it can run in CI. Publishing over the
budget only warns (seed 004), but the linter reports it as an error: the budget is the team's own
limit. `catalog_report(runtime)` is the size of the published `tools/list` (seed 004's estimate:
compact JSON bytes / 3) with each tool's share, heaviest first.

Rules, by id (severity: what fires it). Heuristics are plain word lists and patterns, so a finding
can always be explained; descriptions are read in the workspace's default language only. Errors are
what the seed rules out (generic names, multi-action tools, missing or vague descriptions, a DELETE
without confirmation, a catalog over budget); warnings need a judgement the linter cannot make (a
POST that cannot create a duplicate, a list short by nature, a parameter whose meaning is obvious).

- `generic-name` (error): every word of the name is generic (`call_api`, `execute_request`, `get_data`,
  `run`), or it starts with a catch-all verb (`manage_*`, `handle_*`, `process_*`)
- `name-shape` (error): the name is one word (`bestseller`, `users`): no verb_object shape
- `name-verb` (warning): a name of several words has no known verb (`customer_profile`); the verb list
  is in `_VERBS`
- `missing-description` (error): the tool has no description
- `vague-description` (error): the first sentence is one of the seed's vague phrasings ("Works with
  customers", "Processes data", "Performs an API request", "Работает с...", "Обрабатывает данные",
  "Выполняет запрос к API"), is just `METHOD /path` (the importer's fallback), or the description only
  restates the name
- `short-description` (warning): the description has fewer than 5 words
- `missing-when` (warning): nothing says when to call it: no "Use it when/to/if", "Call it when", "when
  the user...", "Используйте", "когда нужно/если пользователь..."
- `param-description` (warning): input parameters (nested ones by path: `address.city`, `lines[].sku`)
  have no description
- `untyped-parameter` (warning): a parameter accepts anything: no type, an object without properties, an
  array without items, or a string that carries JSON (`contentMediaType: application/json`, "JSON" in
  its description, or a `data`/`payload`/`body`-like name with no description saying what it holds)
- `missing-enum` (warning): a string parameter lists its options in the description ("one of: ...",
  "'asc' or 'desc'", `a | b`, "возможные значения") but has no `enum`
- `multi-action` (error): a top-level parameter chooses what the tool does: named
  `action`/`operation`/`op`/`command`/`cmd`/`verb` (or ending so), or
  `mode`/`type`/`kind`/`method`/`task`/`function` described as the action to perform, or any enum whose
  values are all actions: CRUD verbs (`create`, `update`, `delete`) or verb_object (`close_ticket`)
- `missing-idempotency-key` (warning): an http POST/PATCH has no `execution_config.idempotency`; skipped
  when the tool is read-only or declares itself idempotent (`idempotentHint`,
  `execution_config.idempotent`), since the seed asks for a key only where a retry can create a
  duplicate
- `confirmation-off` (error): `execution_config.confirmation` is `false` on a DELETE or on a tool with
  `destructiveHint`
- `unconfirmed-destructive` (warning): a tool marked `destructiveHint` that is not a DELETE (an
  imported PUT, say) and says nothing about confirmation, so it runs in one step
- `uncapped-array` (warning): the output schema is a list, or an object holding lists, and
  `output_mapping` does not cap it (`max_items` caps only a list the mapping returns, so an object
  holding lists also needs a `select`)
- `raw-output` (warning): the upstream's answer goes to the model undescribed and unselected: no output
  schema (or one without properties) and no `output_mapping.select`
- `duplicate-target` (warning): two tools call the same endpoint with the same input mapping
- `agent-description` (warning): the agent has no description, so nobody can tell which tools belong to
  its task
- `over-budget` (warning): the catalog's token estimate is above the budget (the agent's `token_budget`,
  else 4096); the fix suggests discovery mode for an agent that must stay big. Seed 004: going over the budget
  never blocks, it warns (`crank lint --strict` fails on warnings too)
- `compile-error` (error): the catalog cannot be built at all (a publish would refuse it), so its size
  is unknown; or the draft cannot even make a runtime view (a binding to a missing operation, a field
  of the wrong type)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from crank.exceptions import ConfigurationError, RegistryNotFoundError
from crank.gateway.secrets import check_secret_references
from crank.mcp.catalog import Catalog, estimate_tokens
from crank.registry import Registry
from crank.registry.runtime import ExecutionConfig, OutputSpec, RuntimeTool, RuntimeView, ToolHints
from crank.sources.agents import build_catalog
from crank.types import JSONObject

__all__ = [
    "DEFAULT_BUDGET",
    "DISCOVERY_HINT",
    "RULES",
    "CatalogReport",
    "Finding",
    "Severity",
    "ToolSize",
    "catalog_report",
    "checked_catalog",
    "lint_catalog",
    "lint_draft",
    "lint_runtime",
    "tool_sizes",
    "unbuildable",
]

DEFAULT_BUDGET = 4096
"""Seed 004: the recommended size of one agent's catalog, in estimated tokens."""
DISCOVERY_HINT = (
    "mode: discovery, or `crank agent mode WORKSPACE AGENT discovery`: three tools search, describe and call "
    "its operations"
)
"""How to switch an agent over any budget to discovery mode, as the budget report and the linter say it."""

Severity = Literal["error", "warning"]

RULES: dict[str, Severity] = {
    "generic-name": "error",
    "name-shape": "error",
    "name-verb": "warning",
    "missing-description": "error",
    "vague-description": "error",
    "short-description": "warning",
    "missing-when": "warning",
    "param-description": "warning",
    "untyped-parameter": "warning",
    "missing-enum": "warning",
    "multi-action": "error",
    "missing-idempotency-key": "warning",
    "confirmation-off": "error",
    "unconfirmed-destructive": "warning",
    "uncapped-array": "warning",
    "raw-output": "warning",
    "duplicate-target": "warning",
    "agent-description": "warning",
    "over-budget": "warning",
    "compile-error": "error",
}
"""Every rule id with its severity (one severity per rule, so CI results do not depend on wording)."""


@dataclass(frozen=True)
class Finding:
    tool: str | None  # None: the finding is about the agent as a whole
    rule: str
    severity: Severity
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.severity}  {self.tool or '(agent)'}  {self.rule}: {self.message} Fix: {self.fix}"


@dataclass(frozen=True)
class CatalogReport:
    agent: str  # the agent's slug
    estimate: int
    budget: int
    tools: list[tuple[str, int]]  # (tool name, its own entry's estimate), heaviest first

    @property
    def over_budget(self) -> bool:
        return self.estimate > self.budget


def catalog_report(
    runtime: RuntimeView, *, budget: int | None = None, catalog: Catalog | None = None, language: str | None = None
) -> CatalogReport:
    """The size of the agent's `tools/list` in `language` (default: the catalog's default language), and each
    tool's share. `catalog`: the runtime view's catalog when the caller has built it already.

    Raises `ConfigurationError` naming the tool when the catalog cannot be built."""
    if catalog is None:  # not `or`: a Catalog has a length, and an empty one is falsy
        catalog = checked_catalog(runtime)
    return _report(runtime.agent.slug, catalog, _budget(runtime, budget), language)


def checked_catalog(runtime: RuntimeView) -> Catalog:
    """The catalog the reports are made from, refused as a publish refuses it besides the build (secret
    references): `ConfigurationError` naming the place. Built once, it serves `catalog_report`, `tool_sizes` and
    `lint_runtime` alike (`catalog=`)."""
    check_secret_references(runtime)
    return build_catalog(runtime)


@dataclass(frozen=True)
class ToolSize:
    """One tool's share of the catalog as published (compacted) and as its drafts write it."""

    name: str
    tokens: int
    before: int

    def __str__(self) -> str:
        return f"{self.tokens:6d}  {self.name}  (before compaction: {self.before})"


def tool_sizes(
    runtime: RuntimeView, uncompacted: RuntimeView, *, catalog: Catalog | None = None, language: str | None = None
) -> list[ToolSize]:
    """Each tool's estimate after and before compaction (`Registry.draft_runtime(..., compact=False)`),
    heaviest first. Raises `ConfigurationError` when a catalog cannot be built."""
    before = dict(catalog_report(uncompacted, language=language).tools)
    after = catalog_report(runtime, catalog=catalog, language=language).tools
    return [ToolSize(name, tokens, before.get(name, tokens)) for name, tokens in after]


def _report(name: str, catalog: Catalog, budget: int, language: str | None = None) -> CatalogReport:
    if language is None or language not in catalog.languages:
        language = catalog.default_language
    entries = catalog.tool_entries(language)
    shares = [(str(entry["name"]), estimate_tokens([entry])) for entry in entries]
    shares.sort(key=lambda share: share[1], reverse=True)  # stable: equal shares keep the catalog's order
    estimate = catalog.token_estimate if language == catalog.default_language else estimate_tokens(entries)
    return CatalogReport(name, estimate, budget, shares)


def lint_catalog(catalog: Catalog, *, name: str, budget: int | None = None) -> tuple[list[Finding], CatalogReport]:
    """In-process tools (an `RPCService`'s MCP endpoint, any `Catalog`): the rules that apply to every tool
    (names, descriptions, parameters, multi-action, outputs) and the budget; the gateway-only rules
    (idempotency keys, confirmation, duplicate targets) need a runtime view and are left out."""
    entries = catalog.tool_entries(catalog.default_language)
    tools = [
        _Linted(str(entry["name"]), entry.get("description"), entry["inputSchema"], entry.get("outputSchema") or {},
                ToolHints.model_validate(entry.get("annotations") or {}))
        for entry in entries
    ]  # fmt: skip
    findings = [finding for tool in tools for rule in _TOOL_RULES for finding in rule(tool)]
    report = _report(name, catalog, budget or DEFAULT_BUDGET)
    if report.over_budget:
        findings.append(_over_budget(report))
    return findings, report


def lint_runtime(runtime: RuntimeView, *, budget: int | None = None, catalog: Catalog | None = None) -> list[Finding]:
    """Every finding for the agent's runtime view: tool by tool in catalog order, then the agent's own.
    `catalog`: the runtime view's catalog when the caller has built it already (a publish)."""
    tools = [_Linted.of(tool) for tool in runtime.tools]
    findings = [finding for tool in tools for rule in _TOOL_RULES for finding in _checked(rule, tool)]
    findings += _duplicate_targets(runtime.tools)
    order = {tool.name: index for index, tool in enumerate(tools)}
    findings.sort(key=lambda finding: order.get(finding.tool or "", 0))  # duplicates beside their tool
    return findings + _agent_findings(runtime, budget, catalog)


def lint_draft(registry: Registry, workspace: str, agent: str, *, budget: int | None = None) -> list[Finding]:
    """`lint_runtime` of what the agent's draft would publish. A draft that cannot make a runtime view (a
    binding to a missing operation, a field of the wrong type) is one `compile-error` finding, so a run
    over many agents reports it and goes on; an agent or workspace that does not exist still raises."""
    try:
        runtime = registry.draft_runtime(workspace, agent)
    except RegistryNotFoundError:
        raise
    except ConfigurationError as exc:
        return [unbuildable(exc)]
    return lint_runtime(runtime, budget=budget)


def unbuildable(error: ConfigurationError) -> Finding:
    """The finding for an agent whose draft or catalog cannot be built; the message names the place."""
    return _finding(None, "compile-error", str(error), "fix what it names; a publish refuses it too.")


@dataclass(frozen=True)
class _Linted:
    """What the rules read of one tool: a published one, or an in-process one (a catalog entry), which
    has no upstream call, so no HTTP method, execution config or output mapping of its own."""

    name: str
    description: str | None
    input_schema: JSONObject
    output_schema: JSONObject
    hints: ToolHints
    http_method: str | None = None  # http tools only
    execution: ExecutionConfig = ExecutionConfig()
    output_mapping: OutputSpec = OutputSpec()

    @classmethod
    def of(cls, tool: RuntimeTool) -> _Linted:
        return cls(
            tool.tool_name,
            tool.tool_description,
            tool.input_schema or {},
            tool.output_schema or {},
            tool.annotations,
            tool.http_method if tool.protocol == "http" else None,
            tool.execution_config,
            tool.output_mapping,
        )


def _checked(rule: Callable[[_Linted], Iterable[Finding]], tool: _Linted) -> list[Finding]:
    """A rule's findings; schemas too malformed to read (a draft, unchecked) are one finding, not a crash."""
    try:
        return list(rule(tool))
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        return [_finding(tool.name, "compile-error", f"the definition cannot be read ({type(exc).__name__}: {exc}).",
                         "fix the tool's schemas and config; a publish refuses it too.")]  # fmt: skip


def _budget(runtime: RuntimeView, budget: int | None) -> int:
    if budget is not None:
        return budget
    configured = runtime.agent.token_budget
    return configured if configured is not None else DEFAULT_BUDGET


def _finding(tool: str | None, rule: str, message: str, fix: str) -> Finding:
    return Finding(tool, rule, RULES[rule], message, fix)


# -- names -------------------------------------------------------------------------------------------

# Words that say nothing about what a call does; a name made only of them is generic.
_GENERIC_WORDS = frozenset({
    "call", "execute", "exec", "run", "do", "perform", "invoke", "make", "send", "get", "post", "put", "patch",
    "delete", "fetch", "api", "request", "requests", "endpoint", "action", "actions", "operation", "operations",
    "data", "query", "method", "tool", "http", "rest", "rpc", "generic", "handle", "process", "manage", "info",
    "information", "stuff", "thing", "things", "payload", "command", "function", "service",
})  # fmt: skip
# Verbs that hide several actions behind one name (seed 004: `manage_user`): split the tool instead.
_CATCH_ALL_VERBS = frozenset({"manage", "handle", "process", "administer", "maintain", "operate"})
_VERBS = frozenset("""
    add apply approve archive assign attach authorize block book buy calculate cancel capture change charge check
    clear close compare complete compute confirm convert copy count create decline delete deny describe detach
    disable download duplicate edit enable end escalate estimate evaluate export extend fetch fill find finish flag
    follow forward generate get give grant hide import insert invite issue join leave link list load lock log
    lookup look mark merge move notify open order pause pay ping place post preview publish purchase put query
    quote rank rate read receive record redeem refresh refund register reject release reload remove rename render
    renew reopen replace reply report request reschedule reserve reset resolve restore resume retrieve return
    revoke run save schedule score search select send set share ship show sign sort split start stop submit
    subscribe summarize suspend sync tag track transfer translate trigger unassign unblock unlink unlock
    unsubscribe untag update upgrade upload upsert validate verify view void watch withdraw write
""".split())  # fmt: skip
_NAME_EXAMPLE = "name it verb_object for the one thing it does, e.g. get_customer_by_email or create_support_ticket."


def _words(text: str) -> list[str]:
    """`getUserById`, `get_user-by.id` -> ["get", "user", "by", "id"]."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)
    return [word for word in re.split(r"[^A-Za-z0-9]+", snake.lower()) if word]


def _check_name(tool: _Linted) -> Iterator[Finding]:
    name = tool.name
    words = _words(name)
    if all(word in _GENERIC_WORDS for word in words) or (words and words[0] in _CATCH_ALL_VERBS):
        yield _finding(name, "generic-name", f"{name!r} says nothing about what it does.", _NAME_EXAMPLE)
    elif len(words) < 2:
        yield _finding(name, "name-shape", f"{name!r} is one word, not verb_object.", _NAME_EXAMPLE)
    elif not any(word in _VERBS for word in words):
        yield _finding(name, "name-verb", f"{name!r} has no verb saying what it does.", _NAME_EXAMPLE)


# -- descriptions ------------------------------------------------------------------------------------

_VAGUE = tuple(
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"^(works|deals|interacts|operates) with\b",
        r"^(processes|handles|manages) (the |some |all )?(data|requests?|stuff|things|information|records|entities)\b",
        r"^(performs|makes|executes|sends|runs|does) (an? |the )?((api|http|rest|rpc|remote) )?"
        r"(request|call|query|operation|action)s?\b",
        r"^calls? (the |an? )?(api|endpoint|service)\b",
        r"^работает с\b",
        r"^(обрабатывает|управляет) (данн|запрос|информаци)",
        r"^выполняет (запрос|вызов|операци|действи)",
        r"^(get|head|post|put|patch|delete|options) /\S*$",  # the importer's fallback, "GET /users/{id}"
    )
)
_WHEN = re.compile(
    r"\b(use|call|invoke)( it| this( tool)?)?( only)? (when|if|to|before|after|once|for)\b"
    r"|\b(when|if|once) (you|the user|a user|the caller)\b"
    r"|\b(используйте|используй|вызывайте|вызывай|применяйте|використовуйте|викликайте)\b"
    r"|\b(когда|если) (нужно|надо|требуется|пользователь)",
    re.IGNORECASE,
)
_STOPWORDS = frozenset("a an the of for by to in on with and or this that it its one all from into at as is".split())
_MIN_WORDS = 5


def _check_description(tool: _Linted) -> Iterator[Finding]:
    name = tool.name
    text = str(tool.description or "").strip()
    if not text:
        yield _finding(name, "missing-description", "the tool has no description.", _DESCRIPTION_FIX)
        return
    first = re.split(r"(?<=[.!?])\s+|\n+", text, maxsplit=1)[0].strip()
    if any(pattern.search(first) for pattern in _VAGUE) or _restates(text, name):
        yield _finding(name, "vague-description", f"{first!r} does not say what the tool does.", _DESCRIPTION_FIX)
    elif len(re.findall(r"\w+", text)) < _MIN_WORDS:
        yield _finding(name, "short-description", f"{text!r} is too short to choose the tool by.", _DESCRIPTION_FIX)
    if not _WHEN.search(text):
        yield _finding(
            name,
            "missing-when",
            "the description does not say when to call the tool.",
            "add a sentence like 'Use it when the user asks for ... / before ...'.",
        )


_DESCRIPTION_FIX = (
    "start with the action and its object, say when to use it and what it returns, e.g. 'Gets a customer "
    "by email. Use it when you need the customer id before opening a ticket. Returns id, name and status.'"
)


def _restates(text: str, name: str) -> bool:
    """True when every content word of the description is a word of the name ("Get book." for `get_book`)."""
    name_stems = {_stem(word) for word in _words(name)}
    content = [_stem(word) for word in re.findall(r"[a-z]+", text.lower()) if word not in _STOPWORDS]
    return bool(content) and not re.search(r"[^\x00-\x7f]", text) and set(content) <= name_stems


def _stem(word: str) -> str:
    """Enough English stemming to match "gets"/"orders"/"searches" with `get`/`order`/`search`."""
    if re.search(r"(ch|sh|ss|x)es$", word):
        return word[:-2]
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


# -- input parameters --------------------------------------------------------------------------------

_MAX_DEPTH = 4  # nested parameters are checked this deep; recursive schemas stop here
_BLOB_NAMES = frozenset(
    {"data", "payload", "body", "json", "params", "parameters", "args", "arguments", "request", "raw", "blob"}
)
_TYPE_KEYS = frozenset({"type", "enum", "const", "anyOf", "oneOf", "allOf", "properties", "items", "not"})


def _resolve(node: Any, root: JSONObject) -> JSONObject:
    """Follow local `$ref`s (`#/$defs/X`) a few steps; anything else is returned as it is."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(node, dict) or not str(node.get("$ref", "")).startswith("#/"):
            break
        target: Any = root
        for part in str(node["$ref"])[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        node = target
    return node if isinstance(node, dict) else {}


def _parameters(schema: Any, root: JSONObject, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, JSONObject]]:
    """(path, schema) of every property, nested ones as `a.b` and `items[].sku`; the schema as written
    beside its `$ref` merged over what the reference points to (a description may sit on either)."""
    node = _resolve(schema, root)
    if depth >= _MAX_DEPTH:
        return
    for name, written in (node.get("properties") or {}).items():
        merged = {**_resolve(written, root), **(written if isinstance(written, dict) else {})}
        path = prefix + str(name)
        yield path, merged
        yield from _parameters(merged, root, path + ".", depth + 1)
        if isinstance(merged.get("items"), dict):
            yield from _parameters(merged["items"], root, path + "[].", depth + 1)


def _input_parameters(tool: _Linted) -> list[tuple[str, JSONObject]]:
    schema = tool.input_schema
    return list(_parameters(schema, schema))


def _types(schema: JSONObject) -> set[str]:
    declared = schema.get("type")
    return set(declared) if isinstance(declared, list) else {str(declared)} if declared else set()


def _check_parameter_descriptions(tool: _Linted) -> Iterator[Finding]:
    missing = [path for path, schema in _input_parameters(tool) if not str(schema.get("description") or "").strip()]
    if missing:
        yield _finding(
            tool.name,
            "param-description",
            f"parameters without a description: {', '.join(missing)}.",
            "describe each: what it is, its format and where the model gets it "
            "(e.g. 'The order id, from search_orders').",
        )


def _untyped_reason(path: str, schema: JSONObject) -> str | None:
    types = _types(schema)
    if not set(schema) & _TYPE_KEYS and "$ref" not in schema:
        return "accepts any value"
    if "object" in types and not schema.get("properties") and not isinstance(schema.get("additionalProperties"), dict):
        return "is an object without properties"
    if "array" in types and "items" not in schema:
        return "is a list of anything"
    if types == {"string"} and _carries_json(path, schema) and not set(schema) & {"enum", "const", "format", "pattern"}:
        return "is JSON in a string"
    return None


def _carries_json(path: str, schema: JSONObject) -> bool:
    """What the schema says first (`contentMediaType`, `contentSchema`, "JSON" in the description); a
    blob-like name (`data`, `payload`, `body`) only when no description says what the string is: an
    issue's `body` described as Markdown text is text, not JSON."""
    media = str(schema.get("contentMediaType", "")).lower()
    if "contentSchema" in schema or media == "application/json" or media.endswith("+json"):
        return True
    description = str(schema.get("description") or "").strip()
    if description:
        return bool(_MENTIONS_JSON.search(description))
    return path.rsplit(".", 1)[-1].removesuffix("[]").lower() in _BLOB_NAMES


_MENTIONS_JSON = re.compile(r"\bjson\b|\bserial[iz]ed (object|data|structure)", re.IGNORECASE)


def _check_untyped_parameters(tool: _Linted) -> Iterator[Finding]:
    for path, schema in _input_parameters(tool):
        reason = _untyped_reason(path, schema)
        if reason is not None:
            yield _finding(
                tool.name,
                "untyped-parameter",
                f"parameter {path!r} {reason}.",
                "give it a type, and for objects the properties the call needs "
                "(e.g. email: string, include_orders: boolean).",
            )


_LISTS_OPTIONS = re.compile(
    r"\bone of\s*[:(\['\"`«]"
    r"|\b(possible|allowed|valid|accepted|supported) values\b"
    r"|(['\"`«][\w-]+['\"`»]\s*(,|\bor\b|\||/|или)\s*)+['\"`«][\w-]+['\"`»]"
    r"|\b[\w-]+( ?\| ?[\w-]+)+\b"
    r"|(одно|один|одна) из( значений)?\s*[:(«\"'`]|(возможные|допустимые) значения",
    re.IGNORECASE,
)


def _check_missing_enums(tool: _Linted) -> Iterator[Finding]:
    for path, schema in _input_parameters(tool):
        described = str(schema.get("description") or "")
        if _types(schema) == {"string"} and not {"enum", "const"} & set(schema) and _LISTS_OPTIONS.search(described):
            yield _finding(
                tool.name,
                "missing-enum",
                f"parameter {path!r} lists its values in the description but has no enum.",
                "put the values in an enum, e.g. {type: string, enum: [asc, desc]}.",
            )


# -- multi-action --------------------------------------------------------------------------------------

_ACTION_WORDS = frozenset({"action", "operation", "op", "command", "cmd", "verb"})
_MAYBE_ACTION_WORDS = frozenset({"mode", "type", "kind", "method", "task", "function"})
_CRUD_VERBS = frozenset({
    "create", "add", "insert", "get", "read", "list", "search", "find", "fetch", "update", "edit", "set", "patch",
    "put", "replace", "upsert", "delete", "remove", "cancel", "archive", "restore", "send", "post",
})  # fmt: skip
_SAYS_ACTION = re.compile(r"\b(action|operation|what to do)\b|действи|операци", re.IGNORECASE)


def _is_action_value(value: str) -> bool:
    """`create`, `delete` (a CRUD verb) or `close_ticket` (any verb with an object); not `open` or `close`
    alone, which are as often states as actions."""
    words = _words(value)
    return bool(words) and words[0] in (_VERBS if len(words) > 1 else _CRUD_VERBS)


def _chooses_action(name: str, schema: JSONObject) -> bool:
    """An argument that picks what the tool does: by its name, its description or verb-only enum values."""
    if _types(schema) - {"string", "null"}:
        return False
    values = [str(value) for value in schema.get("enum") or []]
    verb_values = len(values) >= 2 and all(_is_action_value(value) for value in values)
    last = (_words(name) or [""])[-1]
    if last in _ACTION_WORDS or verb_values:
        return True
    return last in _MAYBE_ACTION_WORDS and bool(_SAYS_ACTION.search(str(schema.get("description") or "")))


def _check_multi_action(tool: _Linted) -> Iterator[Finding]:
    schema = tool.input_schema
    for name, written in (_resolve(schema, schema).get("properties") or {}).items():
        if _chooses_action(str(name), _resolve(written, schema)):
            yield _finding(
                tool.name,
                "multi-action",
                f"parameter {name!r} chooses what the tool does.",
                "split it into one tool per action (create_ticket, close_ticket, ...), each with its own parameters.",
            )


# -- side effects ------------------------------------------------------------------------------------


def _check_idempotency(tool: _Linted) -> Iterator[Finding]:
    method, config, hints = tool.http_method, tool.execution, tool.hints
    if method not in {"POST", "PATCH"} or config.idempotency is not None or config.idempotent is True:
        return
    if hints.idempotent_hint is True or hints.read_only_hint is True:
        return
    yield _finding(
        tool.name,
        "missing-idempotency-key",
        f"{method} without an idempotency key: a client retrying after a timeout may create a duplicate.",
        "add a request_id argument and execution_config: {idempotency: {argument: request_id, "
        "header: Idempotency-Key}}, or mark the tool idempotentHint: true if a repeat is harmless.",
    )


def _check_confirmation(tool: _Linted) -> Iterator[Finding]:
    required = tool.execution.confirmation.required
    destructive = tool.http_method == "DELETE" or tool.hints.destructive_hint is True
    if destructive and required is False:
        yield _finding(
            tool.name,
            "confirmation-off",
            "a destructive tool runs without the two-step confirmation.",
            "remove execution_config.confirmation: false, so the user confirms before anything is deleted.",
        )
    elif destructive and tool.http_method not in (None, "DELETE") and required is None:
        yield _finding(
            tool.name,
            "unconfirmed-destructive",
            f"the tool is marked destructive but, as a {tool.http_method}, runs without confirmation "
            "(only DELETE asks by default).",
            "set execution_config.confirmation: true if it can destroy data, or destructiveHint: false if not.",
        )


# -- output ------------------------------------------------------------------------------------------


def _is_array(schema: JSONObject) -> bool:
    return "array" in _types(schema)


def _check_uncapped_arrays(tool: _Linted) -> Iterator[Finding]:
    root = tool.output_schema
    mapping = tool.output_mapping
    capped = mapping.max_items is not None
    node = _resolve(root, root)
    if _is_array(node):
        lists = "a list" if not capped else None
    else:
        names = [str(name) for name, sub in (node.get("properties") or {}).items() if _is_array(_resolve(sub, root))]
        lists = f"lists ({', '.join(names)})" if names and not (capped and mapping.select) else None
    if lists is not None:
        yield _finding(
            tool.name,
            "uncapped-array",
            f"returns {lists} of any length.",
            "select the list and the fields the model needs and cap it, e.g. output_mapping: "
            "{select: 'items[].{id: id, title: title}', max_items: 20} "
            "(max_items caps only a list the mapping returns).",
        )


def _check_raw_output(tool: _Linted) -> Iterator[Finding]:
    root = tool.output_schema
    node = _resolve(root, root)
    if tool.output_mapping.select:
        return
    described = set(node) & (_TYPE_KEYS - {"type"}) or isinstance(node.get("additionalProperties"), dict)
    if not described and _types(node) <= {"object"}:
        yield _finding(
            tool.name,
            "raw-output",
            "the upstream's whole answer goes to the model, undescribed.",
            "select the fields the next step needs with output_mapping.select and describe them in output_schema.",
        )


_TOOL_RULES: tuple[Callable[[_Linted], Iterable[Finding]], ...] = (
    _check_name,
    _check_description,
    _check_parameter_descriptions,
    _check_untyped_parameters,
    _check_missing_enums,
    _check_multi_action,
    _check_idempotency,
    _check_confirmation,
    _check_uncapped_arrays,
    _check_raw_output,
)


# -- the agent ---------------------------------------------------------------------------------------


def _duplicate_targets(tools: Iterable[RuntimeTool]) -> Iterator[Finding]:
    seen: dict[str, str] = {}
    for tool in tools:
        target = tool.target
        key = repr((tool.protocol, target.method, target.url, tool.input_mapping))
        if key in seen:
            yield _finding(
                tool.tool_name,
                "duplicate-target",
                f"calls the same endpoint as {seen[key]!r} ({target.method} {target.url}).",
                "keep one of them, or make each a distinct task (fixed input_mapping values, its own description).",
            )
        seen.setdefault(key, tool.tool_name)


def _agent_findings(runtime: RuntimeView, budget: int | None, catalog: Catalog | None) -> list[Finding]:
    findings = []
    if not (runtime.agent.description or "").strip():
        findings.append(
            _finding(
                None,
                "agent-description",
                "the agent has no description.",
                "say the one task it serves (e.g. 'Find books, order them and follow orders') and bind only its tools.",
            )
        )
    try:
        report = catalog_report(runtime, budget=budget, catalog=catalog)
    except ConfigurationError as exc:
        findings.append(_finding(None, "compile-error", str(exc), "fix the tool it names; a publish refuses it too."))
        return findings
    if report.over_budget:
        findings.append(_over_budget(report))
    return findings


def _over_budget(report: CatalogReport) -> Finding:
    heaviest = ", ".join(f"{name} ({tokens})" for name, tokens in report.tools[:3])
    return _finding(
        None,
        "over-budget",
        f"the catalog is about {report.estimate} tokens, over the budget of {report.budget}; heaviest: {heaviest}.",
        "shorten descriptions and schemas first; if the tools serve different tasks, split them between agents; "
        f"if it must stay one big agent, publish it in discovery mode ({DISCOVERY_HINT}).",
    )
