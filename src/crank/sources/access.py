"""Who may use a published agent: the gateway's `Authenticator` (`crank.wire.auth`), and the protected resource
metadata of its agents.

A workspace takes API keys, OAuth access tokens, or both (`OAuthPolicy.credentials`). A token is valid for an
agent when a trusted issuer signed it (or introspection says it is active), it has not expired, and its audience
is the agent's resource: the workspace's audience base URL (else the server's public URL) plus
`/mcp/v1/{workspace}/{agent}`. Its principal carries its subject, client and scopes; the agent's scopes are
checked here (403 `insufficient_scope`), each tool's by the MCP core (`Tool.required_scopes`).
"""

from __future__ import annotations

import logging
import time
from typing import Final
from urllib.parse import urlsplit

from crank.exceptions import AuthChallengeError, DependencyUnavailableError
from crank.gateway.tokens import TokenClaims, TokenVerifier
from crank.registry import KeyScope, WorkspaceOAuth
from crank.registry.runtime import Limits, OAuthPolicy
from crank.sources.agents import AgentSource
from crank.types import JSONObject, Scope
from crank.wire.auth import Principal, metadata_path, protected_resource_metadata, same_resource
from crank.wire.notices import ThrottledLog

__all__ = ["AGENT_PATH", "UNAUTHORIZED_MESSAGE", "GatewayAuthenticator", "ResourceAuthenticator", "token_principal"]

logger = logging.getLogger("crank.gateway.auth")
_notices = ThrottledLog(logger)

AGENT_PATH: Final = "/mcp/v1/{workspace}/{agent}"
UNAUTHORIZED_MESSAGE: Final = "A valid API key or access token is required: Authorization: Bearer <token>"
UNAUTHORIZED_TOKEN_MESSAGE: Final = "A valid access token is required: Authorization: Bearer <token>"
_MAX_PRINCIPALS = 10_000


class GatewayAuthenticator:
    """API keys and OAuth access tokens for the agents of an `AgentSource`."""

    def __init__(self, source: AgentSource, verifier: TokenVerifier, *, public_url: str | None = None) -> None:
        self.source = source
        self.verifier = verifier
        self.public_url = public_url.rstrip("/") if public_url else None
        # (token, workspace, agent) -> its principal: a request with a token seen before costs one look-up.
        self._principals: dict[tuple[str, str, str], KeyScope] = {}

    # -- the Authenticator -------------------------------------------------------------------------------

    def authenticate(self, scope: Scope, token: str | None) -> Principal | None:
        workspace, agent = _target(scope)
        oauth = self.source.oauth.get(workspace)
        if token is None:
            if oauth is None:
                raise AuthChallengeError(UNAUTHORIZED_MESSAGE)
            if oauth.policy.sign_in == "calls":  # counted against the workspace's limits like anyone
                return KeyScope(workspace, method="anonymous", id="anonymous", workspace_limits=oauth.limits)
            raise AuthChallengeError(UNAUTHORIZED_MESSAGE, scopes=sorted(oauth.policy.agent_needs(agent)))
        if oauth is None or oauth.policy.credentials != "oauth":
            key = self.source.authenticate(token)
            if key is not None or oauth is None:
                return key  # None: `verify` asks the registry for a key made since the last reload
        known = self._principals.get((token, workspace, agent))
        if known is not None and known.expires_at is not None and time.time() <= known.expires_at + 30:
            return known
        claims = self.verifier.cached(token)
        return None if claims is None else self._principal(claims, workspace, agent, oauth, token)

    async def verify(self, scope: Scope, token: str) -> Principal:
        workspace, agent = _target(scope)
        oauth = self.source.oauth.get(workspace)
        if oauth is None or oauth.policy.credentials != "oauth":
            key = await self.source.confirm(token)
            if key is not None:
                return key
            if oauth is None:
                raise AuthChallengeError(UNAUTHORIZED_MESSAGE)
        policy = oauth.policy
        claims = await self.verifier.verify(token, policy.issuers, policy.introspection, workspace=workspace)
        return self._principal(claims, workspace, agent, oauth, token)

    # -- resources and their metadata ----------------------------------------------------------------------

    def resource(self, workspace: str, agent: str) -> str | None:
        """The agent's canonical URL (its tokens' audience), from configuration, never from a request."""
        oauth = self.source.oauth.get(workspace)
        base = (oauth.policy.audience if oauth is not None and oauth.policy.audience else None) or self.public_url
        if base is None:
            return None
        return base.rstrip("/") + AGENT_PATH.format(workspace=workspace, agent=agent)

    def metadata_url(self, scope: Scope) -> str | None:
        """Where the challenge points a client: the agent's protected resource metadata (workspaces with OAuth)."""
        workspace, agent = _target(scope)
        if workspace not in self.source.oauth:
            return None
        resource = self.resource(workspace, agent)
        if resource is None:
            return None
        base = resource[: -len(AGENT_PATH.format(workspace=workspace, agent=agent))]
        return base + metadata_path(resource)

    def metadata(self, workspace: str, agent: str) -> JSONObject | None:
        """The RFC 9728 document of an agent whose workspace takes OAuth tokens; None for any other path (so a
        client cannot learn which agents a workspace without OAuth has)."""
        oauth = self.source.oauth.get(workspace)
        if oauth is None or not self.source.serves(workspace, agent):
            return None
        resource = self.resource(workspace, agent)
        if resource is None:
            _notices.warning("no-public-url", "workspace %s takes OAuth tokens but neither its audience nor "
                             "CRANK_PUBLIC_URL is set: its agents cannot name their resource", workspace)  # fmt: skip
            return None
        policy = oauth.policy
        scopes = sorted({*policy.agent_needs(agent), *(s for group in policy.tool_scopes.values() for s in group)})
        return protected_resource_metadata(resource, policy.issuers, scopes, resource_name=f"{workspace}/{agent}")

    def root_metadata(self) -> JSONObject | None:
        """The document at the root of the well-known path: served when every workspace that takes tokens trusts
        the same issuers (one sign-in for the whole server), naming the server's public URL; None otherwise."""
        issuers = {oauth.policy.issuers for oauth in self.source.oauth.values()}
        if len(issuers) != 1 or self.public_url is None:
            return None
        scopes = sorted({scope for oauth in self.source.oauth.values() for group in oauth.policy.agent_scopes.values()
                         for scope in group})  # fmt: skip
        return protected_resource_metadata(self.public_url, next(iter(issuers)), scopes)

    # -- principals ------------------------------------------------------------------------------------------

    def _principal(
        self, claims: TokenClaims, workspace: str, agent: str, oauth: WorkspaceOAuth, token: str
    ) -> KeyScope:
        """The principal of a valid token at this agent, or the challenge that refuses it here."""
        resource = self.resource(workspace, agent)
        if resource is None:
            raise DependencyUnavailableError("configuration", "This server has no public URL to check tokens with.")
        principal = token_principal(
            claims, oauth.policy, resource, oauth.policy.agent_needs(agent), workspace=workspace,
            agents=frozenset({agent}), limits=oauth.key_limits, workspace_limits=oauth.limits,
        )  # fmt: skip
        if len(self._principals) >= _MAX_PRINCIPALS:
            self._principals.clear()
        logger.info("access token accepted for %s/%s", workspace, agent, extra=principal.log_fields())
        self._principals[(token, workspace, agent)] = principal
        return principal


