"""Users' connections as a process keeps them (`crank.gateway.user_connections`): the vault on SQLite and PostgreSQL,
the refresh lock in a real Redis shared by two "replicas" (two `UserConnections` over the same database and Redis),
a clock of the test's own for expiry. What the connect pages and the MCP client do with them:
tests/sources/test_connect.py."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace

import itsdangerous.timed
import pytest

from crank.exceptions import ToolConfigurationError, UserCredentialsError
from crank.gateway.token_endpoint import TokenFailure
from crank.gateway.user_connections import (
    CONNECT_LINK_MAX_AGE,
    CONNECTION_RECHECK,
    REFRESH_FAILURE_MEMORY,
    Connected,
    ConnectLinkError,
    ConnectLinks,
    ConnectRequest,
    UpstreamConnectionRequiredError,
    UserConnections,
)
from crank.registry import Registry
from crank.registry.vault import Vault, VaultKeys, new_vault_key
from crank.state.store import MemoryStore, RedisStore
from crank.wire.auth import Principal

pytestmark = pytest.mark.anyio
ISSUER = "https://id.example.com"
ROOT = "https://mcp.example.com"


def user(name: str) -> Principal:
    return Principal("acme", id=f"acme|{ISSUER}|sub:{name}", method="oauth", subject=name, issuer=ISSUER,
                     scopes=frozenset(), token=f"access-{name}")  # fmt: skip


def keys(*encoded: str) -> VaultKeys:
    return VaultKeys([base64.urlsafe_b64decode(key) for key in encoded])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Refreshes:
    """An authorization server's refresh grant as the credential calls it: counts, waits on `gate`, answers a new
    access token (no new refresh token: the old one stays valid), or fails as told."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.count = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.failure: TokenFailure | None = None

    async def __call__(self, connected: Connected) -> Connected:
        self.count += 1
        await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return replace(connected, access_token=f"access-{self.count}", expires_at=self.clock.now + 600)


async def held_refresh(connections: UserConnections, refreshes: Refreshes) -> asyncio.Task[str]:
    """Alice's expired connection saved, and a call whose refresh is on its way and held (`refreshes.gate`
    cleared) until the test lets it go: the task of that call."""
    refreshes.gate.clear()
    expired = Connected("first", "refresh-1", refreshes.clock.now - 1)
    await connections.save("acme", "people", ISSUER, "alice", expired)
    call = asyncio.create_task(connections.token("acme", "people", user("alice"), refreshes))
    await until_refreshing(refreshes)
    return call


async def until_refreshing(refreshes: Refreshes) -> None:
    for _ in range(100):  # bounded: until the lock's holder is refreshing
        if refreshes.count:
            return
        await asyncio.sleep(0.01)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    shared = RedisStore(redis_url, prefix=f"test-connections-{secrets.token_hex(4)}:")
    yield shared
    await shared.aclose()


def replicas(registry: Registry, store: RedisStore, clock: Clock, count: int = 2) -> list[UserConnections]:
    registry.create_workspace("acme", "Acme")
    given = keys(new_vault_key())
    return [UserConnections(Vault(registry.engine, given), store, ConnectLinks(ROOT, given), clock=clock)
            for _ in range(count)]  # fmt: skip


async def test_an_expired_token_is_refreshed_once_across_replicas_and_calls(
    registry: Registry, store: RedisStore
) -> None:
    clock, refreshes = Clock(), None
    one, two = replicas(registry, store, clock)
    refreshes = Refreshes(clock)
    await one.save("acme", "people", ISSUER, "alice", Connected("first", "refresh-1", clock.now + 600))
    assert await two.token("acme", "people", user("alice"), refreshes) == "first"  # read from the vault
    assert two.cached("acme", "people", user("alice")) == "first" and refreshes.count == 0
    clock.now += 600  # expired for both
    assert one.cached("acme", "people", user("alice")) is None
    refreshes.gate.clear()
    calls = [asyncio.create_task(replica.token("acme", "people", user("alice"), refreshes))
             for replica in (one, two) for _ in range(5)]  # fmt: skip
    await until_refreshing(refreshes)
    refreshes.gate.set()
    assert set(await asyncio.gather(*calls)) == {"access-1"} and refreshes.count == 1
    kept = Vault(registry.engine, one.vault.keys).get("acme", "people", ISSUER, "alice")  # type: ignore[union-attr]
    assert kept is not None and kept["access_token"] == "access-1" and kept["refresh_token"] == "refresh-1"


