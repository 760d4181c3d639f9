"""What the admin API and the declarative catalog file accept, as pydantic models.

The same models check an admin request body and a `crank apply` file, so a mistake gets the same
message with its place (`agents.support.bindings[0].operation: Field required`) either way. They also
give the admin API's OpenAPI document its schemas.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crank.mcp.tools import TOOL_NAME_PATTERN
from crank.registry.runtime import (
    MAX_DOCUMENTS,
    MAX_PROMPTS,
    AgentDocument,
    AgentPrompt,
    Limits,
    OAuthPolicy,
    ResourceBinding,
    SchemeCredential,
    check_agent_media,
)
from crank.schema import problems_of
from crank.schema.compact import CompactSettings

__all__ = [
    "AgentIn",
    "ApiKeyIn",
    "ApiKeyLimitsIn",
    "BindingIn",
    "CatalogFile",
    "ImportIn",
    "OperationIn",
    "OperationPatch",
    "RollbackIn",
    "SourceIn",
    "WorkspaceIn",
    "WorkspaceRef",
    "problems",
]


def problems(error: ValidationError, *, whole: str) -> str:
    """`place: message` for each problem, `; `-separated; `whole` names a problem of the value as a whole."""
    return "; ".join(f"{problem.dotted or whole}: {problem.message}" for problem in problems_of(error))


SLUG = r"^[a-z0-9][a-z0-9_-]{0,63}$"


_FORMAT = (
    "Default result format of the tool: json, pretty_json, markdown, plain or toon (checked at publish); "
    "a request's X-Mcp-Format header or format query parameter still wins."
)

_COMPACT = (
    "How tools are compacted at publish (docs/gateway.md, Compaction): only the settings to change; "
    "an operation's win over its agent's, an agent's over its workspace's."
)


_LIMITS = (
    "Rate limit ({{calls, window}} in seconds: a fixed window from its first call) and quota ({{calls, period}}: "
    "hour, day or month, UTC) of {what} (docs/gateway.md, Rate limits and quotas)."
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkspaceIn(_Model):
    name: str = Field(min_length=1, max_length=200)
    default_language: str = Field("en", min_length=2, max_length=16)
    token_budget: int | None = Field(None, ge=1, description="Default token budget of its agents (4096).")
    compact: CompactSettings | None = Field(None, description=_COMPACT)
    limits: Limits | None = Field(None, description=_LIMITS.format(what="every request to the workspace"))
    key_limits: Limits | None = Field(
        None, description=_LIMITS.format(what="each API key's tool calls, for keys without limits of their own")
    )


class WorkspaceRef(WorkspaceIn):
    slug: str = Field(pattern=SLUG, description="Lower-case letters, digits, '-' and '_'; part of the MCP URL.")
    oauth: OAuthPolicy | None = Field(
        None, description="The OAuth access tokens it takes besides (or instead of) API keys; none: API keys only."
    )
    credentials: dict[str, SchemeCredential] | None = Field(
        None, description="Upstream credentials by security scheme of its API descriptions (references only)."
    )


class OperationIn(BaseModel):
    """An operation draft. Fields beyond these (samples, notes, import metadata) are kept in the draft and
    never reach the runtime view."""

    model_config = ConfigDict(extra="allow")

    protocol: Literal["http", "jsonrpc"]
    target: dict[str, Any] = Field(description='http: {"method", "url"}; jsonrpc: {"url", "method"}.')
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    input_mapping: list[dict[str, Any]] | None = None
    output_mapping: dict[str, Any] | None = None
    execution_config: dict[str, Any] | None = Field(
        None, description="timeout, retries, idempotent, auth (secret references), forward_headers."
    )
    annotations: dict[str, Any] | None = None
    format: str | None = Field(None, description=_FORMAT)
    compact: CompactSettings | None = Field(None, description=_COMPACT)


class OperationPatch(BaseModel):
    """An operation in a catalog file: complete, or only the fields to change of one imported from `sources`
    (its output mapping and schema, say). Checked as an `OperationIn` once merged."""

    model_config = ConfigDict(extra="allow")

    protocol: Literal["http", "jsonrpc"] | None = None
    target: dict[str, Any] | None = None


class BindingIn(_Model):
    operation: str = Field(min_length=1)
    tool_name: str | None = Field(None, pattern=TOOL_NAME_PATTERN.pattern, description="Default: the operation's name.")
    title: str | None = None
    description: str | None = None
    annotations: dict[str, Any] | None = None
    translations: dict[str, dict[str, str]] | None = Field(None, description="language -> {title, description}.")
    format: str | None = Field(None, description=_FORMAT + " Overrides the operation's.")
    resource: bool | ResourceBinding | None = Field(
        None,
        description="A GET operation offered as a resource template too: true for the defaults, or "
        "{uri_template, mime_type} (docs/gateway.md, Resources and prompts).",
    )


class AgentIn(_Model):
    description: str | None = None
    bindings: list[BindingIn] = Field(default_factory=list)
    token_budget: int | None = Field(None, ge=1, description="Token budget of the catalog (the workspace's, 4096).")
    mode: Literal["direct", "discovery"] | None = Field(
        None,
        description="direct (the default): each binding is a tool. discovery: three fixed tools search the "
        "operations, show one's input schema and call it; for agents over any token budget.",
    )
    compact: CompactSettings | None = Field(None, description=_COMPACT)
    limits: Limits | None = Field(
        None, description=_LIMITS.format(what="the agent's tool calls, all keys together") + " Published with it."
    )
    documents: list[AgentDocument] = Field(
        default_factory=list,
        max_length=MAX_DOCUMENTS,
        description="Static documents offered as resources (the API's guide, say).",
    )
    prompts: list[AgentPrompt] = Field(
        default_factory=list,
        max_length=MAX_PROMPTS,
        description="Stored prompt templates, rendered by a sandboxed Jinja2.",
    )

    @model_validator(mode="after")
    def _media(self) -> AgentIn:
        check_agent_media(self.documents, self.prompts)
        return self


class SourceIn(_Model):
    """Operations imported from an API description (OpenAPI 3.0/3.1 or OpenRPC)."""

    openapi: str | None = Field(None, description="Path (relative to the file) or URL of an OpenAPI document.")
    openrpc: str | None = Field(None, description="Path (relative to the file) or URL of an OpenRPC document.")
    base_url: str | None = Field(None, description="Overrides the document's server URL.")
    include: list[str] | None = Field(None, description="Patterns of operation names, operationIds or tags.")


class ImportIn(_Model):
    """An import through the admin API: a URL, or the document itself."""

    format: Literal["openapi", "openrpc"]
    url: str | None = None
    document: dict[str, Any] | None = None
    base_url: str | None = None
    include: list[str] | None = None
    republish: bool = Field(True, description="Publish again the agents that bind a changed or removed operation.")
    dry_run: bool = Field(False, description="Only report what would change; write nothing.")
    strict: bool = Field(False, description="Refuse the document when an operation cannot be called (default: skip "
                         "it and report it under `skipped`).")  # fmt: skip


class RollbackIn(_Model):
    version: int = Field(ge=1)


class ApiKeyIn(_Model):
    agents: list[str] | None = Field(None, description="Limit the key to these agents (default: all).")
    limits: Limits | None = Field(
        None, description=_LIMITS.format(what="the key's tool calls") + " Default: its workspace's key_limits."
    )


class ApiKeyLimitsIn(_Model):
    limits: Limits | None = Field(
        description=_LIMITS.format(what="the key's tool calls") + " null: its workspace's key_limits again."
    )


class CatalogFile(_Model):
    """A declarative catalog (`crank apply FILE`): one workspace, its operations and agents."""

    workspace: WorkspaceRef
    sources: list[SourceIn] = Field(default_factory=list)
    operations: dict[str, OperationPatch] = Field(
        default_factory=dict, description="Operations written here, or changes to imported ones (merged by field)."
    )
    agents: dict[str, AgentIn] = Field(default_factory=dict)
