"""Users' own connections to APIs (OAuth 2 authorization code with PKCE): each signed-in user connects their account
once, on Crank's connect page (`crank.sources.connect`), and their tokens are kept in the vault
(`crank.registry.vault`: encrypted, in the registry's database, so every replica sees a connection made on any).

`UserConnections` is the process's view of them:

- **A call** finds the user's access token in a bounded per-workspace cache of decrypted entries
  (`CONNECTION_CACHE_BYTES` each, `CONNECTION_CACHE_TOTAL_BYTES` in all), else in the vault (one read and one
  decryption, then kept). No entry: `UpstreamConnectionRequiredError`, with a connect link for this user.
- **An expired token** is refreshed with its refresh token once for every call that needs it: one flight per
  connection in the process, and one replica at a time across replicas (a lock of `REFRESH_LEASE` seconds in the
  state store: Redis when replicas share one); the others wait for the new row (`REFRESH_WAIT` at most). A refresh
  the authorization server refuses (`invalid_grant`: revoked, expired) removes the connection and asks the user to
  connect again.
- **A connect link** (`ConnectLinks`) names the workspace, the scheme and the user (issuer and subject) who asked,
  signed with a key derived from the vault keys (every replica verifies every other's), and works for
  `CONNECT_LINK_MAX_AGE` seconds. It carries no secret: the connect page signs the browser's user in at the
  workspace's issuer and connects only the user the link names.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from cachetools import LRUCache
from itsdangerous import BadSignature, URLSafeTimedSerializer

from crank.exceptions import ConfigurationError, ToolConfigurationError, UserCredentialsError
from crank.gateway.token_endpoint import TOKEN_EXPIRY_MARGIN, TokenAnswer, TokenFailure
from crank.gateway.tokens import issuer_key, same_issuer
from crank.registry.vault import Vault, VaultKeys
from crank.state.store import StateStore
from crank.types import JSONObject
from crank.wire.auth import Principal
from crank.wire.tenant_cache import TenantCaches

__all__ = [
    "CONNECT_LINK_MAX_AGE",
    "CONNECT_PATH",
    "CONNECTION_CACHE_BYTES",
    "CONNECTION_CACHE_TOTAL_BYTES",
    "REFRESH_LEASE",
    "REFRESH_WAIT",
    "ConnectLinkError",
    "ConnectLinks",
    "ConnectRequest",
    "Connected",
    "UpstreamConnectionRequiredError",
    "UserConnections",
]

CONNECT_PATH: Final = "/connect"
"""Where the connect pages are served, under the server's public URL."""
CONNECT_LINK_MAX_AGE: Final = 600
"""Seconds a connect link works: long enough to sign in and consent, short enough that an old one is useless."""
CONNECTION_CACHE_BYTES: Final = 2 * 1024 * 1024
"""What one workspace's decrypted connections may take in a process; past it its least recently used go."""
CONNECTION_CACHE_TOTAL_BYTES: Final = 32 * 1024 * 1024
"""What every workspace's decrypted connections may take together; past it the largest workspace's go first."""
CONNECTION_RECHECK: Final = 30.0
"""Seconds a process uses a connection it read before reading the vault again: a connection removed on any replica
(by its user or an operator) stops being used everywhere within this time."""
REFRESH_LEASE: Final = 15.0
"""Seconds a connection's refresh lock lasts without its holder's heartbeat (every third of it): another replica
may refresh once a holder died."""
REFRESH_WAIT: Final = 20.0
"""Seconds a call waits for the refresh another replica is making before it fails as `upstream_token_busy`
(recoverable: call again)."""
REFRESH_FAILURE_MEMORY: Final = 5.0
"""Seconds a refresh that failed at the token endpoint (down, slow, garbled) is remembered for the connection: its
calls meanwhile fail at once, and the endpoint is asked once per interval."""
_POLL: Final = 0.2
_MAX_FAILURES: Final = 10_000
_ENTRY_OVERHEAD: Final = 300

CONNECT_ACTION: Final = (
    "Do not retry yet: ask the user to open the link in `details.connect_url` in their browser and connect their "
    "account (it signs them in first), then call the tool again."
)


class UpstreamConnectionRequiredError(UserCredentialsError):
    """The tool acts as the signed-in user through their own connection to the API, and this user has not
    connected (or their connection ended): `details.connect_url` is where they connect. Nothing was sent. A client
    that can open URLs is asked to open it instead (URL elicitation, `crank.sources.connect`)."""

    default_code = "upstream_connection_required"
    default_action = CONNECT_ACTION

    def __init__(self, message: str, *, url: str = "", elicitation: str = "", scheme: str = "", **options: Any) -> None:
        if url:
            options["details"] = {"connect_url": url, "scheme": scheme}
        super().__init__(message, **options)
        self.url = url
        self.elicitation = elicitation
        self.scheme = scheme