async def test_a_refused_refresh_ends_the_connection_and_a_failing_one_keeps_it(
    registry: Registry, store: RedisStore
) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    refreshes = Refreshes(clock)
    await one.save("acme", "people", ISSUER, "alice", Connected("first", "refresh-1", clock.now - 1))
    refreshes.failure = TokenFailure("http_500")  # the server is down: the connection stays, the call fails
    for _ in range(3):  # remembered a few seconds: asked once, not once per call
        with pytest.raises(TokenFailure):
            await one.token("acme", "people", user("alice"), refreshes)
    assert refreshes.count == 1
    assert one.vault.get("acme", "people", ISSUER, "alice") is not None  # type: ignore[union-attr]
    clock.now += REFRESH_FAILURE_MEMORY
    refreshes.failure = TokenFailure("http_400", "invalid_grant")  # revoked or expired: connect again
    with pytest.raises(UpstreamConnectionRequiredError) as asked:
        await one.token("acme", "people", user("alice"), refreshes)
    assert not await one.connected("acme", "people", ISSUER, "alice")
    assert asked.value.details["connect_url"].startswith(ROOT + "/connect/acme/people?request=")
    # No refresh token and expired: asked again, nothing sent.
    await one.save("acme", "people", ISSUER, "bob", Connected("bobs", None, clock.now - 1))
    with pytest.raises(UpstreamConnectionRequiredError):
        await one.token("acme", "people", user("bob"), refreshes)
    assert refreshes.count == 2  # bob's expired token without a refresh token: none asked
    assert one.vault.get("acme", "people", ISSUER, "bob") is None  # type: ignore[union-attr]  # and it is gone
    assert not await one.connected("acme", "people", ISSUER, "bob")  # a waiting call is not told he connected


async def test_a_connection_removed_on_one_replica_stops_on_every_other_within_the_recheck(
    registry: Registry, store: RedisStore
) -> None:
    clock = Clock()
    one, two = replicas(registry, store, clock)
    refreshes = Refreshes(clock)
    await one.save("acme", "people", ISSUER, "alice", Connected("first", None, None))  # no expiry given
    assert await two.token("acme", "people", user("alice"), refreshes) == "first"
    assert await one.remove("acme", subject="alice") == 1
    assert two.cached("acme", "people", user("alice")) == "first"  # until it reads the vault again
    clock.now += CONNECTION_RECHECK
    assert two.cached("acme", "people", user("alice")) is None
    with pytest.raises(UpstreamConnectionRequiredError):
        await two.token("acme", "people", user("alice"), refreshes)


async def test_a_call_without_a_user_or_a_server_without_keys_is_refused_before_anything(
    registry: Registry, store: RedisStore
) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    refreshes = Refreshes(clock)
    for nobody in (None, Principal("acme", id="key-1"), Principal("acme", method="anonymous")):
        with pytest.raises(UserCredentialsError) as refused:
            await one.token("acme", "people", nobody, refreshes)
        assert refused.value.error_code == "user_credentials_required"
    without = UserConnections(None, MemoryStore(), None)
    with pytest.raises(ToolConfigurationError, match="CRANK_VAULT_KEYS"):
        await without.token("acme", "people", user("alice"), refreshes)


def test_a_connect_link_is_this_servers_for_its_workspace_and_scheme_and_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    current, old = new_vault_key(), new_vault_key()
    links = ConnectLinks(ROOT, keys(current, old))
    asked = ConnectRequest("acme", "people", ISSUER, "alice", "e1")
    link = links.link(asked)
    signed = link.split("?request=", 1)[1]
    assert links.read(signed, "acme", "people") == asked
    assert ConnectLinks(ROOT, keys(old, current)).read(signed, "acme", "people") == asked  # a rotation keeps it
    for wrong in ((signed, "acme", "mail"), (signed, "other", "people"), (signed[:-2] + "xx", "acme", "people")):
        with pytest.raises(ConnectLinkError):
            links.read(*wrong)
    with pytest.raises(ConnectLinkError):  # another server's keys
        ConnectLinks(ROOT, keys(new_vault_key())).read(signed, "acme", "people")

    made = time.time() - CONNECT_LINK_MAX_AGE - 1  # a link signed longer ago than links work
    monkeypatch.setattr(itsdangerous.timed, "time", SimpleNamespace(time=lambda: made))
    stale = links.link(asked).split("?request=", 1)[1]
    monkeypatch.undo()
    with pytest.raises(ConnectLinkError):
        links.read(stale, "acme", "people")


