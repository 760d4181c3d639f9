"""The runtime view: what a published agent version holds, and the one contract between the registry and
everything that serves or checks it (the gateway's catalog, remote operations, adapters, safety and
mappings; the linter and the CLI).

    RuntimeView                 format_version, workspace, agent, tools
    ├── WorkspaceInfo           id, slug, default_language
    ├── AgentInfo               id, slug, description, token_budget, mode, limits (Limits),
    │                           documents (AgentDocument), prompts (AgentPrompt: PromptArgumentSpec,
    │                           PromptMessageSpec)
    └── RuntimeTool             tool_name, title, tool_description, schemas, annotations (ToolHints),
        │                       translations, protocol, target (Target), format, ids,
        │                       resource (ResourceBinding)
        ├── input_mapping       InputRule: ArgumentRule | ConstantRule | TemplateRule
        ├── output_mapping      OutputSpec: select, rename, max_items
        └── execution_config    ExecutionConfig: timeout, retries, idempotent, forward_headers,
                                auth (AuthConfig), idempotency (IdempotencyConfig),
                                confirmation (ConfirmationConfig), accept, body (BodyConfig),
                                output_schema

The models check shapes and types; rules that need the gateway's knowledge (URL and header grammar,
secret folders, JMESPath, which headers may be forwarded) are checked where the version is compiled.

**Format versions.** A publish writes `RuntimeView.to_json()`, which carries `format_version`
(`FORMAT_VERSION`). Views written before it (format 1: no `format_version`, each tool the draft's
fields copied as they were, `execution_config` a free object) are still served: `load_runtime` reads
them through `tool_from_spec`, the same function that turns drafts into tools at publish, so an old
version serves as it did. Formats 2 to 4 are format 5 without what came later (2: the agent's `limits`;
3: documents, prompts and resources; 4: tools' `execution_config.body`) and are read as such; a publish writes
the oldest format that holds the view. A number above `FORMAT_VERSION` (a newer Crank wrote it, say during a
rolling upgrade) is refused with a message saying so rather than read in part.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from crank import _json
from crank.exceptions import ConfigurationError
from crank.schema import problems_of
from crank.types import JSONObject, JSONValue

__all__ = [
    "AGENT_MODES",
    "execution_config_of",
    "MAX_DOCUMENT_SIZE",
    "MAX_PROMPT_TEMPLATE",
    "AgentDocument",
    "AgentPrompt",
    "PromptArgumentSpec",
    "PromptImage",
    "PromptMessageSpec",
    "ResourceBinding",
    "DEFAULT_AGENT_MODE",
    "DEFAULT_ACCEPT",
    "DEFAULT_AUTH_HEADER",
    "DEFAULT_CONTENT_TYPE",
    "MAX_UPLOAD_BYTES",
    "BodyConfig",
    "BodyKind",
    "body_kind",
    "media_type_problem",
    "DEFAULT_CONFIRMATION_TTL",
    "DEFAULT_HTTP_METHOD",
    "DEFAULT_IDEMPOTENCY_HEADER",
    "DEFAULT_IDEMPOTENCY_WINDOW",
    "DEFAULT_LANGUAGE",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT",
    "FORMAT_VERSION",
    "QUOTA_PERIODS",
    "MIN_TIMEOUT",
    "AgentInfo",
    "AnonymousLimits",
    "AgentMode",
    "ArgumentRule",
    "AuthConfig",
    "AuthType",
    "SCHEME_NAME",
    "SchemeCredential",
    "SignInClient",
    "AuthorizationCodeFlow",
    "UserConnection",
    "SecurityRequirement",
    "TokenExchange",
    "ConfirmationConfig",
    "ConstantRule",
    "ExecutionConfig",
    "IdempotencyConfig",
    "InputRule",
    "IntrospectionClient",
    "Limits",
    "OAuthPolicy",
    "OutputSpec",
    "Quota",
    "QuotaPeriod",
    "RateLimit",
    "RuntimeTool",
    "RuntimeView",
    "Target",
    "TemplateRule",
    "ToolHints",
    "WorkspaceInfo",
    "is_secure_url",
    "origin_of",
    "load_runtime",
    "tool_from_spec",
]

FORMAT_VERSION: Final = 5
"""The format a publish writes. 1: the plain dicts written before this module (no `format_version`);
2: the typed view before agents had `limits`; 3: before agents had documents and prompts, and tools `resource`;
4: before tools had `execution_config.body` (every body JSON)."""

DEFAULT_LANGUAGE: Final = "en"
DEFAULT_TIMEOUT: Final = 10.0
"""Seconds one attempt at the upstream may take: waiting for a connection, connecting and the answer."""
MIN_TIMEOUT: Final = 0.001
DEFAULT_RETRIES: Final = 0
"""Attempts after the first; only idempotent operations are retried."""
DEFAULT_HTTP_METHOD: Final = "GET"
DEFAULT_AUTH_HEADER: Final = "X-Api-Key"
DEFAULT_IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
DEFAULT_IDEMPOTENCY_WINDOW: Final = 86_400.0
"""Seconds a key keeps its outcome: a repeat within a day gets the stored result."""
DEFAULT_CONFIRMATION_TTL: Final = 300.0
"""Seconds a confirmation token stays valid: long enough to ask the user, short enough to be about this call."""
DEFAULT_ACCEPT: Final = "application/json"
"""The `Accept` header of upstream requests: an upstream that offers XML first still answers in JSON."""
DEFAULT_CONTENT_TYPE: Final = "application/json"
"""The media type of an http call's body (`BodyConfig.content_type`)."""
MAX_UPLOAD_BYTES: Final = 16 * 1024 * 1024
"""Bytes of the body one http call may send when it is a form, multipart or a file (its files decoded): as much
as an answer may hold. The MCP request that carries it is bounded first (`CRANK_MAX_BODY_BYTES`)."""

