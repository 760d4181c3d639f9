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
from crank.gateway.tokens import LEEWAY, TokenClaims, TokenLimits, TokenVerifier, same_issuer
from crank.registry import API_KEY_PREFIX, KeyScope, WorkspaceOAuth
from crank.registry.runtime import Limits, OAuthPolicy
from crank.sources.agents import AgentSource
from crank.sources.workspace_policies import UNKNOWN, Unknown
from crank.types import JSONObject, Scope
from crank.wire.auth import Principal, metadata_path, protected_resource_metadata, same_resource
from crank.wire.budgets import client_address
from crank.wire.notices import ThrottledLog
from crank.wire.tenant_cache import TenantCaches

__all__ = [
    "AGENT_PATH",
    "UNAUTHORIZED_MESSAGE",
    "GatewayAuthenticator",
    "ResourceAuthenticator",
    "metadata_url",
    "token_principal",
]

logger = logging.getLogger("crank.gateway.auth")
_notices = ThrottledLog(logger)

AGENT_PATH: Final = "/mcp/v1/{workspace}/{agent}"
UNAUTHORIZED_MESSAGE: Final = "A valid API key or access token is required: Authorization: Bearer <token>"
UNAUTHORIZED_TOKEN_MESSAGE: Final = "A valid access token is required: Authorization: Bearer <token>"
_PRINCIPAL_OVERHEAD = 600  # bytes a kept principal costs beside its token


def _principal_bytes(key: object, _value: object) -> int:
    token = key[0] if isinstance(key, tuple) else key
    return (len(token) if isinstance(token, str) else 0) + _PRINCIPAL_OVERHEAD


def _principal_caches(limits: TokenLimits) -> TenantCaches[tuple[object, KeyScope]]:
    """The principals of tokens seen lately, per workspace, bounded as the verifier's tokens are: no tenant's
    tokens push out another's."""
    return TenantCaches(limits.cache_bytes, limits.cache_total_bytes, _principal_bytes)


def anonymous_principal(scope: Scope, workspace: str | None, oauth: WorkspaceOAuth | None) -> KeyScope:
    """Who calls without credentials where the listing is open (lazy sign-in, `sign_in: calls`): one caller per
    workspace (its list-change streams share one owner's places), granted no scope (what it is listed: the
    catalog's `anonymous_scopes`), its requests counted on their own (`OAuthPolicy.anonymous`: per client address
    and per workspace, never against the workspace's limits), and asked to sign in for any call."""
    anonymous = oauth.policy.anonymous if oauth is not None else None
    return KeyScope(
        workspace, method="anonymous", id=f"{workspace or ''}|anonymous|{client_address(scope)}",
        limits=anonymous.per_address if anonymous is not None else None,
        workspace_limits=anonymous.per_workspace if anonymous is not None else None,
    )  # fmt: skip


