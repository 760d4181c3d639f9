"""Who is calling: the roles of a request. Pluggable; a bearer-token table by default."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from crank.types import Scope

__all__ = ["BearerTokenRoles", "RoleResolver"]


class RoleResolver(Protocol):
    async def __call__(self, scope: Scope) -> frozenset[str]: ...


class BearerTokenRoles:
    """Roles by `Authorization: Bearer <token>`; no or an unknown token has no roles."""

    def __init__(self, tokens: Mapping[str, Iterable[str]]) -> None:
        self._tokens = {token: frozenset(roles) for token, roles in tokens.items()}

    async def __call__(self, scope: Scope) -> frozenset[str]:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return self._tokens.get(token.strip(), frozenset())
        return frozenset()