async def test_an_issuer_with_or_without_its_trailing_slash_is_one(registry: Registry, store: RedisStore) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    slashed = replace(user("alice"), issuer=ISSUER + "/")  # as a provider's tokens may name it
    asked = one.required("acme", "people", slashed)
    signed = asked.details["connect_url"].split("?request=", 1)[1]
    request = one.links.read(signed, "acme", "people")  # type: ignore[union-attr]
    assert request.issuer == ISSUER  # the connect page saves it under the one spelling
    await one.save("acme", "people", request.issuer, request.subject, Connected("first", None, None))
    assert await one.token("acme", "people", slashed, Refreshes(clock)) == "first"
    assert await one.remove("acme", issuer=ISSUER, subject="alice") == 1


async def test_a_token_the_api_refused_is_renewed_once_and_one_that_cannot_be_is_asked_for_again(
    registry: Registry, store: RedisStore
) -> None:
    clock = Clock()
    one, two = replicas(registry, store, clock)
    refreshes = Refreshes(clock)
    await one.save("acme", "people", ISSUER, "alice", Connected("first", "refresh-1", clock.now + 600))
    # Fresh by its expiry, yet the API answered it 401: refreshed; another call that met the same 401 on another
    # replica takes the token renewed already, without a second refresh.
    assert await one.renew("acme", "people", user("alice"), "first", refreshes) == "access-1"
    assert await two.renew("acme", "people", user("alice"), "first", refreshes) == "access-1"
    assert refreshes.count == 1
    # Without a refresh token, the API's 401 ends the connection: asked for again, and gone from the vault.
    await one.save("acme", "people", ISSUER, "bob", Connected("bobs", None, None))
    with pytest.raises(UpstreamConnectionRequiredError):
        await two.renew("acme", "people", user("bob"), "bobs", refreshes)
    assert one.vault.get("acme", "people", ISSUER, "bob") is None  # type: ignore[union-attr]
    with pytest.raises(UpstreamConnectionRequiredError):  # never connected
        await one.renew("acme", "people", user("carol"), "made-up", refreshes)
    assert refreshes.count == 1


async def test_a_connection_removed_while_its_refresh_runs_stays_removed(registry: Registry, store: RedisStore) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    refreshes = Refreshes(clock)
    call = await held_refresh(one, refreshes)
    assert await one.remove("acme", subject="alice") == 1  # the user removes it meanwhile
    refreshes.gate.set()
    with pytest.raises(UpstreamConnectionRequiredError):
        await call
    assert one.vault.get("acme", "people", ISSUER, "alice") is None  # type: ignore[union-attr]
    assert one.cached("acme", "people", user("alice")) is None


