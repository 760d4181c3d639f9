"""Telling every MCP replica at once that the registry changed: PostgreSQL NOTIFY, or Redis pub/sub.

Every change that bumps the registry generation (a publish, a rollback, a key made or revoked) announces
the new generation:
- on PostgreSQL, with `pg_notify` in the change's own transaction (`Registry`): delivered when it commits,
  never for a change rolled back, and by every writer (admin API, CLI) with no setting at all;
- on another database (SQLite) when Redis is configured, with a Redis PUBLISH after the commit
  (`RedisAnnouncer`, given to the `Registry` by whoever opens it with the settings).

Each MCP replica holds one listening connection (`ChangeListener`) and reloads as soon as it is told. An
announcement is a hint, never the only way: the replica's poll of the generation stays, so a message lost
with a dropped connection costs one poll interval, and the listener reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from sqlalchemy import make_url

from crank.registry.database import DEFAULT_CONNECT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, connection_options
from crank.state import DEFAULT_REDIS_TIMEOUT
from crank.wire.notices import ThrottledLog

__all__ = [
    "POSTGRES_CHANNEL",
    "REDIS_CHANNEL",
    "ChangeListener",
    "PostgresListener",
    "RedisAnnouncer",
    "RedisListener",
    "change_announcer",
    "change_listener",
]

logger = logging.getLogger("crank.registry")
_notices = ThrottledLog(logger)

POSTGRES_CHANNEL: Final = "crank_registry"
"""The LISTEN/NOTIFY channel; the payload is the new generation."""
REDIS_CHANNEL: Final = "crank:registry"
"""The Redis pub/sub channel; the message is the new generation."""
FIRST_RETRY: Final = 0.5
"""Seconds before the first reconnection of a dropped listener; doubled on each failure up to `LAST_RETRY`."""
LAST_RETRY: Final = 30.0

OnChange = Callable[[int | None], None]
"""Told a generation (None: "check", after a (re)connection, when something may have been missed)."""


def change_listener(registry_url: str, redis_url: str | None) -> ChangeListener | None:
    """The listener a replica uses: PostgreSQL's own when the registry is PostgreSQL (the announcement
    travels with the change, whoever makes it), else Redis pub/sub when Redis is configured, else none
    (polling only)."""
    if make_url(registry_url).get_backend_name() == "postgresql":
        return PostgresListener(registry_url)
    if redis_url is not None:
        return RedisListener(redis_url)
    return None


def change_announcer(registry_url: str, redis_url: str | None) -> RedisAnnouncer | None:
    """What a `Registry` must be given to announce its changes: a Redis announcer when the registry is not
    PostgreSQL (which announces by itself) and Redis is configured."""
    if make_url(registry_url).get_backend_name() != "postgresql" and redis_url is not None:
        return RedisAnnouncer(redis_url)
    return None


class RedisAnnouncer:
    """PUBLISH of the new generation after a change commits. A failure is logged and forgotten: the change
    is made, and every replica's poll finds it."""

    def __init__(self, url: str, *, timeout: float = DEFAULT_REDIS_TIMEOUT) -> None:
        import redis  # here: a registry that announces nothing over Redis (and the CLI) never imports it
        import redis.retry
        from redis.backoff import NoBackoff

        # No retries (redis-py's default is 10): a Redis that is away costs one timeout, not a minute, in the
        # thread that committed the change.
        self._client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=redis.retry.Retry(NoBackoff(), 0)
        )
        self._errors = (redis.RedisError, OSError)

    def __call__(self, generation: int) -> None:
        try:
            self._client.publish(REDIS_CHANNEL, str(generation))
        except self._errors as exc:
            _notices.warning("announce", "telling the replicas of a registry change over Redis failed: %s; "
                             "they see it at their next poll", exc)  # fmt: skip

    def close(self) -> None:
        self._client.close()


class ChangeListener:
    """Listens until cancelled (`run`), reconnecting with backoff; `healthy` while connected."""

    name = "changes"
    errors: tuple[type[Exception], ...] = (OSError,)

    def __init__(self) -> None:
        self.healthy = False

    async def run(self, on_change: OnChange) -> None:
        """Call `on_change` with each announced generation, and with None after every (re)connection: a
        change made while nobody listened is found by the check that follows."""
        delay = FIRST_RETRY
        while True:
            try:
                async for generation in self.messages():
                    if not self.healthy and delay > FIRST_RETRY:
                        logger.info("listening for registry changes (%s) again", self.name)
                    self.healthy = True
                    delay = FIRST_RETRY
                    on_change(generation)
                problem = "the connection closed"
            except self.errors as exc:
                problem = _first_line(exc)
            except Exception as exc:  # never a task that dies and is restarted at once by the next request
                logger.exception("listening for registry changes (%s) failed unexpectedly", self.name)
                problem = _first_line(exc)
            self.healthy = False
            _notices.warning(f"listen:{self.name}", "listening for registry changes (%s) failed: %s; polling "
                             "meanwhile, reconnecting in %g s", self.name, problem, delay)  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, LAST_RETRY)

    def messages(self) -> AsyncIterator[int | None]:
        """None once connected, then each announced generation; ends or raises when the connection drops."""
        raise NotImplementedError


class PostgresListener(ChangeListener):
    """One autocommit connection that LISTENs on `POSTGRES_CHANNEL`, with the registry's keepalives, so a
    peer gone silent (a network black hole) is noticed in about 25 s instead of never."""

    name = "postgresql"

    def __init__(self, registry_url: str, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
        import psycopg  # here, as redis in `RedisListener`: only a replica that listens imports it

        super().__init__()
        self.errors = (psycopg.Error, OSError)
        url = make_url(registry_url).set(drivername="postgresql")
        self.conninfo = url.render_as_string(hide_password=False)
        self.options: dict[str, Any] = connection_options("postgresql", connect_timeout, DEFAULT_STATEMENT_TIMEOUT)

    async def messages(self) -> AsyncIterator[int | None]:
        import psycopg
        from psycopg import sql

        connection = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, **self.options)
        async with connection:
            await connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(POSTGRES_CHANNEL)))
            yield None
            async for notice in connection.notifies():
                yield _generation(notice.payload)


class RedisListener(ChangeListener):
    """One Redis connection subscribed to `REDIS_CHANNEL` (TCP keepalive on)."""

    name = "redis"

    def __init__(self, url: str, *, timeout: float = DEFAULT_REDIS_TIMEOUT) -> None:
        import redis

        super().__init__()
        self.errors = (redis.RedisError, OSError)
        self.url = url
        self.timeout = timeout

    async def messages(self) -> AsyncIterator[int | None]:
        # No retries of its own: a dropped connection ends `messages`, and `run` reconnects with its backoff (and
        # a check after reconnecting), instead of redis-py retrying ten times behind its back.
        import redis.asyncio
        import redis.asyncio.retry
        from redis.backoff import NoBackoff

        client = redis.asyncio.Redis.from_url(
            self.url, socket_connect_timeout=self.timeout, socket_keepalive=True,
            retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
        )  # fmt: skip
        async with client, client.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(REDIS_CHANNEL)
            yield None
            async for message in pubsub.listen():
                yield _generation(message["data"])


def _generation(payload: Any) -> int | None:
    """The announced generation, or None (just check) for a payload that is not one: anyone who may NOTIFY
    or PUBLISH can send anything there."""
    text = payload.decode("latin-1") if isinstance(payload, bytes) else str(payload)
    if len(text) > _MAX_GENERATION_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


_MAX_GENERATION_DIGITS = 19  # a 64-bit counter


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
