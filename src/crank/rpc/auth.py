"""Who is calling: the roles of a request. Pluggable; a bearer-token table by default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from crank.types import Scope
from crank.wire.asgi import header
from crank.wire.http import bearer_token

__all__ = ["BearerTokenRoles", "RoleResolver"]


class RoleResolver(Protocol):
    async def __call__(self, scope: Scope) -> frozenset[str]: ...


class BearerTokenRoles:
    """Roles by `Authorization: Bearer <token>`; no or an unknown token has no roles."""

    def __init__(self, tokens: Mapping[str, Iterable[str]]) -> None:
        self._tokens = {token: frozenset(roles) for token, roles in tokens.items()}

    async def __call__(self, scope: Scope) -> frozenset[str]:
        token = bearer_token(header(scope, b"authorization"))
        return frozenset() if token is None else self._tokens.get(token, frozenset())
