"""API keys: a workspace's keys (only their digests are kept), their limits, and each key's scope as the MCP side
reads it (`KeyScope`, a `Principal`)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from crank.exceptions import RegistryNotFoundError
from crank.registry.base import RegistryBase, limits_json, limits_of
from crank.registry.change_log import Change
from crank.registry.models import ApiKey, Workspace
from crank.registry.runtime import Limits
from crank.types import JSONObject
from crank.wire.auth import Principal

__all__ = ["API_KEY_PREFIX", "ApiKeyInfo", "ApiKeyStore", "KeyScope", "key_digest"]

API_KEY_PREFIX: Final = "crk_"
"""Every API key starts with it: an authenticator tells a key from an OAuth access token by its shape."""


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyScope(Principal):
    """A gateway principal: where its credentials are valid (one workspace, and all its agents (None) or some of
    them) and the limits the gateway holds its requests to (docs/gateway.md, Rate limits and quotas). An API
    key's, or an OAuth token's (`method` jwt or introspection, limited by `id`: its issuer and subject)."""

    limits: Limits | None = None
    """Its tool calls: a key's own limits, else its workspace's `key_limits` (a token's: per subject); None: no
    limit."""
    workspace_limits: Limits | None = None
    """Every request to the workspace, whoever sends it; None: no limit."""

    def allows(self, workspace: str, agent: str) -> bool:
        return workspace == self.workspace and (self.agents is None or agent in self.agents)


@dataclass(frozen=True)
class ApiKeyInfo:
    """What the registry can tell of a key without the key itself (it keeps only a digest)."""

    id: str
    workspace: str
    agents: list[str] | None
    created_at: str
    limits: JSONObject | None = None
    """The key's own limits (`Limits` as JSON); None: its workspace's `key_limits`."""


class ApiKeyStore(RegistryBase):
    """The registry's API keys: made (shown once), limited, revoked, and read by digest."""

    def create_api_key(
        self, workspace: str, agents: Iterable[str] | None = None, *, limits: Limits | None = None
    ) -> str:
        """A new key for the workspace (optionally only some agents, with limits of its own). Shown once: only
        its digest is kept."""
        return self.issue_api_key(workspace, agents, limits=limits)[1]

    def issue_api_key(
        self, workspace: str, agents: Iterable[str] | None = None, *, limits: Limits | None = None
    ) -> tuple[ApiKeyInfo, str]:
        """A new key and what the registry will know of it (its id names it in `api_key_infos` and
        `delete_api_key`)."""
        key = API_KEY_PREFIX + secrets.token_urlsafe(32)
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            scope = {"agents": sorted(agents)} if agents is not None else None
            row = ApiKey(workspace_id=ws.id, digest=key_digest(key), agents=scope, limits=limits_json(limits))
            session.add(row)
            session.flush()
            info = _key_info(row, workspace)
            self._bump(session, Change("key", ws.slug, row.digest))
        return info, key

    def api_key_infos(self, workspace: str) -> list[ApiKeyInfo]:
        """The workspace's keys, oldest first (ids, scopes and dates; never a key)."""
        with Session(self.engine) as session:
            ws = self._workspace(session, workspace)
            rows = session.scalars(select(ApiKey).filter_by(workspace_id=ws.id).order_by(ApiKey.created_at))
            return [_key_info(row, workspace) for row in rows]

    def set_api_key_limits(self, workspace: str, key_id: str, limits: Limits | None) -> ApiKeyInfo:
        """Give a key limits of its own (None: its workspace's `key_limits` again); replicas hold it to them
        when they reload (like a publish)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            row = session.scalar(select(ApiKey).filter_by(workspace_id=ws.id, id=key_id))
            if row is None:
                raise RegistryNotFoundError(f"workspace {workspace!r} has no API key {key_id!r}")
            row.limits = limits_json(limits)
            self._bump(session, Change("key", ws.slug, row.digest))
            return _key_info(row, workspace)

    def delete_api_key(self, workspace: str, key_id: str) -> None:
        """Revoke a key by its id; replicas stop accepting it when they reload (like a publish)."""
        with Session(self._writer) as session, session.begin():
            ws = self._workspace(session, workspace)
            row = session.scalar(select(ApiKey).filter_by(workspace_id=ws.id, id=key_id))
            if row is None:
                raise RegistryNotFoundError(f"workspace {workspace!r} has no API key {key_id!r}")
            session.delete(row)
            self._bump(session, Change("key", ws.slug, row.digest))

    def revoke_api_key(self, key: str) -> None:
        with Session(self._writer) as session, session.begin():
            row = session.scalar(select(ApiKey).filter_by(digest=key_digest(key)))
            if row is None:
                raise RegistryNotFoundError("no such API key")
            workspace = session.scalar(select(Workspace.slug).filter_by(id=row.workspace_id))
            session.delete(row)
            self._bump(session, Change("key", workspace or "", row.digest))

    def api_key(self, digest: str) -> KeyScope | None:
        """One key's scope by its digest, or None when the registry has no such key."""
        query = _KEY_SCOPES.where(ApiKey.digest == digest)
        with Session(self.engine) as session:
            row: Any = session.execute(query).first()
        return None if row is None else _key_scope(*row[1:])

    def api_keys(self, digests: Collection[str] | None = None) -> dict[str, KeyScope]:
        """The scopes of these keys (by digest) that the registry has, by digest; every key's without `digests`
        (a replica reads the keys it holds that a change touched, `ApiKeys.update`)."""
        query = _KEY_SCOPES if digests is None else _KEY_SCOPES.where(ApiKey.digest.in_(digests))
        with Session(self.engine) as session:
            rows: list[Any] = list(session.execute(query).all())
        return {row[0]: _key_scope(*row[1:]) for row in rows}


def _key_info(row: ApiKey, workspace: str) -> ApiKeyInfo:
    agents = list(row.agents["agents"]) if row.agents is not None else None
    return ApiKeyInfo(row.id, workspace, agents, row.created_at.isoformat(), row.limits)


# A key's scope: its digest, id, workspace, agents, own limits, and its workspace's limits and key limits.
_KEY_SCOPES = select(
    ApiKey.digest, ApiKey.id, Workspace.slug, ApiKey.agents, ApiKey.limits, Workspace.limits, Workspace.key_limits
).join(Workspace, Workspace.id == ApiKey.workspace_id)


def _key_scope(
    key_id: str,
    workspace: str,
    scope: JSONObject | None,
    limits: JSONObject | None,
    workspace_limits: JSONObject | None,
    key_limits: JSONObject | None,
) -> KeyScope:
    """A key's scope from its row: its workspace, the agents it is limited to (None: all of them), its limits
    (its own, else its workspace's for each key) and its workspace's."""
    return KeyScope(
        workspace,
        frozenset(scope["agents"]) if scope is not None else None,
        id=key_id,
        subject=key_id,
        limits=limits_of(limits if limits is not None else key_limits),
        workspace_limits=limits_of(workspace_limits),
    )