def token_principal(
    claims: TokenClaims,
    policy: OAuthPolicy,
    resource: str,
    needed: frozenset[str],
    *,
    workspace: str | None = None,
    agents: frozenset[str] | None = None,
    limits: Limits | None = None,
    workspace_limits: Limits | None = None,
) -> KeyScope:
    """The principal of a valid token at `resource`, or the challenge that refuses it there: an issuer the policy
    does not trust or another audience (401 `invalid_token`), or a scope of `needed` missing (403)."""
    if not any(claims.issuer.rstrip("/") == issuer.rstrip("/") for issuer in policy.issuers):
        raise AuthChallengeError("The access token was issued by an issuer this resource does not trust",
                                 error="invalid_token")  # fmt: skip
    if not any(same_resource(audience, resource) for audience in claims.audiences):
        raise AuthChallengeError(f"The access token is not for this resource ({resource})", error="invalid_token")
    if not needed <= claims.scopes:
        raise AuthChallengeError(f"This resource needs the scopes {', '.join(sorted(needed))}", status=403,
                                 error="insufficient_scope", scopes=sorted(needed))  # fmt: skip
    who = claims.subject or claims.client_id or "-"
    return KeyScope(
        workspace,
        agents,
        id=f"{claims.issuer}#{who}",
        method=claims.method,
        subject=claims.subject,
        client_id=claims.client_id,
        issuer=claims.issuer,
        scopes=claims.scopes,
        expires_at=claims.expires_at,
        limits=limits,  # per subject, as per key
        workspace_limits=workspace_limits,
    )


class ResourceAuthenticator:
    """OAuth access tokens for one in-process MCP endpoint (`MCPConfig.oauth`): the endpoint is the resource
    `resource` (its canonical URL), the policy's `agent_scopes["*"]` the scopes every request needs, and its
    `tool_scopes` each tool's (`crank.server.RPCService`)."""

    def __init__(self, verifier: TokenVerifier, policy: OAuthPolicy, resource: str) -> None:
        self.verifier = verifier
        self.policy = policy
        self.resource = resource.rstrip("/")
        self.metadata_path = metadata_path(self.resource)
        self._principals: dict[str, KeyScope] = {}

    def authenticate(self, scope: Scope, token: str | None) -> Principal | None:
        if token is None:
            if self.policy.sign_in == "calls":
                return KeyScope(None, method="anonymous", id="anonymous")
            raise AuthChallengeError(UNAUTHORIZED_TOKEN_MESSAGE, scopes=sorted(self.policy.agent_needs("*")))
        known = self._principals.get(token)
        if known is not None and known.expires_at is not None and time.time() <= known.expires_at + 30:
            return known
        claims = self.verifier.cached(token)
        return None if claims is None else self._principal(token, claims)

    async def verify(self, scope: Scope, token: str) -> Principal:
        policy = self.policy
        return self._principal(token, await self.verifier.verify(token, policy.issuers, policy.introspection))

    def _principal(self, token: str, claims: TokenClaims) -> KeyScope:
        principal = token_principal(claims, self.policy, self.resource, self.policy.agent_needs("*"))
        if len(self._principals) >= _MAX_PRINCIPALS:
            self._principals.clear()
        self._principals[token] = principal
        return principal

    def metadata_url(self, scope: Scope) -> str:
        origin = self.resource[: len(self.resource) - len(urlsplit(self.resource).path)]
        return origin + self.metadata_path

    def metadata(self) -> JSONObject:
        policy = self.policy
        scopes = sorted(
            {*policy.agent_needs("*"), *(scope for group in policy.tool_scopes.values() for scope in group)}
        )
        return protected_resource_metadata(self.resource, policy.issuers, scopes)


def _target(scope: Scope) -> tuple[str, str]:
    params = scope.get("path_params", {})
    return params.get("workspace", ""), params.get("agent", "")
