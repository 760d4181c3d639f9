"""The registry: workspaces, operations, agents and their published versions (SQLAlchemy + Alembic)."""

from __future__ import annotations

from crank.registry.database import default_url, migrate, open_engine
from crank.registry.service import PublishedAgent, Registry, RegistryError

__all__ = ["PublishedAgent", "Registry", "RegistryError", "default_url", "migrate", "open_engine"]
