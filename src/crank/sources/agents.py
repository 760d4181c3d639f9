"""Published gateway agents as a source of MCP tools, reloaded without restart.

`AgentSource` builds one catalog per published agent when a request first asks for it, from the registry's runtime
view (a typed `crank.registry.runtime.RuntimeView`, whatever format version stored it) and nothing else: drafts,
samples and import metadata never reach it. It keeps the most recently used (`crank.sources.agent_cache`). A
watcher polls the registry's generation and reads what changed from its change log: the agents it holds that a
publish touched are rebuilt and swapped in whole, so a `tools/list` page or a call sees the whole old or the whole
new version. With a `ChangeListener` (`crank.registry.changes`: PostgreSQL NOTIFY or Redis pub/sub) the watcher
also checks as soon as a change is announced, and the poll stays for a lost announcement.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import math
import operator
import time
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool

from crank import _json
from crank.exceptions import (
    CatalogNotFoundError,
    CatalogUnauthorizedError,
    ConfirmationError,
    ToolError,
)
from crank.gateway.client import UpstreamClient
from crank.gateway.credentials import TokenCache
from crank.gateway.egress import EgressPolicy
from crank.gateway.limits import CallLimits, Limiter
from crank.gateway.operation import Placement, RemoteOperation
from crank.gateway.safety import CONFIRMATION_ARGUMENT, CONFIRMATION_SENTENCE, HUMAN_CONFIRMATION_SENTENCE
from crank.gateway.secrets import MissingCredential, MissingSecret, missing_credentials, missing_secrets
from crank.gateway.user_connections import UpstreamConnectionRequiredError, UserConnections
from crank.mcp.catalog import Catalog, identity_of
from crank.mcp.changes import LIST_KINDS, ListChanges
from crank.mcp.input_required import DEFAULT_STATE_MAX_AGE
from crank.mcp.resources import Resource
from crank.mcp.tools import CallContext, CallObserver, Invoker, NotedResult, Tool, ToolAnnotations
from crank.mcp.translations import Translations
from crank.registry import (
    DATABASE_ERRORS,
    Changes,
    KeyScope,
    PublishedAgent,
    PublishedVersion,
    Registry,
    describe_database_error,
)
from crank.registry.changes import ChangeListener
from crank.registry.runtime import AuthConfig, OAuthPolicy, RuntimeView, ToolHints, origin_of
from crank.schema import wrap_output
from crank.sources.admission import WorkspaceAdmission
from crank.sources.agent_cache import AgentCache, AgentCacheLimits
from crank.sources.agent_surface import agent_surface
from crank.sources.api_keys import DEFAULT_KEY_LIST_MAX_AGE, ApiKeys, KeyCacheLimits
from crank.sources.audit_trail import AuditTrail
from crank.sources.connect import ask_to_connect
from crank.sources.discovery import Discovery, observer_for
from crank.sources.prompt_templates import RenderGates
from crank.sources.registry_reads import registry_read
from crank.sources.search import IndexedOperation
from crank.sources.workspace_policies import Unknown, WorkspacePolicies
from crank.state import MemoryStore, StateStore
from crank.telemetry import Metrics
from crank.types import JSONObject, Scope
from crank.wire.auth import Principal
from crank.wire.budgets import client_address
from crank.wire.middleware import AUTH_SCOPE_KEY
from crank.wire.notices import ThrottledLog

__all__ = ["AgentSource", "build_catalog"]

logger = logging.getLogger("crank.gateway")
_notices = ThrottledLog(logger)
UPSTREAM_PROGRESS_INTERVAL: Final = 1.0
"""Seconds between progress notifications of an upstream call that has not answered, for a request that asked
for progress (`_meta.progressToken`)."""
SETTLE_INTERVAL: Final = 60.0
"""Seconds between two whole settles of the heap driven by replaced or evicted catalogs (`AgentSource._settle`)."""
BUILD_UNIT: Final = 20
"""Tools one build of the budget stands for (`CRANK_AGENT_BUILDS_PER_SECOND`): an agent of 1,000 tools spends 50."""
_LOAD_ATTEMPTS: Final = 3  # reads of a cold agent when publishes land during its build; then the newest read serves
_READ_CHUNK: Final = 500  # held agents whose views one registry read brings back (a reload of many)
_CONNECT_BUILDS: Final = 16  # agents of a workspace a connect page may have built, to find the scheme's credentials


def build_catalog(
    runtime: RuntimeView,
    client: UpstreamClient | None = None,
    *,
    version: int = 0,
    metrics: Metrics | None = None,
    state: StateStore | None = None,
    limiter: Limiter | None = None,
    oauth: OAuthPolicy | None = None,
    tokens: TokenCache | None = None,
    renders: RenderGates | None = None,
    audit: AuditTrail | None = None,
) -> Catalog:
    """The catalog of one agent version. Raises `ConfigurationError` naming the tool that is wrong.
    With a `limiter`, each call is held to the agent's limits and the calling key's first. With its workspace's
    `oauth` policy, each tool requires the scopes the policy gives it (`Tool.required_scopes`).

    An agent in discovery mode gets the three tools of `crank.sources.discovery`, in front of a catalog of its
    operations compiled exactly as a direct agent's tools.

    Without a `client` (a publish check, the linter) each build gets its own, which opens nothing until a
    call is made through it. `tokens`: the process's OAuth client-credentials tokens (crank.gateway.credentials);
    without it the build's operations share a cache of their own. `renders`: the process's turns at rendering
    stored prompts, per workspace (`crank.sources.prompt_templates.RenderGates`); a gate of its own when None."""
    client = client or UpstreamClient()
    labels = agent_labels(runtime.workspace.slug, runtime.agent.slug)
    placement = Placement(labels["workspace"], labels["agent"], version)
    observer = _observer(metrics.observer(**labels) if metrics is not None else None,
                         audit.observer(**labels) if audit is not None else None)  # fmt: skip
    limits = CallLimits(limiter, placement.workspace, placement.agent, runtime.agent.limits) if limiter else None
    tools, layer, confirmed = _tools(runtime, client, placement, state, limits, oauth, tokens or TokenCache())
    surface = agent_surface(runtime, renders)
    for language, texts in surface.texts.items():
        layer.setdefault(language, {}).update(texts)
    translations = Translations(layer, default_language=runtime.workspace.default_language)
    asks = any(tool.name in confirmed for tool in tools)
    direct = runtime.agent.mode != "discovery"
    resources = list(surface.resources)
    if any(spec.execution_config.auth is not None and spec.execution_config.auth.type == "user_connection"
           for spec in runtime.tools):  # fmt: skip
        resources.append(_connections_resource((tokens or TokenCache()).connections, placement.workspace))
    offered: dict[str, Any] = dict(resources=resources, resource_templates=surface.templates,
                                   prompts=surface.prompts)  # fmt: skip
    # `asks`: a tool may ask the user to confirm, so legacy clients get a session that says whether they can
    # A caller without credentials (lazy sign-in) is listed what the agent's own scopes open.
    anonymous_scopes = oauth.agent_needs(placement.agent) if oauth is not None else frozenset()
    operations = Catalog(tools, version=str(version), translations=translations, labels=labels, observer=observer,
                         asks=asks, anonymous_scopes=anonymous_scopes, **(offered if direct else {}))  # fmt: skip
    if direct:
        return operations
    # Discovery mode: the same compiled operations, unlisted, behind three fixed tools (crank.sources.discovery).
    indexed = [
        IndexedOperation.of(
            spec.tool_name,
            spec.tool_description or spec.title,
            path=urlsplit(spec.target.url).path if spec.protocol == "http" else spec.target.method or "",
            input_schema=spec.input_schema,
        )
        for spec in runtime.tools
    ]
    discovery = Discovery(operations, indexed, api=runtime.agent.description)
    fixed = discovery.tools()
    if oauth is not None:  # the three fixed tools need the agent's scopes; each operation its own (call_operation)
        fixed = [replace(tool, required_scopes=oauth.agent_needs(placement.agent)) for tool in fixed]
    # The fixed tools have texts of their own: only the surface's names keep their translations.
    named = {item.name for kind in offered.values() for item in kind}
    kept = {language: {name: texts for name, texts in entries.items() if name in named}
            for language, entries in layer.items()}  # fmt: skip
    surface_texts = Translations({language: entries for language, entries in kept.items() if entries},
                                 default_language=runtime.workspace.default_language)  # fmt: skip
    return Catalog(fixed, version=str(version), labels=labels, observer=observer_for(observer),
                   translations=surface_texts, asks="asks" in operations.features, reads=operations,
                   anonymous_scopes=anonymous_scopes, **offered)  # fmt: skip


def _observer(first: CallObserver | None, second: CallObserver | None) -> CallObserver | None:
    """One observer that tells both (the metrics', the audit trail's) about every call; either alone as it is."""
    if first is None or second is None:
        return first or second

    def both(
        tool: str, error: ToolError | None, seconds: float, request_id: str | None, caller: Principal | None,
        arguments: Mapping[str, Any], /,
    ) -> None:  # fmt: skip
        first(tool, error, seconds, request_id, caller, arguments)
        second(tool, error, seconds, request_id, caller, arguments)

    return both


CONNECTIONS_URI: Final = "crank://connections"


def agent_labels(workspace: str, agent: str) -> dict[str, str]:
    """An agent catalog's labels (its metrics' and logs', and its identity for list-change listeners)."""
    return {"workspace": workspace, "agent": agent}