async def test_a_call_waiting_for_another_replicas_refresh_gives_up_in_time_or_when_the_connection_goes(
    registry: Registry, store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crank.gateway import user_connections as module

    clock = Clock()
    one, two = replicas(registry, store, clock)
    refreshes = Refreshes(clock)
    holder = await held_refresh(one, refreshes)
    monkeypatch.setattr(module, "REFRESH_WAIT", 0.5)
    with pytest.raises(TokenFailure) as busy:  # recoverable: the caller may retry
        await two.token("acme", "people", user("alice"), refreshes)
    assert busy.value.cause == "refresh_busy"
    monkeypatch.setattr(module, "REFRESH_WAIT", 30.0)
    waiting = asyncio.create_task(two.token("acme", "people", user("alice"), refreshes))
    await asyncio.sleep(0.1)
    assert await two.remove("acme", subject="alice") == 1
    with pytest.raises(UpstreamConnectionRequiredError):
        await asyncio.wait_for(waiting, 10)
    refreshes.gate.set()
    with pytest.raises(UpstreamConnectionRequiredError):
        await holder
    assert refreshes.count == 1


async def test_a_row_under_a_key_this_server_lacks_is_the_operators_error_and_never_a_token(
    registry: Registry, store: RedisStore
) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    await one.save("acme", "people", ISSUER, "alice", Connected("first", None, None))
    elsewhere = UserConnections(Vault(registry.engine, keys(new_vault_key())), store, None, clock=clock)
    with pytest.raises(ToolConfigurationError, match="cannot be read on this server") as refused:
        await elsewhere.token("acme", "people", user("alice"), Refreshes(clock))
    assert "first" not in str(refused.value)
    with pytest.raises(ToolConfigurationError, match="CRANK_PUBLIC_URL"):  # no public URL: no page to send to
        await elsewhere.of_user("acme", user("alice"))
    assert Connected.from_json({"access_token": 12}) is None  # a row that is no connection: none


def test_a_connect_link_too_long_or_not_a_request_is_refused_before_anything() -> None:
    links = ConnectLinks(ROOT, keys(new_vault_key()))
    with pytest.raises(ConnectLinkError, match="too long"):
        links.read("x" * 4096, "acme", "people")
    signed = links._signer.dumps({"workspace": "acme"})  # this server's signature over something else
    with pytest.raises(ConnectLinkError, match="not a connect request"):
        links.read(signed, "acme", "people")


async def test_a_connection_made_again_while_its_refresh_runs_is_kept_not_overwritten(
    registry: Registry, store: RedisStore
) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    refreshes = Refreshes(clock)
    call = await held_refresh(one, refreshes)
    # Meanwhile the user connects again (perhaps another account at the API): the new connection stays.
    await one.save("acme", "people", ISSUER, "alice", Connected("second", "refresh-2", clock.now + 600))
    refreshes.gate.set()
    assert await call == "second"
    kept = one.vault.get("acme", "people", ISSUER, "alice")  # type: ignore[union-attr]
    assert kept is not None and (kept["access_token"], kept["refresh_token"]) == ("second", "refresh-2")


async def test_an_expired_connection_whose_refresh_fails_is_not_read_again_per_call(
    registry: Registry, store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    (one,) = replicas(registry, store, clock, 1)
    refreshes = Refreshes(clock)
    await one.save("acme", "people", ISSUER, "alice", Connected("first", "refresh-1", clock.now + 600))
    assert await one.token("acme", "people", user("alice"), refreshes) == "first"
    clock.now += 600  # expired; the token endpoint is down
    refreshes.failure = TokenFailure("http_500")
    reads: list[str] = []
    read = one.vault.read  # type: ignore[union-attr]
    monkeypatch.setattr(one.vault, "read", lambda *args: reads.append("read") or read(*args))
    for _ in range(10):
        with pytest.raises(TokenFailure):
            await one.token("acme", "people", user("alice"), refreshes)
    # The first call reads the row (its last read was 600 s ago), and so does the refresh under its lock; the
    # other nine meet the remembered failure with the row kept in memory.
    assert refreshes.count == 1 and len(reads) == 2


async def test_a_call_that_waited_too_long_for_another_replicas_refresh_is_told_to_retry(
    registry: Registry, store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crank.exceptions import ExternalServiceError
    from crank.gateway import user_connections as module
    from crank.gateway.client import UpstreamClient
    from crank.gateway.credentials import TokenCache, compile_credential
    from crank.registry.runtime import AuthConfig

    clock = Clock()
    one, two = replicas(registry, store, clock)
    refreshes = Refreshes(clock)
    holder = await held_refresh(one, refreshes)
    monkeypatch.setattr(module, "REFRESH_WAIT", 0.3)
    auth = AuthConfig(type="user_connection", scheme="people", client_id="crank", secret="env:UNUSED",
                      token_url=ISSUER + "/token", authorization_url=ISSUER + "/auth")  # fmt: skip
    client = UpstreamClient()
    try:
        credential = compile_credential(auth, client, workspace="acme", where="whoami",
                                        tokens=TokenCache(connections=two))  # fmt: skip
        with pytest.raises(ExternalServiceError) as busy:  # the other replica's call: nothing sent
            await credential.obtain(user("alice"))
    finally:
        await client.aclose()
    payload = busy.value.to_payload("req-1")
    assert payload["error_code"] == "upstream_token_busy" and payload["recoverable"] is True
    assert busy.value.may_have_taken_effect is False and "first" not in json.dumps(payload)
    refreshes.gate.set()
    assert await holder == "access-1"