class GatewayAuthenticator:
    """API keys and OAuth access tokens for the agents of an `AgentSource`."""

    def __init__(self, source: AgentSource, verifier: TokenVerifier, *, public_url: str | None = None) -> None:
        self.source = source
        self.verifier = verifier
        self.public_url = public_url.rstrip("/") if public_url else None
        # Per workspace, (token, agent) -> the policy it was checked under and its principal: a request with a token
        # seen before costs one look-up, until the policy changes (a reload makes new policy objects).
        self._principals = _principal_caches(verifier.limits)

    # -- the Authenticator -------------------------------------------------------------------------------

    def authenticate(self, scope: Scope, token: str | None) -> Principal | None:
        workspace, agent = _target(scope)
        oauth = self.source.policies.known.get(workspace, UNKNOWN)
        if oauth is None and token is not None:  # most requests: a workspace of API keys only (as `_known` has it)
            return self.source.keys.authenticate(token)
        if oauth is UNKNOWN:  # the workspace's first request here: `verify` reads its policy
            return None
        return self._known(scope, workspace, agent, oauth, token)

    def _known(
        self, scope: Scope, workspace: str, agent: str, oauth: WorkspaceOAuth | None, token: str | None
    ) -> Principal | None:
        """`authenticate`, the workspace's policy known."""
        if token is None:
            if oauth is None:
                raise AuthChallengeError(UNAUTHORIZED_MESSAGE)
            if oauth.policy.sign_in == "calls":
                return anonymous_principal(scope, workspace, oauth)
            raise AuthChallengeError(UNAUTHORIZED_MESSAGE, scopes=sorted(oauth.policy.agent_needs(agent)))
        if oauth is None or token.startswith(API_KEY_PREFIX):  # told apart by shape: a token never costs a key lookup
            if oauth is not None and oauth.policy.credentials == "oauth":
                raise AuthChallengeError("This workspace takes access tokens, not API keys", error="invalid_token")
            return self.source.keys.authenticate(token)  # None: `verify` asks the registry for a key made since
        known = self._principals.get(workspace, (token, agent))
        if known is not None and known[0] is oauth and _fresh(known[1]):
            return known[1]
        claims = self.verifier.cached(token, oauth.policy.introspection, workspace=workspace)
        return None if claims is None else self._principal(claims, workspace, agent, oauth, token)

    async def verify(self, scope: Scope, token: str | None) -> Principal:
        workspace, agent = _target(scope)
        held = self.source.policies.held(workspace)
        oauth = await self.source.policies.read(workspace, client_address(scope)) if isinstance(held, Unknown) else held
        known = self._known(scope, workspace, agent, oauth, token)  # the policy's rules first, as `authenticate`'s
        if known is not None:
            return known
        if token is None:
            raise AuthChallengeError(UNAUTHORIZED_MESSAGE)
        if oauth is None or token.startswith(API_KEY_PREFIX):
            key = await self.source.keys.confirm(token, client_address(scope))
            if key is None:
                raise AuthChallengeError(UNAUTHORIZED_MESSAGE)
            return key
        policy = oauth.policy
        try:
            claims = await self.verifier.verify(token, policy.issuers, policy.introspection, workspace=workspace,
                                                client=client_address(scope))  # fmt: skip
        except AuthChallengeError as refused:  # the scopes to ask for with a new token (MCP: SHOULD)
            refused.scopes = refused.scopes or tuple(sorted(policy.agent_needs(agent)))
            raise
        return self._principal(claims, workspace, agent, oauth, token)

    # -- resources and their metadata ----------------------------------------------------------------------

    def resource(self, workspace: str, agent: str, oauth: WorkspaceOAuth | None = None) -> str | None:
        """The agent's canonical URL (its tokens' audience), from configuration, never from a request: its
        workspace's `oauth` policy (the one held when not given) or the server's public URL."""
        oauth = oauth or self._held(workspace)
        base = (oauth.policy.audience if oauth is not None and oauth.policy.audience else None) or self.public_url
        if base is None:
            return None
        return base.rstrip("/") + AGENT_PATH.format(workspace=workspace, agent=agent)

    def metadata_url(self, scope: Scope) -> str | None:
        """Where the challenge points a client: the agent's protected resource metadata (workspaces with OAuth)."""
        workspace, agent = _target(scope)
        if self._held(workspace) is None:
            return None
        resource = self.resource(workspace, agent)
        return None if resource is None else metadata_url(resource)

    async def metadata(self, scope: Scope, workspace: str, agent: str) -> JSONObject | None:
        """The RFC 9728 document of an agent whose workspace takes OAuth tokens; None for any other path (so a
        client cannot learn which agents a workspace without OAuth has)."""
        if not self.source.serves(workspace, agent):
            return None
        oauth = await self.source.policies.read(workspace, client_address(scope))
        if oauth is None:
            return None
        resource = self.resource(workspace, agent, oauth)
        if resource is None:
            _notices.warning("no-public-url", "workspace %s takes OAuth tokens but neither its audience nor "
                             "CRANK_PUBLIC_URL is set: its agents cannot name their resource", workspace)  # fmt: skip
            return None
        policy = oauth.policy
        return protected_resource_metadata(resource, policy.issuers, policy.scopes_supported(agent),
                                           resource_name=f"{workspace}/{agent}")  # fmt: skip

    def _held(self, workspace: str) -> WorkspaceOAuth | None:
        """The workspace's policy when held here (read by `verify` on the workspace's first request)."""
        held = self.source.policies.held(workspace)
        return None if isinstance(held, Unknown) else held

    # -- principals ------------------------------------------------------------------------------------------

    def _principal(
        self, claims: TokenClaims, workspace: str, agent: str, oauth: WorkspaceOAuth, token: str
    ) -> KeyScope:
        """The principal of a valid token at this agent, or the challenge that refuses it here."""
        resource = self.resource(workspace, agent, oauth)
        if resource is None:
            raise DependencyUnavailableError("configuration", "This server has no public URL to check tokens with.")
        principal = token_principal(
            claims, oauth.policy, resource, oauth.policy.agent_needs(agent), workspace=workspace,
            agents=frozenset({agent}), limits=oauth.key_limits, workspace_limits=oauth.limits, token=token,
        )  # fmt: skip
        logger.info("access token accepted for %s/%s", workspace, agent, extra=principal.log_fields())
        self._principals.put(workspace, (token, agent), (oauth, principal))
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
    token: str | None = None,
) -> KeyScope:
    """The principal of a valid token at `resource`, or the challenge that refuses it there: an issuer the policy
    does not trust or another audience (401 `invalid_token`), or a scope of `needed` missing (403). `token`: the
    token itself, which a tool acting as the user exchanges (`Principal.token`)."""
    if not any(same_issuer(claims.issuer, issuer) for issuer in policy.issuers):
        raise AuthChallengeError("The access token was issued by an issuer this resource does not trust",
                                 error="invalid_token")  # fmt: skip
    if not any(same_resource(audience, resource) for audience in claims.audiences):
        raise AuthChallengeError(f"The access token is not for this resource ({resource})", error="invalid_token")
    if not needed <= claims.scopes:
        raise AuthChallengeError(f"This resource needs the scopes {', '.join(sorted(needed))}", status=403,
                                 error="insufficient_scope", scopes=sorted(needed))  # fmt: skip
    if claims.subject is None and claims.client_id is None:
        raise AuthChallengeError("The access token names no subject and no client", error="invalid_token")
    who = f"sub:{claims.subject}" if claims.subject is not None else f"client:{claims.client_id}"
    return KeyScope(
        workspace,
        agents,
        id=f"{workspace or ''}|{claims.issuer}|{who}",  # what limits count and bindings key on: one per user here
        method=claims.method,
        subject=claims.subject,
        client_id=claims.client_id,
        issuer=claims.issuer,
        scopes=claims.scopes,
        expires_at=claims.expires_at,
        limits=limits,  # per subject, as per key
        workspace_limits=workspace_limits,
        token=token,
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
        self._principals = _principal_caches(verifier.limits)

    def authenticate(self, scope: Scope, token: str | None) -> Principal | None:
        if token is None:
            if self.policy.sign_in == "calls":
                return anonymous_principal(scope, None, None)
            raise AuthChallengeError(UNAUTHORIZED_TOKEN_MESSAGE, scopes=sorted(self.policy.agent_needs("*")))
        known = self._principals.get("", (token, None))
        if known is not None and _fresh(known[1]):
            return known[1]
        claims = self.verifier.cached(token, self.policy.introspection)
        return None if claims is None else self._principal(token, claims)

    async def verify(self, scope: Scope, token: str | None) -> Principal:
        if token is None:  # `authenticate` answers every request without one
            raise AuthChallengeError(UNAUTHORIZED_TOKEN_MESSAGE, scopes=sorted(self.policy.agent_needs("*")))
        policy = self.policy
        claims = await self.verifier.verify(token, policy.issuers, policy.introspection, client=client_address(scope))
        return self._principal(token, claims)

    def _principal(self, token: str, claims: TokenClaims) -> KeyScope:
        # No `token=`: an in-process endpoint exchanges no user's token, so none is kept with its principals.
        principal = token_principal(claims, self.policy, self.resource, self.policy.agent_needs("*"))
        self._principals.put("", (token, None), (self.policy, principal))
        return principal

    def metadata_url(self, scope: Scope) -> str:
        return metadata_url(self.resource)

    def metadata(self) -> JSONObject:
        return protected_resource_metadata(self.resource, self.policy.issuers, self.policy.scopes_supported("*"))


def metadata_url(resource: str) -> str:
    """Where the metadata of `resource` is (RFC 9728 §3.1): its origin, the well-known path, then its path."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{metadata_path(resource)}"


def _fresh(principal: KeyScope) -> bool:
    """Whether a kept principal is still valid: a JWT's until it expires (with the leeway its check allows), an
    introspected token's until its answer's own limit."""
    expires = principal.expires_at
    return expires is not None and time.time() <= expires + (LEEWAY if principal.method == "jwt" else 0)


def _target(scope: Scope) -> tuple[str, str]:
    params = scope.get("path_params", {})
    return params.get("workspace", ""), params.get("agent", "")
