"""What an `MCPEndpoint` is built from besides its catalog: `EndpointOptions`, how it serves, and `EndpointAccess`,
what a request must prove and pass to be served (authentication, admission and limits). Two typed values, so that
the endpoint's constructor takes three arguments and gateway policy reaches it as one object, not loose callables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from crank.mcp.calls import InvalidArgumentsMode
from crank.mcp.changes import ListChanges
from crank.mcp.formats import DEFAULT_FORMAT
from crank.mcp.server import ServerInfo
from crank.mcp.streams import DEFAULT_CLIENT_REQUEST_TIMEOUT, DEFAULT_MAX_PENDING_REQUESTS, Relay
from crank.types import Scope
from crank.wire.asgi import DEFAULT_MAX_BODY_SIZE
from crank.wire.auth import Authenticator
from crank.wire.jsonrpc import DEFAULT_MAX_BATCH_ANSWER_BYTES, DEFAULT_MAX_BATCH_ITEMS
from crank.wire.middleware import Admission, KnownRefusal

__all__ = ["EndpointAccess", "EndpointOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointOptions:
    """How an endpoint serves its catalog.

    Attributes:
        server_info: name and version reported to clients.
        instructions: optional guidance for the model, sent on `initialize` and `server/discover`.
        default_format: result format when neither the request nor the tool chooses one.
        invalid_arguments: "result" (tool execution error, the default) or "error" (JSON-RPC -32602).
        max_body_size: requests with a larger body get 413.
        max_batch_items / max_batch_answer_bytes: a longer batch is refused whole (400, -32600); once its
            answers pass the byte limit, the items not started are answered -32600 and never run.
        dns_rebinding_protection: True, False, or None (on when the server socket is loopback).
        allowed_hosts / allowed_origins: accepted besides the loopback names and same-origin requests.
        cache_scope / ttl_ms: the 2026-07-28 caching hints on `tools/list` and `server/discover`.
        request_state_secret: signs the `requestState` of `InputRequired` results and the legacy session ids;
            give every replica the same one (default: a random secret per process).
        client_request_timeout: seconds a 2025-11-25 server request (`CallContext.elicit`, `sample`) waits for
            the client's answer POST before the call fails with `client_request_timeout`.
        max_pending_requests: server requests one process waits on at once; past it a question fails at once
            (`client_requests_busy`).
        relay: carries a client's answer POST that reaches this replica to the one that asked and waits for it
            (`crank.state.relay.RedisRelay` for replicas that share a Redis); without one, answers must come
            back to the process that asked.
        changes: tell clients when what a catalog offers changes (`crank.mcp.changes`): `listChanged` is declared,
            2025-11-25 clients get a GET stream and a session id, 2026-07-28 clients `subscriptions/listen`. The
            source that replaces catalogs calls `changes.changed`.
        plain_http: serve the plain `GET /tools` and `POST /call` pair beside the MCP endpoint.
        debug: put exception details in error data. Never in production.
    """

    server_info: ServerInfo = field(default_factory=ServerInfo)
    instructions: str | None = None
    default_format: str = DEFAULT_FORMAT
    invalid_arguments: InvalidArgumentsMode = "result"
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    max_batch_items: int = DEFAULT_MAX_BATCH_ITEMS
    max_batch_answer_bytes: int = DEFAULT_MAX_BATCH_ANSWER_BYTES
    dns_rebinding_protection: bool | None = None
    allowed_hosts: Sequence[str] = ()
    allowed_origins: Sequence[str] = ()
    cache_scope: Literal["public", "private"] = "public"
    ttl_ms: int = 0
    request_state_secret: str | bytes | None = None
    client_request_timeout: float = DEFAULT_CLIENT_REQUEST_TIMEOUT
    max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS
    relay: Relay | None = None
    changes: ListChanges | None = None
    plain_http: bool = True
    debug: bool = False


@dataclass(frozen=True, slots=True)
class EndpointAccess:
    """What a request must prove and pass to be served: every request's bearer token goes through `authenticator`
    (`crank.wire.auth`): a `Principal`, or 401/403 with a `WWW-Authenticate: Bearer` challenge. The provider finds
    the principal in `scope["crank.auth"]`; `tools/list` shows a scope-limited principal only the tools whose
    `required_scopes` it holds, and `tools/call` of another is 403 `insufficient_scope`.

    Attributes:
        authenticator: who a request's token proves.
        metadata_url: the URL of the protected resource metadata (RFC 9728) of the request's resource, named in
            every challenge; None for endpoints that offer no OAuth.
        admit: gets each authenticated request before its body is read, and may refuse it with
            `RateLimitedError`: 429 with `Retry-After` (the gateway's workspace limits). Each item of a JSON-RPC
            batch after the first counts as one request more.
        refused_now: the refusal `admit` would give, when it is known at once without counting (a used-up
            limit): what `MCPEndpoint.answer_early` answers from a request's head.
    """

    authenticator: Authenticator
    metadata_url: Callable[[Scope], str | None] | None = None
    admit: Admission | None = None
    refused_now: KnownRefusal | None = None