@dataclass(frozen=True, slots=True)
class ConnectRequest:
    """What a connect link asks: connect `subject` (of `issuer`) to `scheme` of `workspace`, for the elicitation
    `elicitation` (the id a completion notification names)."""

    workspace: str
    scheme: str
    issuer: str
    subject: str
    elicitation: str


class ConnectLinkError(Exception):
    """A connect link that is not this server's, or too old."""


class ConnectLinks:
    """Connect links of one server: `{public_url}/connect/{workspace}/{scheme}?request=<signed>`."""

    def __init__(self, public_url: str, keys: VaultKeys) -> None:
        self.public_url = public_url.rstrip("/")
        # itsdangerous signs with the last key and accepts any: the current vault key's derivation goes last.
        self._signer = URLSafeTimedSerializer(list(reversed(keys.derived("connect links"))), salt="crank-connect")

    def link(self, request: ConnectRequest) -> str:
        signed = self._signer.dumps([request.workspace, request.scheme, request.issuer, request.subject,
                                     request.elicitation])  # fmt: skip
        return (
            f"{self.public_url}{CONNECT_PATH}/{quote(request.workspace, safe='')}/{quote(request.scheme, safe='')}"
            f"?request={signed}"
        )

    def read(self, signed: str, workspace: str, scheme: str) -> ConnectRequest:
        """The request a link carries, if this server signed it for this workspace and scheme within
        `CONNECT_LINK_MAX_AGE` seconds; `ConnectLinkError` otherwise."""
        if len(signed) > 2048:
            raise ConnectLinkError("too long")
        try:
            fields = self._signer.loads(signed, max_age=CONNECT_LINK_MAX_AGE)
        except BadSignature:
            raise ConnectLinkError("not this server's, or too old") from None
        if not (isinstance(fields, list) and len(fields) == 5 and all(isinstance(field, str) for field in fields)):
            raise ConnectLinkError("not a connect request")
        request = ConnectRequest(*fields)
        if (request.workspace, request.scheme) != (workspace, scheme):
            raise ConnectLinkError("made for another workspace or scheme")
        return request


