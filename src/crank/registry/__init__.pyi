from .change_log import Change, Changes
from .database import DATABASE_ERRORS, describe_database_error, migrate, open_engine
from .keys import API_KEY_PREFIX, ApiKeyInfo, KeyScope, key_digest
from .publishing import VersionInfo, tool_name_of
from .runtime import FORMAT_VERSION, RuntimeTool, RuntimeView, load_runtime, tool_from_spec
from .service import AgentDraft, OperationSummary, PublishedAgent, PublishedVersion, Registry, WorkspaceOAuth

__all__ = [
    "API_KEY_PREFIX",
    "AgentDraft",
    "ApiKeyInfo",
    "Change",
    "Changes",
    "DATABASE_ERRORS",
    "FORMAT_VERSION",
    "KeyScope",
    "OperationSummary",
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
