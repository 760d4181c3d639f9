"""Authentication's one seam, and the grammar it answers in.

An `Authenticator` turns a request's bearer token into a `Principal` (who calls, how that was proven, what the
credentials grant), or refuses it with an `AuthChallengeError`. API keys, JWT access tokens and introspected
opaque tokens are implementations of the same contract (`crank.sources.access.GatewayAuthenticator` and
`ResourceAuthenticator`, over `crank.gateway.tokens.TokenVerifier`); `crank.wire.middleware.BearerAuth` asks
it once per request and leaves the principal in `scope["crank.auth"]`, and the sources decide what it opens.

This module also owns what the challenges and the protected resource metadata look like on the wire
(RFC 6750 §3, RFC 9728 §3 and §5.1), for every endpoint that offers OAuth.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol
from urllib.parse import urlsplit

from crank.exceptions import AuthChallengeError
from crank.types import JSONObject, Scope

__all__ = [
    "PROTECTED_RESOURCE_PATH",
    "AuthMethod",
    "Authenticator",
    "Principal",
    "challenge_header",
    "metadata_path",
    "protected_resource_metadata",
    "same_resource",
]

AuthMethod = Literal["api_key", "jwt", "introspection", "anonymous"]

PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"
"""RFC 9728 §3.1: the metadata of the resource at `https://host/path` is at this path plus `/path`."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who calls, as an `Authenticator` proved it: the one typed contract between authentication and what the
    endpoint and the sources do with a request (which agents and tools it opens, its limits, its logs, what its
    idempotency keys and confirmation tokens are bound to).

    `scopes` None means the credentials are not scope-limited (an API key); a token's granted scopes otherwise.
    `agents` None means every agent of `workspace`."""

    workspace: str | None
    agents: frozenset[str] | None = None
    id: str = ""
    """What limits count and bindings key on: an API key's id, or a token's issuer and subject."""
    method: AuthMethod = "api_key"
    subject: str | None = None
    client_id: str | None = None
    issuer: str | None = None
    scopes: frozenset[str] | None = None
    expires_at: float | None = None
    """When the credentials stop being valid (epoch seconds); None: when revoked."""
    token: str | None = field(default=None, repr=False, compare=False)
    """An access token's own text, for a tool that acts as the user (the subject token of a token exchange): never
    logged, never sent upstream as it is. None for an API key or a caller without credentials."""

    anonymous: bool = field(init=False, repr=False, compare=False)
    """A caller without credentials (`method` anonymous: lazy sign-in's): an attribute, not a property, so that
    the hot paths that ask it (every gateway call and limit) pay one attribute read."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "anonymous", self.method == "anonymous")

    def lacks(self, needed: frozenset[str]) -> bool:
        """Whether a scope-limited principal misses one of `needed` (an anonymous one misses every one)."""
        if self.anonymous:
            return bool(needed)
        return self.scopes is not None and not needed <= self.scopes

    def log_fields(self) -> dict[str, str]:
        """The subject and client id for log lines (never a token)."""
        fields: dict[str, str] = {"auth": self.method}
        if self.subject is not None:
            fields["subject"] = self.subject
        if self.client_id is not None:
            fields["client_id"] = self.client_id
        return fields


class Authenticator(Protocol):
    """Who a request's bearer token proves, in two steps so that the common request pays for a dictionary look-up
    only:

    - `authenticate` (synchronous): the principal when it is known at once (a held API key, a token validated
      before and not expired), None when it takes a slower look, or `AuthChallengeError` to refuse. With no token
      (None) it refuses, answers an anonymous principal (`method="anonymous"`) where that is allowed, or None when
      it cannot tell yet (the gateway has not read the workspace's policy).
    - `verify`: the slower look (a registry look-up, a signature check, an introspection call), with the token or
      None: a principal, or `AuthChallengeError`.

    Either may raise `DependencyUnavailableError` (503) when it cannot tell."""

    def authenticate(self, scope: Scope, token: str | None) -> Principal | None: ...

    def verify(self, scope: Scope, token: str | None) -> Awaitable[Principal]: ...


def _quoted(value: str) -> str:
    """An auth-param value (RFC 9110 §11.2 quoted-string): quotes and backslashes escaped, controls dropped."""
    cleaned = "".join(char for char in value if char >= " " and char != "\x7f")
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


def challenge_header(
    refusal: AuthChallengeError | None = None, *, resource_metadata: str | None = None, realm: str = "crank"
) -> bytes:
    """The `WWW-Authenticate: Bearer ...` value of a 401 or 403 (RFC 6750 §3, RFC 9728 §5.1): the realm, the
    metadata URL, every scope the request needs, and the error with its description."""
    params = [f"realm={_quoted(realm)}"]
    if resource_metadata is not None:
        params.append(f"resource_metadata={_quoted(resource_metadata)}")
    if refusal is not None:
        if refusal.scopes:
            params.append(f"scope={_quoted(' '.join(refusal.scopes))}")
        if refusal.error is not None:
            params.append(f"error={_quoted(refusal.error)}")
            params.append(f"error_description={_quoted(refusal.description)}")
    return ("Bearer " + ", ".join(params)).encode("latin-1", "replace")


def metadata_path(resource: str) -> str:
    """Where the metadata of `resource` is served on its host: the well-known path plus the resource's path."""
    path = urlsplit(resource).path.rstrip("/")
    return PROTECTED_RESOURCE_PATH + path


def protected_resource_metadata(
    resource: str,
    authorization_servers: Sequence[str],
    scopes_supported: Sequence[str],
    *,
    resource_name: str | None = None,
) -> JSONObject:
    """The RFC 9728 document of one protected resource (an MCP endpoint); tokens go in the header only. No scopes
    are listed when it needs none (an empty list makes some clients ask for an empty scope, which servers refuse)."""
    document: JSONObject = {"resource": resource, "authorization_servers": list(authorization_servers)}
    if scopes_supported:
        document["scopes_supported"] = list(scopes_supported)
    document["bearer_methods_supported"] = ["header"]
    if resource_name is not None:
        document["resource_name"] = resource_name
    return document


def same_resource(audience: str, resource: str) -> bool:
    """Whether a token's audience names `resource`, with or without a trailing slash (RFC 8707; the most common
    connector failure is a slash one side adds)."""
    return audience.rstrip("/") == resource.rstrip("/")