def _connections_resource(connections: UserConnections, workspace: str) -> Resource:
    """`crank://connections`, offered by an agent whose tools act through users' own connections: the reader's
    own connections (which APIs, since when; never a token) and the page where they remove them."""

    async def read(context: CallContext) -> str:
        caller = context.caller if isinstance(context.caller, Principal) else None
        return _json.dumps(await connections.of_user(workspace, caller)).decode()

    return Resource(CONNECTIONS_URI, "connections", read, title="Your connected accounts",
                    description="The accounts you connected to this agent's APIs, and the page to remove them.",
                    mime_type="application/json")  # fmt: skip


def _tools(
    runtime: RuntimeView,
    client: UpstreamClient,
    placement: Placement,
    state: StateStore | None,
    limits: CallLimits | None = None,
    oauth: OAuthPolicy | None = None,
    tokens: TokenCache | None = None,
) -> tuple[list[Tool], dict[str, dict[str, dict[str, str]]], set[str]]:
    """Each published tool compiled (its remote operation, schemas, hints), the translation layer, and the
    names of the tools whose calls are confirmed."""
    layer: dict[str, dict[str, dict[str, str]]] = {}
    tools = []
    confirmed: set[str] = set()
    for spec in runtime.tools:
        name = spec.tool_name
        for language, texts in spec.translations.items():
            layer.setdefault(language, {})[name] = dict(texts)
        # `omit`: a loose upstream's tool promises no output schema, so no answer of it can break a client.
        output = spec.output_schema if spec.execution_config.output_schema == "publish" else None
        operation = RemoteOperation(spec, client, state=state, placement=placement, tokens=tokens)
        input_schema = spec.input_schema or {"type": "object", "additionalProperties": False}
        description = spec.tool_description
        if operation.confirmation is not None:
            input_schema, description = _with_confirmation(input_schema, description, operation.confirmation.human)
            confirmed.add(name)
        scopes: frozenset[str] = frozenset()
        if oauth is not None:
            destructive = spec.annotations.destructive_hint is True or operation.confirmation is not None
            read_only = spec.annotations.read_only_hint is True
            scopes = oauth.tool_needs(placement.agent, name, read_only=read_only, destructive=destructive)
        tools.append(
            Tool(
                name=name,
                title=spec.title,
                description=description,
                input_schema=input_schema,
                output_schema=wrap_output(output) if output else None,
                wrap_result=bool(output),
                annotations=_annotations(spec.annotations),
                invoker=_invoker(operation, limits),
                format=spec.format,
                required_scopes=scopes,
            )
        )
    return tools, layer, confirmed


