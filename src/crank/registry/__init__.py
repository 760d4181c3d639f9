"""The registry: workspaces, operations, agents and their published versions (SQLAlchemy + Alembic), and
the typed runtime view a published version holds (`crank.registry.runtime`)."""

from __future__ import annotations

from crank.registry.database import DATABASE_ERRORS, describe_database_error, migrate, open_engine
from crank.registry.runtime import FORMAT_VERSION, RuntimeTool, RuntimeView, load_runtime, tool_from_spec
from crank.registry.service import (
    API_KEY_PREFIX,
    AgentDraft,
    ApiKeyInfo,
    KeyScope,
    OperationSummary,
    PublishedAgent,
    Registry,
    VersionInfo,
    WorkspaceOAuth,
    key_digest,
    tool_name_of,
)

__all__ = [
    "API_KEY_PREFIX",
    "DATABASE_ERRORS",
    "FORMAT_VERSION",
    "AgentDraft",
    "ApiKeyInfo",
    "OperationSummary",
    "KeyScope",
    "PublishedAgent",
    "Registry",
    "RuntimeTool",
    "RuntimeView",
    "VersionInfo",
    "WorkspaceOAuth",
    "describe_database_error",
    "key_digest",
    "load_runtime",
    "migrate",
    "open_engine",
    "tool_from_spec",
    "tool_name_of",
]