BodyKind = Literal["json", "form", "multipart", "text", "binary"]
"""How an http call's body is written, by its media type (`body_kind`)."""
_MEDIA_TYPE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+/[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 8.3.1, type "/" subtype

AgentMode = Literal["direct", "discovery"]
"""direct: each bound operation is a tool. discovery: a few fixed tools search, describe and call the
operations (`crank.sources.discovery`), for agents too big for any token budget."""
AGENT_MODES: Final[tuple[AgentMode, ...]] = ("direct", "discovery")
DEFAULT_AGENT_MODE: Final[AgentMode] = "direct"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


_M = TypeVar("_M", bound=BaseModel)


# -- limits (docs/gateway.md, Rate limits and quotas) ------------------------------------------------

QuotaPeriod = Literal["hour", "day", "month"]
"""A quota's period: the UTC calendar hour, day or month (a month's quota resets at 00:00 UTC on the 1st)."""
QUOTA_PERIODS: Final[tuple[QuotaPeriod, ...]] = ("hour", "day", "month")


class RateLimit(_Model):
    """At most `calls` in a window of `window` seconds, which starts with the first call after the last one
    ended (a fixed window, counted in the state store: exact across replicas)."""

    calls: int = Field(ge=1, strict=True)
    window: float = Field(ge=0.001, le=86_400)

    def words(self) -> str:
        """The limit as errors and pages say it: `100 calls per 60 s`."""
        return f"{self.calls} calls per {self.window:g} s"


class Quota(_Model):
    """At most `calls` per calendar `period` (UTC)."""

    calls: int = Field(ge=1, strict=True)
    period: QuotaPeriod

    def words(self) -> str:
        """The quota as errors and pages say it: `1000 calls per day, UTC`."""
        return f"{self.calls} calls per {self.period}, UTC"


class Limits(_Model):
    """A workspace's, an agent's or an API key's limits; either may be absent (no limit)."""

    rate: RateLimit | None = None
    quota: Quota | None = None

    @property
    def empty(self) -> bool:
        return self.rate is None and self.quota is None


# -- OAuth (docs/security.md, OAuth) ----------------------------------------------------------------

CredentialKinds = Literal["keys", "oauth", "both"]
SignIn = Literal["always", "calls"]
TOOL_SCOPE_CLASSES: Final = ("read", "write", "destructive")
"""The classes `OAuthPolicy.tool_scopes` may name besides tool names: read-only tools, the others, and the
destructive ones among them (a destructive tool needs both `write` and `destructive` scopes)."""


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_secure_url(url: str) -> bool:
    """Whether `url` is https, or http on loopback (`_secure_url`'s rule)."""
    try:
        _secure_url(url)
    except ValueError:
        return False
    return True


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _secure_url(url: str) -> str:
    """An https URL, or http on loopback only: keys and secrets never travel in clear text (the MCP
    authorization specification requires https for authorization server endpoints)."""
    parts = urlsplit(url) if len(url) <= 512 else None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK_NAMES:
        raise ValueError(f"{url!r}: only https, but for loopback (the MCP specification requires it)")
    return url


class AnonymousLimits(_Model):
    """What callers without credentials may send to a workspace with lazy sign-in (`sign_in: calls`): counted on
    their own, never against the workspace's limits, which its users and keys share. `per_address` holds one
    client address (an IPv4 address, an IPv6 /64), `per_workspace` all of them together."""

    per_address: Limits = Limits(rate=RateLimit(calls=10, window=1))
    per_workspace: Limits = Limits(rate=RateLimit(calls=100, window=1))


class IntrospectionClient(_Model):
    """How Crank authenticates to the issuer's RFC 7662 introspection endpoint, for opaque tokens."""

    client_id: str = Field(min_length=1, max_length=256)
    client_secret: str = Field(min_length=1, max_length=1024)
    """A secret reference (`env:NAME` or `file:/path`), never the secret itself."""
    endpoint: str | None = None
    """Default: `introspection_endpoint` of the issuer's metadata."""

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else _secure_url(value)


class SignInClient(_Model):
    """Crank's own OpenID Connect client at one of the workspace's issuers: how the connect page signs a user in
    (the authorization code flow with PKCE) to connect only the user a connect link names (docs/security.md,
    Acting as the user). Its redirect URI there is `{CRANK_PUBLIC_URL}/connect/{workspace}/_/signed-in`."""

    issuer: str
    client_id: str = Field(min_length=1, max_length=256)
    client_secret: str = Field(min_length=1, max_length=1024)
    """A secret reference (`env:NAME` or `file:/path`), never the secret itself."""

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return _secure_url(value)


class OAuthPolicy(_Model):
    """What an OAuth access token opens in a workspace: the issuers it trusts, the base URL its resources are
    named from (the token's audience), and the scopes each agent and tool needs."""

    issuers: tuple[str, ...] = Field(min_length=1, max_length=8)
    audience: str | None = None
    """The public base URL of this workspace's MCP endpoints (`https://mcp.example.com`): a resource is this plus
    `/mcp/v1/{workspace}/{agent}`. Default: the server's `CRANK_PUBLIC_URL`."""
    credentials: CredentialKinds = "both"
    """Which credentials the workspace accepts: API keys, OAuth tokens, or both."""
    sign_in: SignIn = "always"
    """`calls`: `initialize` and `tools/list` are open to a client without a token, and a call asks for one (401
    on the call): lazy sign-in."""
    agent_scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Scopes every request to an agent needs, by agent slug; `*` for every agent without its own entry."""
    tool_scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Scopes a call of a tool needs besides its agent's, by tool name, or by class (`read`, `write`,
    `destructive`); a tool's own entry wins over its class."""
    introspection: IntrospectionClient | None = None
    anonymous: AnonymousLimits = AnonymousLimits()
    """With `sign_in: calls`, what requests without credentials may cost (docs/security.md, Lazy sign-in)."""
    sign_in_client: SignInClient | None = None
    """How the connect page signs users in, for schemes that act through users' own connections."""

    @model_validator(mode="after")
    def _sign_in_issuer(self) -> OAuthPolicy:
        client = self.sign_in_client
        if client is not None and not any(_same_url(client.issuer, issuer) for issuer in self.issuers):
            raise ValueError("sign_in_client.issuer must be one of the workspace's issuers")
        return self

    @field_validator("issuers", "audience")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        for url in (value,) if isinstance(value, str) else value or ():
            _secure_url(url)
        return value

    @field_validator("tool_scopes", "agent_scopes")
    @classmethod
    def _scopes(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for name, scopes in value.items():
            if not name or any(not scope or " " in scope or '"' in scope for scope in scopes):
                raise ValueError(f"{name!r}: scopes are non-empty words without spaces or quotes")
        return value

    def agent_needs(self, agent: str) -> frozenset[str]:
        return frozenset(self.agent_scopes.get(agent, self.agent_scopes.get("*", ())))

    def scopes_supported(self, agent: str) -> list[str]:
        """What an agent's protected resource metadata lists: its own scopes and every tool's (sorted)."""
        return sorted({*self.agent_needs(agent), *(scope for group in self.tool_scopes.values() for scope in group)})

    def tool_needs(self, agent: str, tool: str, *, read_only: bool, destructive: bool) -> frozenset[str]:
        """Every scope a call of `tool` of `agent` needs: the agent's, and the tool's own or its class's."""
        own = self.tool_scopes.get(tool)
        if own is None:
            own = self.tool_scopes.get("read", ()) if read_only else self.tool_scopes.get("write", ())
            if destructive and not read_only:
                own = (*own, *self.tool_scopes.get("destructive", ()))
        return self.agent_needs(agent) | frozenset(own)


# -- execution config --------------------------------------------------------------------------------


AuthType = Literal["bearer", "header", "query", "cookie", "basic", "oauth2", "token_exchange", "user_connection"]
"""How an upstream credential is sent: `bearer` (`Authorization: Bearer <secret>`), `header`, `query` or `cookie`
(the secret as the value of `name`), `basic` (the secret is `user:password`, sent base64-encoded), `oauth2` (the
secret is the client secret of the OAuth 2 client-credentials grant at `token_url`; the token goes as bearer),
`token_exchange` (RFC 8693: the signed-in user's access token is exchanged at `token_url` for one the API takes,
for `audience` or `resource`; the secret is Crank's own client secret there; the token goes as bearer: acting as
the user, docs/gateway.md), `user_connection` (each user connects their own account once, through the OAuth 2
authorization code flow with PKCE at `authorization_url` and `token_url`; their tokens are kept in the vault and
sent as bearer; the secret is Crank's own client secret there)."""


class AuthConfig(_Model):
    """Upstream credentials, by reference: `secret` is `env:NAME` or `file:/path`, never the secret itself
    (`crank.gateway.secrets.check_secret_reference` says which references a workspace may use). `scheme` names the
    API description's security scheme it satisfies, for reports and logs."""

    type: AuthType
    secret: str
    name: str = DEFAULT_AUTH_HEADER
    """The header, query parameter or cookie that carries the secret (`header`, `query`, `cookie`)."""
    scheme: str | None = None
    client_id: str | None = Field(default=None, max_length=256)
    """`oauth2`: the client's id (not a secret)."""
    token_url: str | None = None
    """`oauth2`, `token_exchange`: the authorization server's token endpoint."""
    scopes: tuple[str, ...] = ()
    """`oauth2`, `token_exchange`: the scopes to ask for."""
    audience: str | None = Field(default=None, min_length=1, max_length=512)
    """`token_exchange`: the API as its authorization server names it (RFC 8693 `audience`)."""
    resource: str | None = Field(default=None, min_length=1, max_length=512)
    """`token_exchange`, `user_connection`: the API's URL, when its authorization server names APIs so (RFC 8707
    `resource`)."""
    subject_issuer: str | None = None
    """`token_exchange`: the issuer of the users' tokens it exchanges, whose token endpoint `token_url` is: a token
    of another issuer is never sent there."""
    authorization_url: str | None = None
    """`user_connection`: the authorization server's authorization endpoint, where a user connects their account."""

    @model_validator(mode="after")
    def _complete(self) -> AuthConfig:
        if self.type in ("oauth2", "token_exchange", "user_connection"):
            if not self.client_id or not self.token_url:
                raise ValueError(f"{self.type} credentials need client_id and token_url")
            _secure_url(self.token_url)
        if (self.type == "user_connection") != (self.authorization_url is not None):
            raise ValueError("user_connection credentials, and only they, name an authorization_url")
        if self.type == "user_connection" and self.scheme is None:
            raise ValueError("user_connection credentials name their scheme: users connect per scheme")
        if self.authorization_url is not None:
            _secure_url(self.authorization_url)
        exchange = (self.audience, self.subject_issuer)
        if self.type == "token_exchange":
            if self.subject_issuer is None or (self.audience is None and self.resource is None):
                raise ValueError("token_exchange credentials need subject_issuer, and the API's audience or resource")
            _secure_url(self.subject_issuer)
        elif any(value is not None for value in exchange):
            raise ValueError("only token_exchange credentials name an audience or subject_issuer")
        elif self.resource is not None and self.type != "user_connection":
            raise ValueError("only token_exchange and user_connection credentials name a resource")
        return self


SCHEME_NAME = r"^[A-Za-z0-9._-]{1,128}$"
"""A security scheme's name as Crank keeps it (OpenAPI 3.1's own rule for component names)."""


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL, lower-cased: what a credential is bound to."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class TokenExchange(_Model):
    """How a scheme's calls act as the signed-in user (RFC 8693): the user's access token, issued by `issuer` (one of
    the workspace's trusted issuers), is exchanged at that issuer's `token_url` for a token of the API, named by
    `audience` or `resource`, with `scopes`. A call whose token another issuer signed is refused: its token is never
    sent to this endpoint."""

    issuer: str
    token_url: str
    audience: str | None = Field(default=None, min_length=1, max_length=512)
    resource: str | None = Field(default=None, min_length=1, max_length=512)
    scopes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _complete(self) -> TokenExchange:
        _secure_url(self.issuer)
        _secure_url(self.token_url)
        if self.audience is None and self.resource is None:
            raise ValueError("a token exchange needs the API's audience or resource")
        return self


class AuthorizationCodeFlow(_Model):
    """An OAuth 2 authorization code flow, as an API description's security scheme declares it (its
    `authorizationUrl` and `tokenUrl`): where a user may connect their own account (`UserConnection`)."""

    authorization_url: str
    token_url: str

    @model_validator(mode="after")
    def _secure(self) -> AuthorizationCodeFlow:
        _secure_url(self.authorization_url)
        _secure_url(self.token_url)
        return self


class UserConnection(_Model):
    """How a scheme's calls act as the signed-in user through their own connection to the API: each user connects
    once (the OAuth 2 authorization code flow with PKCE, on Crank's connect page), and their tokens are kept,
    encrypted, in the vault. The flow is the description's (`SecurityRequirement.authorization_code`) unless
    `authorization_url` and `token_url` name another; `scopes` replace the operations' own."""

    authorization_url: str | None = None
    token_url: str | None = None
    scopes: tuple[str, ...] = Field(default=(), max_length=64)
    """The scopes to ask for (`offline_access` too where the server gives refresh tokens only for it)."""
    resource: str | None = Field(default=None, min_length=1, max_length=512)
    """The API's URL, when its authorization server issues tokens per resource (RFC 8707 `resource`)."""

    @model_validator(mode="after")
    def _complete(self) -> UserConnection:
        if (self.authorization_url is None) != (self.token_url is None):
            raise ValueError("a connection names both authorization_url and token_url, or neither")
        for url in (self.authorization_url, self.token_url):
            if url is not None:
                _secure_url(url)
        return self

    def flow(self, described: AuthorizationCodeFlow | None) -> AuthorizationCodeFlow | None:
        """The flow users connect through: this one's own, else the description's."""
        if self.authorization_url is not None and self.token_url is not None:
            return AuthorizationCodeFlow(authorization_url=self.authorization_url, token_url=self.token_url)
        return described


class SchemeCredential(_Model):
    """A workspace's credential for one security scheme of its API descriptions: the secret by reference (a
    token, an API key, `user:password` for basic, an OAuth 2 client secret) and, for OAuth 2, the client id.
    Every operation that requires the scheme, has no `auth` of its own, and calls one of `origins` (for OAuth 2,
    with its token URL there too) is published with it: a scheme name another document of the workspace reuses
    for another API never sends this secret there. With `exchange`, the scheme acts as the signed-in user: the
    secret and client id are Crank's own at the exchange's token endpoint (an http bearer or OAuth 2 scheme)."""

    secret: str = Field(min_length=1, max_length=1024)
    client_id: str | None = Field(default=None, max_length=256)
    origins: tuple[str, ...] = Field(min_length=1, max_length=16)
    """The upstream origins (`https://api.example.com`) the credential may be sent to."""
    exchange: TokenExchange | None = None
    """Act as the signed-in user through a token exchange (`token_exchange` credentials) instead of one account."""
    connection: UserConnection | None = None
    """Act as the signed-in user through their own connection to the API (`user_connection` credentials)."""

    @model_validator(mode="after")
    def _exchange_client(self) -> SchemeCredential:
        if self.exchange is not None and self.connection is not None:
            raise ValueError("a credential acts as the user through an exchange or a connection, not both")
        if (self.exchange is not None or self.connection is not None) and not self.client_id:
            raise ValueError("acting as the user needs Crank's client id at the authorization server")
        return self

    @field_validator("origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        origins = []
        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("https", "http") or not parts.hostname or len(url) > 512:
                raise ValueError(f"{url!r} is not an origin (https://host[:port])")
            origins.append(origin_of(url))
        return tuple(origins)

    def opens(self, requirement: SecurityRequirement, target: str) -> bool:
        """Whether this credential may serve `requirement` for a call to `target`: the kind fits (a client id only
        for OAuth 2) and every address it would go to is one of its origins."""
        if self.exchange is not None:  # the user's token for the API: what a bearer or OAuth 2 scheme takes
            if requirement.type not in ("bearer", "oauth2"):
                return False
            addresses = [target, self.exchange.token_url]
        elif self.connection is not None:
            flow = self.connection.flow(requirement.authorization_code)
            if requirement.type not in ("bearer", "oauth2") or flow is None:
                return False
            addresses = [target, flow.token_url]
        elif (self.client_id is not None) != (requirement.type == "oauth2"):
            return False
        else:
            addresses = [target, *([requirement.token_url] if requirement.token_url else [])]
        return all(origin_of(address) in self.origins for address in addresses)

    @field_validator("secret")
    @classmethod
    def _reference(cls, value: str) -> str:
        if not value.startswith(("env:", "file:")) or value in ("env:", "file:"):
            raise ValueError("a secret is 'env:NAME' or 'file:/path', never the value itself")
        return value


class SecurityRequirement(_Model):
    """One scheme an operation's description requires, with how it is sent (`AuthConfig` without the secret)."""

    scheme: str = Field(pattern=SCHEME_NAME)
    type: AuthType
    name: str = DEFAULT_AUTH_HEADER
    token_url: str | None = None
    scopes: tuple[str, ...] = ()
    authorization_code: AuthorizationCodeFlow | None = None
    """The description's authorization code flow, where each user may connect their own account (`UserConnection`)."""

    def credential(self, given: SchemeCredential) -> AuthConfig:
        """The operation's `auth` once the workspace gives the scheme a credential."""
        exchange = given.exchange
        if exchange is not None:
            return AuthConfig(type="token_exchange", secret=given.secret, scheme=self.scheme, client_id=given.client_id,
                              token_url=exchange.token_url, audience=exchange.audience, resource=exchange.resource,
                              scopes=exchange.scopes or self.scopes, subject_issuer=exchange.issuer)  # fmt: skip
        connection = given.connection
        if connection is not None:
            flow = connection.flow(self.authorization_code)
            if flow is None:
                raise ValueError(f"the description of {self.scheme} has no authorization code flow: name one")
            return AuthConfig(type="user_connection", secret=given.secret, scheme=self.scheme,
                              client_id=given.client_id, token_url=flow.token_url,
                              authorization_url=flow.authorization_url, resource=connection.resource,
                              scopes=connection.scopes or self.scopes)  # fmt: skip
        return AuthConfig(type=self.type, secret=given.secret, name=self.name, scheme=self.scheme,
                          client_id=given.client_id, token_url=self.token_url, scopes=self.scopes)  # fmt: skip


class IdempotencyConfig(_Model):
    """The argument that is the idempotency key, the header it goes upstream in, and how long it holds."""

    argument: str
    header: str = DEFAULT_IDEMPOTENCY_HEADER
    window: float = Field(default=DEFAULT_IDEMPOTENCY_WINDOW, gt=0)


class ConfirmationConfig(_Model):
    """The confirmation of a destructive call: `required` None means as the HTTP method says (DELETE asks).
    It asks the user through the client when the client can (elicitation), else it is seed 004's two-step
    token; `human` (written `confirmation: human`) refuses clients that cannot ask their user instead."""

    required: bool | None = Field(default=None, strict=True)
    ttl: float = Field(default=DEFAULT_CONFIRMATION_TTL, gt=0)
    human: bool = Field(default=False, strict=True)


def body_kind(content_type: str) -> BodyKind:
    """How a body of this media type is written: `json` (`application/json`, a `+json` type, `*/*`), `form`
    (`application/x-www-form-urlencoded`), `multipart` (`multipart/form-data`), `text` (`text/*`, `application/xml`,
    a `+xml` type: a string sent as UTF-8), else `binary` (a file, sent as it is)."""
    essence = content_type.split(";", 1)[0].strip().lower()
    if essence in ("application/json", "*/*") or essence.endswith("+json"):
        return "json"
    if essence == "application/x-www-form-urlencoded":
        return "form"
    if essence == "multipart/form-data":
        return "multipart"
    if essence.startswith("text/") or essence == "application/xml" or essence.endswith("+xml"):
        return "text"
    return "binary"


def media_type_problem(content_type: str) -> str | None:
    """Why a body cannot be sent with this `Content-Type`, or None: it must be `type/subtype` (RFC 9110, 8.3.1) and
    may hold a wildcard only for JSON (sent as `application/json`) or a file, whose `data:` URL then names the
    type."""
    essence = content_type.split(";", 1)[0].strip()
    if not _MEDIA_TYPE.fullmatch(essence) or not content_type.isprintable():
        return f"{content_type!r} is not a media type (type/subtype)"
    if "*" in essence and body_kind(content_type) not in ("binary", "json"):
        return f"{content_type!r}: only a JSON or a file body's media type may have a wildcard"
    return None


class BodyConfig(_Model):
    """How an http call's body is written (format 5; crank.gateway.bodies): its media type, and for a form, the
    fields sent as `deepObject` (`field[key]=value`, an array's items `field[0]=value`); for multipart, the fields
    whose values are files (base64 or a `data:` URL each, or a list of them)."""

    content_type: str = DEFAULT_CONTENT_TYPE
    deep_objects: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    files: tuple[Annotated[str, Field(min_length=1)], ...] = ()

    @field_validator("content_type")
    @classmethod
    def _media_type(cls, value: str) -> str:
        problem = media_type_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _fields_of_kind(self) -> BodyConfig:
        if self.deep_objects and self.kind != "form":
            raise ValueError("deep_objects: only a form body (application/x-www-form-urlencoded) has them")
        if self.files and self.kind != "multipart":
            raise ValueError("files: only a multipart/form-data body has them")
        return self

    @property
    def kind(self) -> BodyKind:
        return body_kind(self.content_type)


class ExecutionConfig(_Model):
    """How a tool's upstream call runs (docs/gateway.md, docs/safety.md)."""

    timeout: float = Field(default=DEFAULT_TIMEOUT, ge=MIN_TIMEOUT, strict=True)
    retries: int = Field(default=DEFAULT_RETRIES, ge=0, strict=True)
    idempotent: bool | None = None
    """Whether a repeat is harmless, so the call may be retried; None: as the HTTP method says."""
    forward_headers: tuple[Annotated[str, Field(min_length=1)], ...] = ()
    """Client headers passed upstream, as written (the gateway compares them without case)."""
    auth: AuthConfig | None = None
    requires: tuple[SecurityRequirement, ...] = ()
    """What the API description says the operation needs (the first alternative Crank can send): recorded at
    import; with no `auth`, the publish takes the workspace's credential for its scheme, and a scheme without
    one is reported (import, publish, `/readyz`) instead of failing the first call with the upstream's 401."""
    idempotency: IdempotencyConfig | None = None
    confirmation: ConfirmationConfig = ConfirmationConfig()
    accept: Annotated[str, Field(min_length=1)] = DEFAULT_ACCEPT
    """The upstream request's `Accept` header (a vendor JSON type, say); the answer must still be JSON."""
    body: BodyConfig = BodyConfig()
    """How the call's body is written: JSON unless the operation takes a form, multipart, text or a file (format 5)."""
    output_schema: Literal["publish", "omit"] = "publish"
    """`publish`: the tool publishes the operation's output schema and every answer is checked against it
    (a mismatch is `output_schema_mismatch`). `omit`: no output schema, for upstreams whose answers are
    too loose to promise one; answers pass as they come."""


# -- mappings ----------------------------------------------------------------------------------------


class ArgumentRule(_Model):
    """`{"from": argument, "to": destination}`."""

    argument: str = Field(alias="from")
    to: str


class ConstantRule(_Model):
    """`{"value": constant, "to": destination}`; the constant may be any JSON value, null included."""

    value: JSONValue
    to: str


class TemplateRule(_Model):
    """`{"template": "{first} {last}", "to": destination}`."""

    template: str
    to: str


_RULE_KINDS = {"from": "from-rule", "value": "value-rule", "template": "template-rule"}
_RULE_TAGS: dict[type[BaseModel], str] = {
    ArgumentRule: "from-rule",
    ConstantRule: "value-rule",
    TemplateRule: "template-rule",
}


def _rule_kind(rule: Any) -> str | None:
    """The rule's tag: by its one source key (a rule read from JSON), or by its class."""
    if isinstance(rule, dict):
        kinds = [tag for key, tag in _RULE_KINDS.items() if key in rule]
        return kinds[0] if len(kinds) == 1 else None
    return _RULE_TAGS.get(type(rule))


InputRule = Annotated[
    Annotated[ArgumentRule, Tag("from-rule")] | Annotated[ConstantRule, Tag("value-rule")]
    | Annotated[TemplateRule, Tag("template-rule")],
    Discriminator(
        _rule_kind,
        custom_error_type="input_rule",
        custom_error_message="a rule is an object with 'to' and exactly one of 'from', 'value' or 'template'",
    ),
]  # fmt: skip
"""One input mapping rule (docs/gateway.md, Runtime); `crank.gateway.mapping` checks its destination."""


class OutputSpec(_Model):
    """The output mapping: a JMESPath `select`, key renames, and the longest list kept."""

    select: str | None = None
    rename: dict[str, str] = {}
    max_items: int | None = Field(default=None, ge=1, strict=True)


# -- resources and prompts (docs/gateway.md, Resources and prompts) -----------------------------------

MAX_DOCUMENT_SIZE: Final = 256 * 1024
"""The largest document an agent may hold (characters of text, or bytes once decoded)."""
MAX_DOCUMENTS: Final = 64
MAX_AGENT_MEDIA: Final = 4 * 1024 * 1024
"""The most an agent's documents and prompt images hold together (characters of text and of base64): each is
bounded alone, and this bounds what one agent version makes every replica keep in memory."""
MAX_AGENT_VIEW_BYTES: Final = 8 * 1024 * 1024
"""The largest published view of one agent, as the registry stores it (JSON bytes): about four times the view of
all 1,223 operations of GitHub's description. A replica builds and holds an agent from its view (docs/deployment.md,
"Many tenants"): this bounds what one tenant's agent makes a replica build and keep."""
MAX_PROMPTS: Final = 64
MAX_PROMPT_MESSAGES: Final = 16
MAX_PROMPT_TEMPLATE: Final = 16 * 1024
"""The longest template of one prompt message (characters)."""
MAX_PROMPT_ARGUMENTS: Final = 32
MAX_ENUM_VALUES: Final = 1000
_TEXT_NAME = r"^[A-Za-z0-9_.-]{1,128}$"
_ARGUMENT_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_URI = r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$"
_MIME_TYPE = r"^[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}$"

Texts = dict[str, dict[str, str]]
"""language -> {"title", "description"}: a tool's, a document's or a prompt's translations."""


class AgentDocument(_Model):
    """A static document of an agent (`resources/list`, `resources/read`): the API's own guide for the model,
    say. Text, or bytes sent base64 (`blob`)."""

    uri: str = Field(max_length=2048, pattern=_URI)
    name: str = Field(pattern=_TEXT_NAME)
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=4096)
    mime_type: str = Field(default="text/markdown", pattern=_MIME_TYPE)
    text: str | None = Field(default=None, max_length=MAX_DOCUMENT_SIZE)
    blob: str | None = Field(default=None, max_length=(MAX_DOCUMENT_SIZE * 4) // 3 + 4)
    """Base64 of the bytes."""
    translations: Texts = {}

    @model_validator(mode="after")
    def _one_body(self) -> AgentDocument:
        if (self.text is None) == (self.blob is None):
            raise ValueError("a document has either text or blob (base64)")
        if self.blob is not None:
            _check_base64(self.blob, "blob")
        return self


def _check_base64(value: str, what: str) -> None:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


class ResourceBinding(_Model):
    """A GET operation offered as a resource template too (`resource: true` on the binding, or this object):
    reading a URI runs the tool with the URI's variables as arguments, through the tool's whole pipeline."""

    uri_template: str | None = Field(default=None, max_length=2048)
    """Variables are the tool's arguments. Default: `crank://{workspace}/{agent}/{tool}` and one `/{argument}` per
    path parameter of the operation's URL, in order."""
    mime_type: str = Field(default="application/json", pattern=_MIME_TYPE)


class PromptArgumentSpec(_Model):
    """A declared argument of a stored prompt; `enum` both limits its values and completes them."""

    name: str = Field(pattern=_ARGUMENT_NAME)
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=1024)
    required: bool = False
    enum: tuple[Annotated[str, Field(max_length=256)], ...] | None = Field(default=None, max_length=MAX_ENUM_VALUES)


class PromptImage(_Model):
    data: str = Field(max_length=(MAX_DOCUMENT_SIZE * 4) // 3 + 4)
    """Base64 of the image's bytes."""
    mime_type: str = Field(pattern=r"^image/[A-Za-z0-9.+-]{1,64}$")

    @model_validator(mode="after")
    def _base64(self) -> PromptImage:
        _check_base64(self.data, "image data")
        return self


class PromptMessageSpec(_Model):
    """One message of a stored prompt: a `text` template, an embedded `resource` (a template of one of the agent's
    documents' URIs), or an `image`."""

    role: Literal["user", "assistant"] = "user"
    text: str | None = Field(default=None, max_length=MAX_PROMPT_TEMPLATE)
    resource: str | None = Field(default=None, max_length=2048)
    image: PromptImage | None = None

    @model_validator(mode="after")
    def _one_content(self) -> PromptMessageSpec:
        if sum(part is not None for part in (self.text, self.resource, self.image)) != 1:
            raise ValueError("a message has exactly one of text, resource or image")
        return self


class AgentPrompt(_Model):
    """A stored prompt template (`prompts/list`, `prompts/get`), rendered by a sandboxed Jinja2
    (`crank.sources.prompt_templates`)."""

    name: str = Field(pattern=_TEXT_NAME)
    title: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=4096)
    arguments: tuple[PromptArgumentSpec, ...] = Field(default=(), max_length=MAX_PROMPT_ARGUMENTS)
    messages: tuple[PromptMessageSpec, ...] = Field(min_length=1, max_length=MAX_PROMPT_MESSAGES)
    translations: Texts = {}


# -- the view ----------------------------------------------------------------------------------------


class ToolHints(_Model):
    """MCP tool annotations as published: the operation's, each overridden by the binding's."""

    title: str | None = None
    read_only_hint: bool | None = Field(default=None, alias="readOnlyHint")
    destructive_hint: bool | None = Field(default=None, alias="destructiveHint")
    idempotent_hint: bool | None = Field(default=None, alias="idempotentHint")
    open_world_hint: bool | None = Field(default=None, alias="openWorldHint")


class Target(_Model):
    """http: `method` is the HTTP method (GET when absent); jsonrpc: the remote method's name."""

    url: str
    method: str | None = None


class RuntimeTool(_Model):
    """One published tool: the binding's texts and hints over its operation's call recipe."""

    tool_name: str
    workspace_id: str
    agent_id: str
    operation_id: str
    title: str | None = None
    tool_description: str | None = None
    protocol: Literal["http", "jsonrpc"]
    target: Target
    input_schema: JSONObject | None = None
    output_schema: JSONObject | None = None
    input_mapping: tuple[InputRule, ...] = ()
    output_mapping: OutputSpec = OutputSpec()
    execution_config: ExecutionConfig = ExecutionConfig()
    annotations: ToolHints = ToolHints()
    translations: dict[str, dict[str, str]] = {}
    """language -> {"title", "description"}."""
    format: str | None = None
    """The default result format (json, pretty_json, markdown, plain, toon): the binding's, else the
    operation's; a request may still ask for another. The MCP layer checks the name when the catalog
    is built, so an unknown one fails the publish."""
    resource: ResourceBinding | None = None
    """Offered as a resource template too (GET operations only; format 4)."""

    @model_validator(mode="after")
    def _readable(self) -> RuntimeTool:
        if self.resource is not None and self.http_method != "GET":
            raise ValueError(f"resource: only a GET operation can be read as a resource, not {self.http_method}")
        if self.protocol == "jsonrpc" and self.execution_config.body.kind != "json":
            raise ValueError("execution_config.body: a JSON-RPC call's body is always JSON")
        return self

    @property
    def http_method(self) -> str:
        """The HTTP method the call goes out with: a JSON-RPC call is always a POST."""
        if self.protocol == "jsonrpc":
            return "POST"
        return (self.target.method or DEFAULT_HTTP_METHOD).upper()

    def to_json(self) -> JSONObject:
        """The tool as JSON, without a JSON body's `execution_config.body` (format 4's shape), so that what is
        derived from it (a confirmation's fingerprint) is the same on a replica from before bodies."""
        data = self.model_dump(mode="json", by_alias=True)
        if self.execution_config.body == _JSON_BODY:
            del data["execution_config"]["body"]
        return data


class WorkspaceInfo(_Model):
    id: str
    slug: str
    default_language: str = DEFAULT_LANGUAGE


def check_agent_media(documents: Sequence[AgentDocument], prompts: Sequence[AgentPrompt]) -> None:
    """Refuse an agent whose documents and prompt images together exceed `MAX_AGENT_MEDIA` (ValueError). Checked
    when a draft is saved and when it is published, never when a stored version is loaded: a version published
    before the bound existed is still served."""
    size = sum(len(document.text or document.blob or "") for document in documents)
    size += sum(len(message.image.data) for prompt in prompts for message in prompt.messages if message.image)
    if size > MAX_AGENT_MEDIA:
        raise ValueError(
            f"the agent's documents and prompt images hold {size} characters together, more than the "
            f"{MAX_AGENT_MEDIA} allowed: link to large material instead of storing it"
        )


def check_agent_size(stored: JSONObject, where: str) -> None:
    """Refuse an agent version whose stored view exceeds `MAX_AGENT_VIEW_BYTES` (ValueError). Checked when it is
    published, never when a stored version is loaded: a version published before the bound existed is still
    served."""
    size = len(_json.dumps(stored))
    if size > MAX_AGENT_VIEW_BYTES:
        raise ValueError(
            f"{where}: its published view would be {size} bytes, more than the {MAX_AGENT_VIEW_BYTES} allowed: split "
            "its tools among several agents"
        )


class AgentInfo(_Model):
    id: str
    slug: str
    description: str | None = None
    token_budget: int | None = None
    """The agent's own budget, else its workspace's; None: the linter's default."""
    mode: AgentMode = DEFAULT_AGENT_MODE
    """How its operations are served: as tools (direct) or through discovery's fixed tools. Views written
    before the setting existed have none: direct."""
    limits: Limits | None = None
    """The rate limit and quota of the agent's tool calls, all keys together; None: none (format 2 has none)."""
    documents: tuple[AgentDocument, ...] = Field(default=(), max_length=MAX_DOCUMENTS)
    """Static resources (format 4)."""
    prompts: tuple[AgentPrompt, ...] = Field(default=(), max_length=MAX_PROMPTS)
    """Stored prompt templates (format 4)."""


class RuntimeView(_Model):
    """A published agent version: everything the MCP side reads of it, and nothing from drafts."""

    format_version: Literal[5] = FORMAT_VERSION
    workspace: WorkspaceInfo
    agent: AgentInfo
    tools: tuple[RuntimeTool, ...] = ()

    def to_json(self) -> JSONObject:
        """What the registry stores (`agent_versions.runtime`), in the oldest format that holds it: a view whose
        bodies are all JSON is written as format 4; one that uses nothing of format 4 either (no documents, prompts
        or resource templates) as format 3, and one without limits either as format 2. Replicas of the Crank
        before each format still read it, so a rolling upgrade serves every publish that does not need the new
        format on the old replicas too."""
        data = self.model_dump(mode="json", by_alias=True)
        if any(tool.execution_config.body != _JSON_BODY for tool in self.tools):
            return data
        data["format_version"] = 4
        for tool in data["tools"]:
            del tool["execution_config"]["body"]
        if self.agent.documents or self.agent.prompts or any(tool.resource for tool in self.tools):
            return data
        data["format_version"] = 3
        for name in ("documents", "prompts"):
            del data["agent"][name]
        for tool in data["tools"]:
            del tool["resource"]
        if self.agent.limits is None:
            data["format_version"] = 2
            del data["agent"]["limits"]
        return data


_JSON_BODY: Final = BodyConfig()


# -- loading -----------------------------------------------------------------------------------------


def load_runtime(data: Any, *, where: str = "runtime view") -> RuntimeView:
    """A stored view of any format version; `ConfigurationError` naming `where` and the place if it cannot
    be read."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where}: a runtime view is a JSON object")
    version = data.get("format_version")
    if version is None:
        return _from_format_1(data, where)
    if version == FORMAT_VERSION:
        return _validated(RuntimeView, data, where)
    if version in (2, 3, 4):  # format 5 without bodies (3: nor documents, prompts and resources; 2: nor limits)
        return _validated(RuntimeView, {**data, "format_version": FORMAT_VERSION}, where)
    raise ConfigurationError(
        f"{where}: format_version {version!r} is not one this Crank reads (1 to {FORMAT_VERSION}); "
        "a newer Crank wrote it"
    )


def tool_from_spec(spec: JSONObject, *, where: str | None = None) -> RuntimeTool:
    """A tool from the flat form that a publish reads from drafts and format 1 stored: the operation's
    fields (`protocol`, `target`, schemas, mappings, `execution_config`, `format`) beside the binding's
    (`tool_name`, `title`, `tool_description`, `annotations`, `translations`) and the ids.

    Keys a draft may hold beyond these (samples, import metadata, keys the runtime never read) are left
    out, as they always were; null means "not given"."""
    where = where or f"tool {spec.get('tool_name')!r}"
    data = _known(spec, RuntimeTool)
    for ids in ("workspace_id", "agent_id", "operation_id"):
        data.setdefault(ids, "")  # tools built outside a registry (tests, one-off checks) have none
    data["target"] = _known(spec.get("target"), Target)
    rules = spec.get("input_mapping") or []
    data["input_mapping"] = [_known_rule(rule) for rule in rules] if isinstance(rules, list) else rules
    data["output_mapping"] = spec.get("output_mapping") or {}
    data["execution_config"] = _flat_execution(spec.get("execution_config"))
    data["annotations"] = _known(spec.get("annotations") or {}, ToolHints)  # unknown hints were never sent
    data["translations"] = spec.get("translations") or {}
    return _validated(RuntimeTool, data, where, renamed=_FLAT_NAMES)


def _from_format_1(data: JSONObject, where: str) -> RuntimeView:
    """Format 1: `{"workspace", "agent", "tools"}`, each tool in the flat form of `tool_from_spec`."""
    tools = data.get("tools") or []
    if not isinstance(tools, list):
        raise ConfigurationError(f"{where}: tools must be a list")
    workspace, agent = _known(data.get("workspace"), WorkspaceInfo), _known(data.get("agent"), AgentInfo)
    if isinstance(workspace, dict) and workspace.get("default_language") is None:
        workspace.pop("default_language", None)
    return _validated(
        RuntimeView,
        {
            "workspace": workspace,
            "agent": agent,
            "tools": [tool_from_spec(tool, where=f"{where}, tool {_name(tool)!r}") for tool in tools],
        },
        where,
    )


# The flat form's names for the places `ExecutionConfig` groups, so a message names what the author wrote.
_FLAT_NAMES = {
    "execution_config.confirmation.required": "execution_config.confirmation",
    "execution_config.confirmation.ttl": "execution_config.confirmation_ttl",
}
_FLAT_EXECUTION = (
    "timeout", "retries", "idempotent", "forward_headers", "auth", "requires", "idempotency", "accept", "output_schema",
    "body",
)  # fmt: skip


def execution_config_of(config: Any, *, where: str = "execution_config") -> ExecutionConfig:
    """An operation draft's `execution_config` (its flat form: `confirmation: human`, `confirmation_ttl`) as the
    typed `ExecutionConfig`; a `ConfigurationError` naming what is wrong."""
    return _validated(ExecutionConfig, _flat_execution(config), where)


def _flat_execution(config: Any) -> Any:
    """`execution_config` as drafts write it (and format 1 stored it) -> the shape of `ExecutionConfig`."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        return config  # the model says what is wrong
    data = {key: config[key] for key in _FLAT_EXECUTION if config.get(key) is not None}
    if not config.get("auth"):  # an empty auth object always meant "no credentials"
        data.pop("auth", None)
    else:
        data["auth"] = _known(config["auth"], AuthConfig)
    if "idempotency" in data:
        data["idempotency"] = _known(data["idempotency"], IdempotencyConfig)
    if "body" in data:
        data["body"] = _known(data["body"], BodyConfig)
    retries = data.get("retries")
    if isinstance(retries, float) and retries >= 0:  # the adapter always took the whole part of a number
        data["retries"] = int(retries)
    required = config.get("confirmation")
    human = required == "human" or None  # `confirmation: human`: asked of the user, never a token
    confirmation = {"required": True if human else required, "ttl": config.get("confirmation_ttl"), "human": human}
    data["confirmation"] = {key: value for key, value in confirmation.items() if value is not None}
    return data


def _known(data: Any, model: type[BaseModel]) -> Any:
    """`data` without the keys `model` does not know (by name or alias); anything but an object as it is."""
    if not isinstance(data, dict):
        return data
    names = _names(model)
    return {key: value for key, value in data.items() if key in names}


@functools.cache
def _names(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(model.model_fields) | {field.alias for field in model.model_fields.values() if field.alias}


def _known_rule(rule: Any) -> Any:
    if not isinstance(rule, dict):
        return rule
    return {key: rule[key] for key in ("from", "value", "template", "to") if key in rule}


def _name(tool: Any) -> Any:
    return tool.get("tool_name") if isinstance(tool, dict) else None


def _validated(model: type[_M], data: Any, where: str, *, renamed: dict[str, str] | None = None) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for problem in problems_of(exc):
            place = _place(problem.loc)
            place = (renamed or {}).get(place, place)
            # Tuples keep the models immutable; whoever wrote the JSON wrote a list.
            message = problem.message.replace("a valid tuple", "a valid list")
            problems.append(f"{place}: {message}" if place else message)
        raise ConfigurationError(f"{where}: {'; '.join(problems)}") from None


def _place(loc: tuple[int | str, ...]) -> str:
    """`input_mapping[0].to`; the union tags pydantic puts in the path (`from-rule`) are left out."""
    place = ""
    for part in loc:
        if isinstance(part, int):
            place += f"[{part}]"
        elif part not in _RULE_TAGS.values():
            place += f".{part}" if place else part
    return place