def _with_confirmation(schema: JSONObject, description: str | None, human: bool) -> tuple[JSONObject, str]:
    """The published schema accepts the token and the description tells the model about the second step
    (so that sentence counts in the catalog's token estimate); a tool only a person confirms takes no token."""
    if human:
        text = f"{description} {HUMAN_CONFIRMATION_SENTENCE}" if description else HUMAN_CONFIRMATION_SENTENCE
        return schema, text
    properties = {**(schema.get("properties") or {}), CONFIRMATION_ARGUMENT: {
        "type": "string", "description": "Only on the second call: the token the first call returned."}}  # fmt: skip
    text = f"{description} {CONFIRMATION_SENTENCE}" if description else CONFIRMATION_SENTENCE
    return {**schema, "type": "object", "properties": properties}, text


def _annotations(hints: ToolHints) -> ToolAnnotations | None:
    annotations = ToolAnnotations(
        title=hints.title,
        read_only_hint=hints.read_only_hint,
        destructive_hint=hints.destructive_hint,
        idempotent_hint=hints.idempotent_hint,
        open_world_hint=hints.open_world_hint,
    )
    return annotations if annotations.to_wire() is not None else None


def _invoker(operation: RemoteOperation, limits: CallLimits | None) -> Invoker:
    agent_limited = limits is not None and limits.limits is not None

    async def invoke(arguments: dict[str, Any], context: CallContext) -> Any:
        # Who calls, typed from here to the adapter (`AgentSource` authenticates every request as a `KeyScope`).
        caller = context.caller if type(context.caller) is KeyScope else None
        # Counted when the agent has limits or the key its own (`CallLimits`): two attribute checks, no call
        if limits is not None and (agent_limited or (caller is not None and caller.limits is not None)):
            if not limits.admit_now(caller):
                await limits.admit(caller)  # LimitReachedError: nothing is sent
        # The user's own connection before a confirmation or an idempotency key is spent on the call; without
        # them, the call's request obtains it (one look-up), and a user not connected yet is asked below.
        if operation.prepares and operation.spends and not operation.adapter.prepared(caller):
            await _connected(operation, caller, context)
        if operation.confirmation is None:  # the common case, as short as before confirmations could ask
            pending = operation.call(arguments, context.headers, caller)
        else:
            who = caller.id if caller is not None else ""
            confirmed = await ask_user(operation, arguments, context, who)
            pending = operation.call(arguments, context.headers, caller, confirmed=confirmed)
        reporting = context.progress_token is not None  # most calls ask for no progress
        try:
            outcome = await (_reporting(pending, operation, context) if reporting else pending)
        except UpstreamConnectionRequiredError as needed:
            # The user has no connection (nothing was sent), or the API refused their token and it cannot be
            # renewed (an idempotent request only: a POST is never sent again). Asked to connect, then sent again.
            if operation.spends:  # asked for before the confirmation; this one came after: said as it is
                raise
            await ask_to_connect(needed, context, operation.connections, operation.workspace)
            again = operation.call(arguments, context.headers, caller)
            outcome = await (_reporting(again, operation, context) if reporting else again)
        if not outcome.omitted:
            return outcome.value
        # The note follows the value in its own text block, after the value is put in the chosen format.
        return NotedResult(outcome.value, f"{outcome.omitted} more items were left out; narrow the query to see them.")

    return invoke


async def _connected(operation: RemoteOperation, caller: KeyScope | None, context: CallContext) -> None:
    """The caller's own connection for the operation's API: there, or asked for (URL elicitation) and waited for;
    `UpstreamConnectionRequiredError` with the link when the client cannot ask or the user has not connected."""
    try:
        await operation.adapter.prepare(caller)
    except UpstreamConnectionRequiredError as needed:
        await ask_to_connect(needed, context, operation.connections, operation.workspace)


async def _reporting(pending: Awaitable[Any], operation: RemoteOperation, context: CallContext) -> Any:
    """The upstream call, with a progress notification every `UPSTREAM_PROGRESS_INTERVAL` seconds it has not
    answered (the seconds waited so far, no total): a client that asked for progress sees a slow upstream is
    still at work, and one whose timeout restarts on progress keeps waiting. A call that answers sooner sends
    none, and is answered as JSON."""
    call = asyncio.ensure_future(pending)
    started = time.monotonic()
    try:
        while True:
            done, _ = await asyncio.wait((call,), timeout=UPSTREAM_PROGRESS_INTERVAL)
            if done:
                return call.result()
            waited = round(time.monotonic() - started, 1)
            await context.progress(waited, None, f"Waiting for the upstream of {context.tool_name} ({waited:g} s)")
    finally:
        if not call.done():  # the caller was cancelled: so is the upstream call, and its end is not logged
            call.cancel()
            call.add_done_callback(_quietly)


