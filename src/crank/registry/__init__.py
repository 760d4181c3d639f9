"""The registry: workspaces, operations, agents and their published versions (SQLAlchemy + Alembic), and
the typed runtime view a published version holds (`crank.registry.runtime`)."""

from __future__ import annotations

from crank.registry.change_log import Change, Changes
from crank.registry.database import DATABASE_ERRORS, describe_database_error, migrate, open_engine
from crank.registry.keys import API_KEY_PREFIX, ApiKeyInfo, KeyScope, key_digest
from crank.registry.publishing import VersionInfo, tool_name_of
from crank.registry.runtime import FORMAT_VERSION, RuntimeTool, RuntimeView, load_runtime, tool_from_spec
from crank.registry.service import (
    AgentDraft,
    OperationSummary,
    PublishedAgent,
    PublishedVersion,
    Registry,
    WorkspaceOAuth,
)

__all__ = [
    "API_KEY_PREFIX",
    "DATABASE_ERRORS",
    "FORMAT_VERSION",
    "AgentDraft",
    "Change",
    "Changes",
    "ApiKeyInfo",
    "OperationSummary",
    "KeyScope",
    "PublishedAgent",
    "PublishedVersion",
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
