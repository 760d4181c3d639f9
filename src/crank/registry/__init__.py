"""The registry: workspaces, operations, agents and their published versions (SQLAlchemy + Alembic)."""

from __future__ import annotations

from crank.registry.database import migrate, open_engine
from crank.registry.service import (
    AgentDraft,
    KeyScope,
    PublishedAgent,
    Registry,
    RegistryConflictError,
    RegistryError,
    RegistryNotFoundError,
    VersionInfo,
    key_digest,
    tool_name_of,
)

__all__ = [
    "AgentDraft",
    "KeyScope",
    "PublishedAgent",
    "Registry",
    "RegistryConflictError",
    "RegistryError",
    "RegistryNotFoundError",
    "VersionInfo",
    "key_digest",
    "migrate",
    "open_engine",
    "tool_name_of",
]