def _quietly(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def ask_user(operation: RemoteOperation, arguments: dict[str, Any], context: CallContext, who: str) -> bool:
    """Ask the user, through a client that declared elicitation, to confirm a destructive call: True once they
    accepted (the call then runs without a token), False for a client that cannot ask (seed 004's token then,
    or `confirmation_unavailable` for `confirmation: human`). A decline or cancel is `confirmation_declined`,
    no answer in time `confirmation_timeout`: nothing is sent upstream either way."""
    confirmation = operation.confirmation
    if confirmation is None or not context.can_ask("elicitation"):
        return False
    shown = confirmation.without_token(arguments)
    said = ", ".join(f"{name} = {_json.dumps(value).decode()[:200]}" for name, value in shown.items()) or "none"
    message = (f"Allow {context.tool_name} to run? It sends {operation.target} (it changes or deletes data). "
               f"Arguments: {said}.")  # fmt: skip
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Run it",
              "description": f"Yes: run {context.tool_name} now."}}, "required": ["confirm"]}  # fmt: skip
    try:
        answer = await context.elicit(message, schema, timeout=confirmation.ttl)
    except ToolError as failed:
        if failed.error_code != "client_request_timeout":
            raise
        raise ConfirmationError(
            f"Nobody answered the confirmation of {context.tool_name} within {confirmation.ttl:g} s. Nothing was "
            "changed.", error_code="confirmation_timeout", recoverable=True,
            suggested_action="Call the tool again when the user is there to confirm it.",
        ) from None  # fmt: skip
    content = answer.get("content")
    if answer.get("action") != "accept" or not isinstance(content, dict) or content.get("confirm") is not True:
        raise ConfirmationError(
            f"The user did not confirm {context.tool_name}. Nothing was changed.",
            error_code="confirmation_declined", recoverable=False,
            suggested_action="Do not repeat the call unless the user asks for it.",
        )  # fmt: skip
    once = context.answer_id()
    # 2026-07-28: each answer runs one call. Its claim outlives the signed state that carries it (whichever is
    # longer), so the same answer can never be sent again once the claim is gone.
    claimed = once is not None and await operation.state.add(
        f"confirm-user:{once}", {"by": who}, max(confirmation.ttl, DEFAULT_STATE_MAX_AGE)
    )
    if context.modern and not claimed:
        raise ConfirmationError(  # a 2026-07-28 answer sent again: each confirmation runs one call
            "This confirmation was used already. Nothing was changed.", error_code="confirmation_invalid",
            recoverable=True, suggested_action="Call the tool again; the user is asked again.",
        )  # fmt: skip
    return True


@dataclass(frozen=True, slots=True)
class _Served:
    """One published agent as this replica serves it, with what `/readyz` says of it."""

    stamp: tuple[int, OAuthPolicy | None]
    """Its published version and its workspace's OAuth policy: what the catalog was built from."""
    catalog: Catalog
    secrets: RuntimeView | None
    """Its view when its tools use secrets (checked on each `/readyz`: a file mounted later counts at once)."""
    refused: tuple[RefusedTarget, ...]
    gaps: tuple[MissingCredential, ...]
    tools: int = 0
    """How many tools it has: what building it cost (`_build_cost`)."""


@dataclass(frozen=True, slots=True)
class RefusedTarget:
    """A published tool whose upstream address this server's egress policy refuses."""

    workspace: str
    agent: str
    tool: str
    origin: str
    reason: str

    def to_json(self) -> JSONObject:
        return {"workspace": self.workspace, "agent": self.agent, "tool": self.tool, "origin": self.origin,
                "problem": self.reason}  # fmt: skip


def _build_cost(served: _Served) -> float:
    """What building an agent cost, in builds of the budget: one per `BUILD_UNIT` tools, at least one."""
    return max(1.0, served.tools / BUILD_UNIT)


def refused_targets(runtime: RuntimeView, egress: EgressPolicy) -> list[RefusedTarget]:
    """The tools of a view whose target is an address `egress` refuses (a host name is judged when called, on
    what it resolves to)."""
    refused = []
    for tool in runtime.tools:
        if not tool.target.url:
            continue
        reason = egress.target_refusal(tool.target.url)
        if reason is not None:
            origin = origin_of(tool.target.url)
            refused.append(RefusedTarget(runtime.workspace.slug, runtime.agent.slug, tool.tool_name, origin, reason))
    return refused


def _tools_by(entries: Iterable[Any], *fields: str) -> dict[tuple[str, ...], list[str]]:
    """The `tool` of each entry, grouped by the values of `fields`: one log line per group, not one per tool."""
    grouped: dict[tuple[str, ...], list[str]] = {}
    for entry in entries:
        grouped.setdefault(tuple(getattr(entry, field) for field in fields), []).append(entry.tool)
    return grouped


def _warn_refused(targets: list[RefusedTarget]) -> None:
    """One warning per agent and upstream this server may not reach, naming its tools."""
    for (workspace, agent, origin, reason), tools in _tools_by(
        targets, "workspace", "agent", "origin", "reason"
    ).items():
        logger.warning("agent %s/%s: this server's egress policy refuses %s: %s; its calls fail as "
                       "configuration_error until CRANK_EGRESS_ALLOW allows it (tools: %s)", workspace, agent, origin,
                       reason, ", ".join(tools))  # fmt: skip


def _warn_missing(missing: list[MissingSecret]) -> None:
    """One warning per agent and secret that does not resolve here, naming its tools (not one per tool)."""
    for (workspace, agent, reference, problem), tools in _tools_by(
        missing, "workspace", "agent", "reference", "problem"
    ).items():
        logger.warning("agent %s/%s: secret %s does not resolve: %s (tools: %s)", workspace, agent, reference,
                       problem, ", ".join(tools))  # fmt: skip