@dataclass(frozen=True, slots=True)
class Connected:
    """A user's tokens for one scheme, as the vault keeps them. `expires_at`: epoch seconds (None: the
    authorization server said no expiry, so the token is used until the API refuses it)."""

    access_token: str
    refresh_token: str | None = None
    expires_at: float | None = None
    scope: str | None = None
    connected_at: float | None = None
    version: bytes | None = field(default=None, compare=False)
    """The vault row's version when it was read (`Vault.read`): a refresh writes over that row only."""

    def fresh(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at - TOKEN_EXPIRY_MARGIN > now

    def to_json(self) -> JSONObject:
        return {"access_token": self.access_token, "refresh_token": self.refresh_token,
                "expires_at": self.expires_at, "scope": self.scope, "connected_at": self.connected_at}  # fmt: skip

    @classmethod
    def from_answer(cls, answer: TokenAnswer, now: float, *, previous: Connected | None = None) -> Connected:
        """The tokens of a token endpoint's answer (a code's, or a refresh's: its refresh token, when it sends no
        new one, stays valid)."""
        expires_at = now + answer.expires_in if answer.expires_in is not None else None
        refresh = answer.refresh_token or (previous.refresh_token if previous is not None else None)
        scope = answer.scope or (previous.scope if previous is not None else None)
        since = previous.connected_at if previous is not None else now
        return cls(answer.access_token, refresh, expires_at, scope, since)

    @classmethod
    def from_json(cls, data: JSONObject, version: bytes | None = None) -> Connected | None:
        token = data.get("access_token")
        if not isinstance(token, str):
            return None
        refresh, expires, scope, since = (data.get(name) for name in ("refresh_token", "expires_at", "scope",
                                                                     "connected_at"))  # fmt: skip
        return cls(token, refresh if isinstance(refresh, str) else None,
                   float(expires) if isinstance(expires, int | float) else None,
                   scope if isinstance(scope, str) else None,
                   float(since) if isinstance(since, int | float) else None, version)  # fmt: skip


Refresh = Callable[[Connected], Awaitable[Connected]]
"""A connection's refresh at its token endpoint (the credential's): the new tokens, or `TokenFailure`."""


_Held = tuple[Connected, float, float]
"""A connection as a process keeps it: until when a call uses its token without a look at the vault
(`CONNECTION_RECHECK` seconds after it was read, or until the token expires, less `TOKEN_EXPIRY_MARGIN`), and when
it was read (an expired token is refreshed from it without reading the vault again, within the recheck)."""


def _entry_bytes(key: Hashable, value: _Held) -> int:
    return len(value[0].access_token) + len(value[0].refresh_token or "") + _ENTRY_OVERHEAD


class UserConnections:
    """The users' connections of one process (see the module). `vault` and `links` are None when the server has
    no vault keys (`CRANK_VAULT_KEYS`): a tool that acts through connections then fails as `configuration_error`."""

    def __init__(
        self, vault: Vault | None, state: StateStore, links: ConnectLinks | None, *,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.vault = vault
        self.state = state
        self.links = links
        self.clock = clock
        self._held: TenantCaches[_Held] = TenantCaches(CONNECTION_CACHE_BYTES, CONNECTION_CACHE_TOTAL_BYTES,
                                                           _entry_bytes)  # fmt: skip
        self._flights: dict[Hashable, asyncio.Task[Connected]] = {}
        # A refresh's failure by connection: its cause and detail (never the exception: its frames hold tokens), and
        # until when (`clock`).
        self._failed: LRUCache[Hashable, tuple[str, str | None, float]] = LRUCache(maxsize=_MAX_FAILURES)

    # -- calls --------------------------------------------------------------------------------------------------

    def cached(self, workspace: str, scheme: str, user: Principal) -> str | None:
        """The user's access token when this process holds a fresh one (no wait, no database)."""
        if user.issuer is None:
            return None
        held = self._held.get(workspace, (scheme, issuer_key(user.issuer), user.subject))
        return held[0].access_token if held is not None and self.clock() < held[1] else None

    async def token(self, workspace: str, scheme: str, user: Principal | None, refresh: Refresh) -> str:
        """The user's access token: kept, else read from the vault, refreshed when it expired;
        `UpstreamConnectionRequiredError` when the user has no connection (or it ended)."""
        who = _who(user)
        vault = self._vault()
        kept = self._held.get(workspace, (scheme, *who))
        held = kept[0] if kept is not None and self.clock() - kept[2] < CONNECTION_RECHECK else None
        if held is None:
            held = await self._read(vault, workspace, scheme, who)
        if held is None:
            raise self.required(workspace, scheme, user)
        if not held.fresh(self.clock()):
            held = await self._join(workspace, scheme, user, held, refresh)
        return held.access_token

    async def renew(self, workspace: str, scheme: str, user: Principal | None, refused: str, refresh: Refresh) -> str:
        """A token in place of `refused`, which the API answered with 401: the one another call renewed already,
        else a refresh; a connection that cannot be refreshed is asked for again."""
        who = _who(user)
        vault = self._vault()
        held = await self._read(vault, workspace, scheme, who)
        if held is None:
            raise self.required(workspace, scheme, user)
        if held.access_token != refused and held.fresh(self.clock()):
            return held.access_token
        if held.refresh_token is None:
            raise await self._end(vault, workspace, scheme, user, held)
        return (await self._join(workspace, scheme, user, held, refresh, force=True)).access_token

    def drop(self, workspace: str, scheme: str, user: Principal, refused: str) -> None:
        """Forget `refused` in this process (the API answered it with 401): the next call reads the vault again."""
        key = (scheme, issuer_key(user.issuer or ""), user.subject)
        held = self._held.get(workspace, key)
        if held is not None and held[0].access_token == refused:
            self._held.pop(workspace, key)

    def required(self, workspace: str, scheme: str, user: Principal | None) -> UpstreamConnectionRequiredError:
        """The error that asks `user` to connect, with their connect link."""
        issuer, subject = _who(user)
        links = self._links()
        elicitation = secrets.token_urlsafe(16)
        url = links.link(ConnectRequest(workspace, scheme, issuer, subject, elicitation))
        return UpstreamConnectionRequiredError(
            f"This tool acts as the signed-in user through their own connection to the API ({scheme}), and they "
            f"have not connected it yet, or their connection ended. Nothing was sent. They connect at {url}",
            url=url, elicitation=elicitation, scheme=scheme,
        )  # fmt: skip

    # -- the connect page and operators ---------------------------------------------------------------------------

    async def save(self, workspace: str, scheme: str, issuer: str, subject: str, connected: Connected) -> None:
        """Keep a new connection (the connect page's): in the vault for every replica, and in this process; a
        mark in the state store tells the calls that wait for it (`connected`), on whichever replica."""
        vault = self._vault()
        await asyncio.to_thread(vault.put, workspace, scheme, issuer, subject, connected.to_json())
        self._keep(workspace, (scheme, issuer, subject), connected)
        await self.state.put(_mark(workspace, scheme, issuer, subject), {"at": self.clock()}, CONNECT_LINK_MAX_AGE)

    async def connected(self, workspace: str, scheme: str, issuer: str, subject: str) -> bool:
        """Whether the user connected lately (what a waiting call polls: the state store's mark, cheap, then the
        vault once to be sure)."""
        if await self.state.get(_mark(workspace, scheme, issuer, subject)) is None:
            return False
        return await self._read(self._vault(), workspace, scheme, (issuer, subject)) is not None

    async def of_user(self, workspace: str, user: Principal | None) -> JSONObject:
        """What a user may see of their own connections in the workspace (never a token), and the page where they
        remove them: the agent's `crank://connections` resource."""
        issuer, subject = _who(user)
        entries = await asyncio.to_thread(self._vault().entries, workspace, subject=subject)
        own = [{"scheme": entry.scheme, "connected_at": entry.created_at, "updated_at": entry.updated_at}
               for entry in entries if same_issuer(entry.issuer, issuer)]  # fmt: skip
        page = f"{self._links().public_url}{CONNECT_PATH}/{quote(workspace, safe='')}"
        return {"connections": own, "manage_url": page}

    async def remove(self, workspace: str, *, scheme: str | None = None, issuer: str | None = None,
                     subject: str | None = None) -> int:  # fmt: skip
        """Remove connections (a user's own, or an operator's revocation); how many went. This process forgets
        them at once, every other within `CONNECTION_RECHECK` seconds."""
        removed = await asyncio.to_thread(self._vault().delete, workspace, scheme=scheme, issuer=issuer,
                                          subject=subject)  # fmt: skip
        self._held.clear(workspace)
        return removed

    # -- inside ------------------------------------------------------------------------------------------------

    def _keep(self, workspace: str, key: Hashable, connected: Connected) -> None:
        now = self.clock()
        until = now + CONNECTION_RECHECK
        if connected.expires_at is not None:
            until = min(until, connected.expires_at - TOKEN_EXPIRY_MARGIN)
        self._held.put(workspace, key, (connected, until, now))

    def _vault(self) -> Vault:
        if self.vault is None:
            raise ToolConfigurationError(
                "This tool acts as the user through their own connection, and this server keeps no connections: "
                "it has no vault key (CRANK_VAULT_KEYS)."
            )
        return self.vault

    def _links(self) -> ConnectLinks:
        if self.links is None:
            raise ToolConfigurationError(
                "This tool acts as the user through their own connection, and this server has no public URL "
                "(CRANK_PUBLIC_URL) to send them to its connect page."
            )
        return self.links

    async def _read(self, vault: Vault, workspace: str, scheme: str, who: tuple[str, str]) -> Connected | None:
        try:
            found = await asyncio.to_thread(vault.read, workspace, scheme, *who)
        except ConfigurationError as missing:  # a row under a key this server lacks: the operator's
            raise ToolConfigurationError(f"The user's connection cannot be read on this server: {missing}") from None
        connected = Connected.from_json(*found) if found is not None else None
        key = (scheme, *who)
        if connected is None:
            self._held.pop(workspace, key)
        else:
            self._keep(workspace, key, connected)
        return connected

    async def _join(
        self,
        workspace: str,
        scheme: str,
        user: Principal | None,
        stale: Connected,
        refresh: Refresh,
        *,
        force: bool = False,
    ) -> Connected:
        key = (workspace, scheme, *_who(user))
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.get_running_loop().create_task(self._refresh(workspace, scheme, user, stale, refresh,
                                                                          force))  # fmt: skip
            self._flights[key] = flight
            flight.add_done_callback(functools.partial(self._landed, key))
        return await asyncio.shield(flight)

    def _landed(self, key: Hashable, flight: asyncio.Task[Connected]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()

    async def _refresh(
        self, workspace: str, scheme: str, user: Principal | None, stale: Connected, refresh: Refresh, force: bool
    ) -> Connected:
        """One refresh across replicas: the lock's holder refreshes (unless another replica did just before),
        renewing its lease while it works; the others wait for its row."""
        vault = self._vault()
        who = _who(user)
        remembered = self._failed.get((workspace, scheme, *who))
        if remembered is not None and self.clock() < remembered[2]:
            raise TokenFailure(remembered[0], remembered[1])
        lock = "connect-refresh:" + hashlib.sha256("\0".join((workspace, scheme, *who)).encode()).hexdigest()
        claim = secrets.token_urlsafe(12)
        if not await self.state.claim(lock, {"claim": claim}, REFRESH_LEASE, REFRESH_LEASE):
            return await self._await_other(vault, workspace, scheme, user, stale)
        heartbeat = asyncio.get_running_loop().create_task(self._keep_lease(lock, claim))
        try:
            current = await self._read(vault, workspace, scheme, who)
            if current is None:
                raise self.required(workspace, scheme, user)
            if current.access_token != stale.access_token and (current.fresh(self.clock()) or not force):
                return current  # another replica refreshed it just before
            if current.refresh_token is None:  # expired, and nothing to renew it with: connect again
                raise await self._end(vault, workspace, scheme, user, current)
            try:
                renewed = await refresh(current)
            except TokenFailure as failure:
                if failure.detail in ("invalid_grant", "unauthorized_client"):  # revoked or expired: connect again
                    raise await self._end(vault, workspace, scheme, user, current) from None
                until = self.clock() + REFRESH_FAILURE_MEMORY
                self._failed[(workspace, scheme, *who)] = (failure.cause, failure.detail, until)
                raise
            self._failed.pop((workspace, scheme, *who), None)
            # Written over the row it renewed only: a removal meanwhile stays a removal, and a new connection
            # made meanwhile (maybe of another account) is never overwritten with the old one's tokens.
            assert current.version is not None
            if await asyncio.to_thread(vault.replace, workspace, scheme, *who, renewed.to_json(),
                                       version=current.version):  # fmt: skip
                self._keep(workspace, (scheme, *who), renewed)
                return renewed
            now = await self._read(vault, workspace, scheme, who)
            if now is None:
                raise self.required(workspace, scheme, user)
            return now
        finally:
            heartbeat.cancel()
            await self.state.replace_if(lock, claim, None, REFRESH_LEASE)  # only its own lock, never another's

    async def _keep_lease(self, lock: str, claim: str) -> None:
        """The refresh lock's heartbeat: a refresh that takes longer than the lease keeps it (a slow token
        endpoint never lets a second replica refresh the same token at the same time)."""
        while await self.state.renew(lock, claim, REFRESH_LEASE):
            await asyncio.sleep(REFRESH_LEASE / 3)

    async def _end(self, vault: Vault, workspace: str, scheme: str, user: Principal | None,
                   ended: Connected) -> UpstreamConnectionRequiredError:  # fmt: skip
        """Remove a connection that can no longer be used (the row read as `ended` only: not one made since), and
        the error that asks its user to connect again."""
        who = _who(user)
        await asyncio.to_thread(vault.delete, workspace, scheme=scheme, issuer=who[0], subject=who[1],
                                version=ended.version)  # fmt: skip
        self._held.pop(workspace, (scheme, *who))
        return self.required(workspace, scheme, user)

    async def _await_other(
        self, vault: Vault, workspace: str, scheme: str, user: Principal | None, stale: Connected
    ) -> Connected:
        who = _who(user)
        deadline = time.monotonic() + REFRESH_WAIT
        while time.monotonic() < deadline:
            await asyncio.sleep(_POLL)
            current = await self._read(vault, workspace, scheme, who)
            if current is None:
                raise self.required(workspace, scheme, user)
            if current.access_token != stale.access_token:
                return current
        raise TokenFailure("refresh_busy")


def _mark(workspace: str, scheme: str, issuer: str, subject: str) -> str:
    return "connected:" + hashlib.sha256("\0".join((workspace, scheme, issuer, subject)).encode()).hexdigest()


def _who(user: Principal | None) -> tuple[str, str]:
    """The user a connection belongs to: the issuer and subject of their sign-in. An API key, or a caller without
    credentials, has none: such a call is refused before anything is sent."""
    if user is None or user.method == "api_key" or user.anonymous or user.issuer is None or user.subject is None:
        raise UserCredentialsError(
            "This tool acts as the signed-in user through their own connection to the API, and this call has no "
            "signed-in user: it came with an API key, or without credentials. Nothing was sent."
        )
    return issuer_key(user.issuer), user.subject