def _changed_lists(
    before: dict[Any, _Served], after: dict[Any, _Served], keys: Iterable[Any]
) -> list[tuple[Any, tuple[str, ...]]]:
    """Which lists of the agents of `keys` a reload changed (every list, for an agent no longer served or new)."""
    told: list[tuple[Any, tuple[str, ...]]] = []
    for key in keys:
        old, new = before.get(key), after.get(key)
        if old is new:
            continue
        if old is None or new is None:
            either = old or new
            assert either is not None
            told.append((either.catalog.identity, LIST_KINDS))
            continue
        was, now = old.catalog.offers(), new.catalog.offers()
        kinds = tuple(kind for kind in LIST_KINDS if was[kind] != now[kind])
        if kinds:
            told.append((new.catalog.identity, kinds))
    return told


def _freeze_new() -> None:
    """Collect and freeze what came since the last freeze: a young collection, since the frozen generation is not
    walked (the whole heap's is `_settle_heap`)."""
    gc.collect()
    gc.freeze()


def _settle_heap() -> None:
    """Collect what the old catalogs left, then move everything alive to the permanent generation.

    A large catalog is hundreds of thousands of long-lived objects (schemas, validators, pages). Left
    in the collected generations, every full collection walks them all: on a 1,000-tool agent that was
    65 to 85 ms, two or three times a second under load, and it set the p99 of every call
    (docs/benchmarks.md). Frozen objects are still freed when nothing refers to them; `unfreeze`
    first lets the collection reach the cycles of catalogs that were just replaced.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class AgentSource:
    """The published agents of a registry as tools: one catalog per agent, built on its first request, kept while
    it is among the most recently used (`AgentCache`), and rebuilt without restart when it is published again.

    `provide` is its `CatalogProvider` (the agent of the request's path, for the key that
    `authenticate` recognised); `crank.server.GatewayService` serves it."""

    def __init__(
        self,
        registry: Registry,
        client: UpstreamClient,
        *,
        poll_interval: float = 0.25,
        require_keys: bool = True,
        metrics: Metrics | None = None,
        state: StateStore | None = None,
        freeze_heap: bool = True,
        key_cache: KeyCacheLimits | None = None,
        key_list_max_age: float = DEFAULT_KEY_LIST_MAX_AGE,
        listener: ChangeListener | None = None,
        changes: ListChanges | None = None,
        connections: UserConnections | None = None,
        agent_cache: AgentCacheLimits | None = None,
        audit: AuditTrail | None = None,
    ) -> None:
        """`audit`: the trail every tool call is recorded in (`crank.sources.audit_trail`); none: not recorded.
        `connections`: the users' own connections to APIs (`crank.gateway.user_connections`), for tools that act
        as the user through them; none: such tools fail as `configuration_error`. `agent_cache`: how many agents
        stay built, and how many cold ones are built a second (`crank.sources.agent_cache`). `key_cache`: how many
        API keys stay held, and how many are looked up a second (`crank.sources.api_keys`)."""
        self.registry = registry
        self.listener = listener
        self.changes = changes
        """Told which lists of which agents a reload changed, for the clients that listen (`crank.mcp.changes`)."""
        self._listening: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # set by an announced change: the watcher checks now, not at its next poll
        self.keys = ApiKeys(registry, key_cache, list_max_age=key_list_max_age)
        self._failing = False  # the watcher's reads fail: logged once per episode
        self.freeze_heap = freeze_heap
        self.metrics = metrics
        self.audit = audit
        self.state = state or MemoryStore()
        self.limiter = Limiter(self.state, metrics)
        self.admission = WorkspaceAdmission(self.limiter, self.serves)
        self.client = client
        # OAuth tokens to the upstreams (client credentials, exchanges, users' connections), shared by every build
        self.tokens = TokenCache(connections=connections)
        self.renders = RenderGates()  # each workspace's turn at rendering prompts, whichever build serves it
        self.poll_interval = poll_interval
        self.require_keys = require_keys
        self._catalogs: AgentCache[tuple[str, str], _Served] = AgentCache(
            agent_cache, tenant_of=operator.itemgetter(0), cost_of=_build_cost
        )
        """The agents built here, the most recently used ones (built on their first request)."""
        self._index: dict[tuple[str, str], PublishedVersion] = {}
        """Every published agent's version and size, by (workspace, agent): what may be built, and what building it
        costs, without building it."""
        self._told_index: dict[tuple[str, str], PublishedVersion] = {}  # the index as of the last reload that finished
        self._workspaces: frozenset[str] = frozenset()  # the workspaces of the index (what a 404 may say)
        self.policies = WorkspacePolicies(registry, self._publishes)
        """Each workspace's OAuth policy, read when a request first names the workspace."""
        self._generation = -1
        self._unsettled = 0  # catalogs replaced or evicted since the heap was last settled whole (`_settle`)
        self._settled = -math.inf  # when it was (monotonic)
        self._watcher: asyncio.Task[None] | None = None
        self._watching = False  # both the watcher and (if any) the listener run
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that serves requests (and listeners)

    def reload(self) -> None:
        """Follow what changed since this replica's generation (`Registry.changes_since`): the index of published
        agents and the OAuth policies those changes name, the keys held here they touch (`ApiKeys.update`), and the
        agents built here that they touch, rebuilt at once (an agent not built here is built on its next request).
        The first load, and a replica too far behind the change log, read the whole index and policies, and build
        nothing new. What it reads comes first; a read that fails leaves the generation where it was, and the next
        reload tells what this one could not."""
        changes = self.registry.changes_since(self._generation)
        index = self._published_index(changes)
        # Read and applied at once: a revocation, or a policy replaced, is not worth holding back.
        gone = self.keys.update(changes)
        self.policies.update(changes)
        # The index before the rebuild: a cold build that finishes after this compares with it.
        self._index = index
        self._workspaces = frozenset(workspace for workspace, _ in index)
        current = dict(self._catalogs.items())
        touched = [key for key in current if changes.touches_agent(*key)]
        fresh = self._rebuilt(changes, touched, current)
        first = self._generation < 0  # nothing built, no listener yet: nothing to tell
        told = self._told(changes, touched, current, fresh) if self.changes is not None and not first else []
        # A key revoked or a policy replaced: listening streams ask whether their callers still hold.
        recheck = self.changes is not None and bool(gone or changes.everything or changes.workspaces)
        self._generation, self._told_index = changes.generation, index
        if told or recheck:
            self._tell(told, recheck)
        self.keys.confirmed()
        replaced = sum(1 for key in touched if fresh.get(key) is not current[key])
        if self.freeze_heap and (replaced or changes.everything):
            self._settle(changes, replaced=replaced)

    def _published_index(self, changes: Changes) -> dict[tuple[str, str], PublishedVersion]:
        """The published version of every agent after `changes`: those they name read again, the others kept."""
        read = self.registry.published_versions(changes)
        if changes.everything:
            return read
        kept = {key: version for key, version in self._index.items() if not changes.touches_agent(*key)}
        return {**kept, **read}

    def _rebuilt(
        self, changes: Changes, touched: list[tuple[str, str]], current: dict[tuple[str, str], _Served]
    ) -> dict[tuple[str, str], _Served]:
        """The agents built here that `changes` touch, rebuilt from their published versions (kept where version
        and policy are the ones they were built from) and swapped in; those no longer published dropped."""
        fresh: dict[tuple[str, str], _Served] = {}
        for published in self._published_views(changes.generation, touched):
            key = (published.workspace, published.agent)
            known = current[key]
            policy = self._policy_now(published.workspace)
            stamp = (published.version, policy)  # a new policy gives the tools other scopes: built again
            if known.stamp != stamp:
                try:
                    known = self._serve(published, stamp, policy)
                except Exception:
                    logger.exception("agent %s/%s v%s cannot be served", *key, published.version)
            fresh[key] = known
        for key in touched:  # swapped in once every view is read and built (a failed read changes nothing)
            if key in fresh:
                self._catalogs.replace(key, fresh[key])
            else:
                self._catalogs.drop(key)
        return fresh

    def _published_views(self, generation: int, keys: list[tuple[str, str]]) -> Iterator[PublishedAgent]:
        """The published views of these agents, read `_READ_CHUNK` at a time (a replica may hold thousands)."""
        for start in range(0, len(keys), _READ_CHUNK):
            yield from self.registry.published(Changes(generation, agents=frozenset(keys[start : start + _READ_CHUNK])))

    def _told(
        self,
        changes: Changes,
        touched: list[tuple[str, str]],
        current: dict[tuple[str, str], _Served],
        fresh: dict[tuple[str, str], _Served],
    ) -> list[tuple[Any, tuple[str, ...]]]:
        """Which lists of which agents `changes` changed, for their listeners: compared list by list for the agents
        built here that they touched; every list of an agent not built here whose published version changed (its
        listeners, if any, are told to list again)."""
        told = _changed_lists(current, fresh, touched)
        before, index = self._told_index, self._index  # the index its listeners were last told of
        keys = (before.keys() | index.keys()) if changes.everything else changes.agents
        for key in keys:
            if key not in current and before.get(key) != index.get(key):
                told.append((identity_of(agent_labels(*key)), LIST_KINDS))
        return told

    def _settle(self, changes: Changes, *, replaced: int) -> None:
        """Keep full collections off the held catalogs (`_settle_heap`) at a cost that does not grow with them.

        After a reload of some agents (here) or a cold build (`_keep`), what is not frozen yet (the new catalogs,
        the garbage made since the last freeze) is collected and frozen: that walks those objects only. The
        catalogs replaced or evicted were frozen; what they leave in reference cycles waits for a whole settle
        (unfreeze, collect, freeze), which walks every object: after a reload of everything, and, at most once a
        `SETTLE_INTERVAL`, once the catalogs replaced or evicted since the last one reach a quarter of those held
        (`_settle_if_due`, from the watcher too). Its cost per publish or build stays constant however many agents
        a replica holds, and cold builds never run it on the event loop."""
        self._unsettled += replaced
        if changes.everything:
            self._settle_whole()
        elif not self._settle_if_due():
            _freeze_new()

    def _settle_if_due(self) -> bool:
        """A whole settle when enough catalogs were replaced or evicted and the last one is old enough."""
        due = self._unsettled * 4 > len(self._catalogs) and time.monotonic() - self._settled >= SETTLE_INTERVAL
        if due:
            self._settle_whole()
        return due

    def _settle_whole(self) -> None:
        _settle_heap()
        self._unsettled, self._settled = 0, time.monotonic()

    def _tell(self, told: list[tuple[Any, tuple[str, ...]]], recheck: bool = False) -> None:
        """Tell the listeners (and, with `recheck`, have them check their callers again), on the event loop that
        serves them: a reload runs in a worker thread, and the listeners' events and sets belong to the loop."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is not None and running is not loop and not loop.is_closed():
            loop.call_soon_threadsafe(self._deliver, told, recheck)
        else:
            self._deliver(told, recheck)

    def _deliver(self, told: list[tuple[Any, tuple[str, ...]]], recheck: bool) -> None:
        assert self.changes is not None
        try:
            for identity, kinds in told:
                self.changes.changed(identity, kinds)
            if recheck:
                self.changes.recheck()
        except Exception:  # never a reason for a reload to fail: the lists themselves are served already
            logger.exception("telling clients of changed lists failed")

    def _serve(
        self, published: PublishedAgent, stamp: tuple[int, OAuthPolicy | None], policy: OAuthPolicy | None
    ) -> _Served:
        """A published version built, with what `/readyz` says of it; its problems logged once, here."""
        catalog = self._build(published, policy)
        runtime = published.runtime
        secrets = runtime if any(tool.execution_config.auth is not None for tool in runtime.tools) else None
        if secrets is not None:
            _warn_missing(missing_secrets(secrets))
        # A publish made by a CLI with other egress settings: said once here, and in /readyz.
        refused = refused_targets(runtime, self.client.egress)
        _warn_refused(refused)
        tools = ((tool.tool_name, tool.target.url, tool.execution_config) for tool in runtime.tools)
        gaps = missing_credentials(published.workspace, tools)
        return _Served(stamp, catalog, secrets, tuple(refused), tuple(gaps), len(runtime.tools))

    def _build(self, published: PublishedAgent, oauth: OAuthPolicy | None = None) -> Catalog:
        return build_catalog(
            published.runtime, self.client, version=published.version, metrics=self.metrics, state=self.state,
            limiter=self.limiter, oauth=oauth, tokens=self.tokens, renders=self.renders, audit=self.audit,
        )  # fmt: skip

    def _version_of(self, key: tuple[str, str]) -> int | None:
        """The agent's published version in the index; None when it has none."""
        indexed = self._index.get(key)
        return indexed.version if indexed is not None else None

    def _policy_of(self, workspace: str) -> OAuthPolicy | None | Unknown:
        """The workspace's policy as held now (`Unknown`: not held: a build compared with it is not kept)."""
        held = self.policies.held(workspace)
        return held.policy if held is not None and not isinstance(held, Unknown) else held

    def _policy_now(self, workspace: str) -> OAuthPolicy | None:
        """The workspace's policy, read in this worker thread when it is not held (a reload's rebuild)."""
        held = self.policies.read_now(workspace)
        return held.policy if held is not None else None

    def _publishes(self, workspace: str) -> bool:
        """Whether the workspace has an agent published (the index)."""
        return workspace in self._workspaces

    async def _cold(self, key: tuple[str, str], client: str) -> Catalog:
        """An agent not built here: built now (once, however many requests wait; within the build budget of the
        replica, of its workspace and of the `client` address that asks)."""
        load = functools.partial(self._load, key, client)
        indexed = self._index.get(key)
        # Known from the index; a version whose size it does not know (published by an older Crank) costs the
        # rest once built (`_build_cost`).
        cost = max(1.0, indexed.tools / BUILD_UNIT) if indexed is not None else 1.0
        served = await self._catalogs.build(key, load, tenant=key[0], client=client, keep=self._keep, cost=cost)
        return served.catalog

    def _keep(self, key: tuple[str, str], served: _Served, dropped: int) -> bool:
        """A cold build just put in the cache, `dropped` agents pushed out for it: its objects collected and frozen
        (a young collection: the new catalog and what came since the last freeze), and whether it is still what
        the index and the policy say to serve (a reload may have moved on while it was built)."""
        if self.freeze_heap:
            self._unsettled += dropped
            _freeze_new()
        return served.stamp == (self._version_of(key), self._policy_of(key[0]))

    async def _load(self, key: tuple[str, str], client: str) -> _Served:
        """The agent's published version and its workspace's policy, read and built in a worker thread. A reload that
        moves the replica's index (or the workspace's policy) meanwhile has it read again: what is kept is never
        older than the index, and one newer than it (a publish the watcher has not read yet) is what the coming
        reload finds in place."""
        wanted = Changes(self._generation, agents=frozenset({key}))
        for _ in range(_LOAD_ATTEMPTS):
            held = await self.policies.read(key[0], client)
            policy = held.policy if held is not None else None
            known = (self._version_of(key), self._policy_of(key[0]))
            found = await registry_read(self.registry.published, wanted, what="read this agent")
            if not found:
                raise CatalogNotFoundError(f"Workspace {key[0]!r} has no published agent {key[1]!r}")
            published = found[0]
            try:
                served = await run_in_threadpool(self._serve, published, (published.version, policy), policy)
            except Exception:
                logger.exception("agent %s/%s v%s cannot be served", *key, published.version)
                raise CatalogNotFoundError(f"Agent {key[0]}/{key[1]} cannot be served now") from None
            if (self._version_of(key), self._policy_of(key[0])) == known:
                break
        return served

    def serves(self, workspace: str, agent: str) -> bool:
        """Whether `workspace` has `agent` published (built here or not)."""
        return (workspace, agent) in self._index

    def missing_credentials(self) -> list[MissingCredential]:
        """The security schemes the tools built here require with no credential given (their calls get the
        upstream's 401): `/readyz` names each with its tools and how to give it."""
        return [missing for served in self._catalogs.values() for missing in served.gaps]

    async def oauth_policy(self, workspace: str, client: str) -> OAuthPolicy | None:
        """The workspace's OAuth policy as this replica serves it (the connect page signs its users in with it), read
        when it is not held (within the `client` address's share of the budget)."""
        held = await self.policies.read(workspace, client)
        return held.policy if held is not None else None

    async def connection_auth(self, workspace: str, scheme: str) -> AuthConfig | None:
        """The credentials through which a published tool of the workspace acts as its users' own connection to
        the scheme's API (`user_connection`), for the connect page; None when no published tool does. Agents of
        the workspace not built here are built for it (within the build budget: 503 past it)."""
        found = self._connection_auth(workspace, scheme)
        if found is None:
            for key in [key for key in self._index if key[0] == workspace][:_CONNECT_BUILDS]:
                if self._catalogs.peek(key) is None:
                    with contextlib.suppress(CatalogNotFoundError):  # one agent that cannot be built: the next
                        await self._cold(key, f"connect:{workspace}")
            found = self._connection_auth(workspace, scheme)
        return found

    def _connection_auth(self, workspace: str, scheme: str) -> AuthConfig | None:
        for key, served in self._catalogs.items():
            if key[0] != workspace or served.secrets is None:
                continue
            for tool in served.secrets.tools:
                auth = tool.execution_config.auth
                if auth is not None and auth.type == "user_connection" and auth.scheme == scheme:
                    return auth
        return None

    def refused_targets(self) -> list[RefusedTarget]:
        """The tools built here whose target address this server's egress policy refuses (their calls would fail
        as `configuration_error`): a publish checked under another process's settings."""
        return [target for served in self._catalogs.values() for target in served.refused]

    def missing_secrets(self) -> list[MissingSecret]:
        """The secret references of tools built here that do not resolve on this host now (checked on each
        call: a secret file mounted later counts as soon as it is there)."""
        views = (served.secrets for served in self._catalogs.values() if served.secrets is not None)
        return [missing for view in views for missing in missing_secrets(view)]

    async def watch(self) -> None:
        """Poll the registry's generation; reload on a change. Each successful read confirms the key list
        (`key_list_max_age`). A registry that does not answer holds this loop, never the requests.

        An announced change ends the wait at once. Announcements that come while a check or reload runs
        set the one event again: a burst of them costs one more check after the current one, not one each."""
        while True:
            self._wake.clear()
            try:
                if await run_in_threadpool(self.registry.generation) != self._generation:
                    await run_in_threadpool(self.reload)
                else:
                    self.keys.confirmed()
                    if self.freeze_heap:  # evictions by cold builds count too, with no publish to run it
                        await run_in_threadpool(self._settle_if_due)
                if self._failing:
                    self._failing = False
                    logger.info("the registry answers again")
            except DATABASE_ERRORS as exc:
                self._watch_failed(describe_database_error(exc))
            except Exception:
                logger.exception("reading the registry failed; serving the catalogs already loaded")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    def _announced(self, generation: int | None) -> None:
        """A change announced by the listener (None: maybe missed some, check)."""
        if generation is None or generation > self._generation:
            self._wake.set()

    def _watch_failed(self, problem: str) -> None:
        """An unreachable registry is logged once per episode (a refusing one fails every poll)."""
        if not self._failing:
            self._failing = True
            logger.warning("%s; serving the catalogs already loaded", problem)

    def ensure_watching(self) -> None:
        """Start the watcher (and the listener) unless they run; called by every request, so the common case,
        both running, is one test: `_watching` is set when they start and cleared when either ends."""
        if self._watching:
            return
        loop = self._loop = asyncio.get_running_loop()
        watcher, listening = self._watcher, self._listening
        if watcher is None or watcher.done():
            self._watcher = watcher = loop.create_task(self.watch())
            watcher.add_done_callback(self._stopped_watching)
        if self.listener is not None and (listening is None or listening.done()):
            self._listening = listening = loop.create_task(self.listener.run(self._announced))
            listening.add_done_callback(self._stopped_watching)
        self._watching = True

    def _stopped_watching(self, _task: asyncio.Task[None]) -> None:
        self._watching = False

    async def aclose(self) -> None:
        """Stop watching and listening, and close the upstream connections."""
        for task in (self._watcher, self._listening):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.client.aclose()
        await self.state.aclose()

    def provide(self, scope: Scope) -> Catalog | Awaitable[Catalog]:
        """The `CatalogProvider` of the gateway's endpoint: the agent of the request's path, for its caller: at once
        when it is built here, else built first (`_cold`)."""
        if not self._watching:  # the watcher stopped, or never started: start it (a method call only then)
            self.ensure_watching()
        params = scope.get("path_params", {})
        workspace, agent = params.get("workspace", ""), params.get("agent", "")
        key_scope: KeyScope | None = scope.get(AUTH_SCOPE_KEY) if self.require_keys else None
        if (
            key_scope is not None and key_scope.anonymous and key_scope.workspace == workspace
        ):  # lazy sign-in: listing open, calls ask (401)
            key_scope = None
        elif self.require_keys and (key_scope is None or key_scope.workspace != workspace):
            raise CatalogUnauthorizedError(workspace)  # a key never opens another workspace, nor says what is there
        # An agent the key may not use is answered as one that does not exist: a key limited to some agents
        # cannot learn which others its workspace has.
        if key_scope is not None and not key_scope.allows(workspace, agent):
            raise CatalogNotFoundError(self._not_found(workspace, agent, key_scope))
        key = (workspace, agent)
        entry = self._catalogs.get(key)
        if entry is not None:
            return entry.catalog
        if key not in self._index:  # nothing published there: no registry read, whatever the path
            raise CatalogNotFoundError(self._not_found(workspace, agent, key_scope))
        # Who asks, for the build budget: a caller without credentials by its address (one client must not spend
        # every workspace's share); a key or token holder by its workspace, whose share already bounds it.
        return self._cold(key, client_address(scope) if key_scope is None else workspace)

    def _not_found(self, workspace: str, agent: str, key_scope: KeyScope | None) -> str:
        """What a request to no agent is told: the URL form, and which part is unknown where the credentials may
        know it (a key of all the workspace's agents, or none needed), never for a key limited to some agents."""
        form = "MCP endpoints are at /mcp/v1/{workspace}/{agent}"
        if key_scope is not None and key_scope.agents is not None:
            return f"No MCP endpoint at this path ({form})"
        if key_scope is None and workspace not in self._workspaces:
            return f"No workspace {workspace!r} serves agents here ({form})"
        return f"Workspace {workspace!r} has no published agent {agent!r} ({form})"
