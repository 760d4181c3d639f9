"""`RedisRelay`: a client's answer to a server request, carried to the process that asked (Redis pub/sub).

A 2025-11-25 tool that asks its client something (`CallContext.elicit`) waits in the process that holds the
response stream, but the client answers with a new POST, which a load balancer may send to any replica. The
process that gets an answer it is not waiting for publishes it on the asker's channel
(`<prefix><process>`); each process that asks listens on its own channel from its first question on. Nothing is
stored: an answer whose asker is gone is dropped (the asker's call has ended anyway).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import redis.asyncio
from redis.backoff import NoBackoff

__all__ = ["DEFAULT_CHANNEL_PREFIX", "RedisRelay"]

logger = logging.getLogger("crank.state")

DEFAULT_CHANNEL_PREFIX = "crank:mcp-answers:"
_RECONNECT_DELAY = 1.0
_MAX_PAYLOAD = 1024 * 1024  # an answer larger than a request body could be is dropped, never relayed


class RedisRelay:
    """Publishes answers to the asking process's channel, and listens on this process's own."""

    def __init__(self, url: str, *, channel_prefix: str = DEFAULT_CHANNEL_PREFIX, timeout: float = 5.0) -> None:
        self.url = url
        self.channel_prefix = channel_prefix
        self.timeout = timeout
        self._client = redis.asyncio.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)

    async def forward(self, process: str, payload: bytes) -> bool:
        """Publish an answer for `process`; False when no process listens there (or Redis is away)."""
        if len(payload) > _MAX_PAYLOAD:
            return False
        try:
            return bool(await self._client.publish(self.channel_prefix + process, payload))
        except (redis.RedisError, OSError) as exc:
            logger.warning("could not relay a client's answer: %s", exc)
            return False

    async def listen(self, process: str, deliver: Callable[[bytes], None], ready: asyncio.Event) -> None:
        """Hand every answer published for `process` to `deliver`, reconnecting when Redis drops; `ready` is
        set once subscribed (the asker sends its question only then)."""
        while True:
            client = redis.asyncio.Redis.from_url(
                self.url, socket_connect_timeout=self.timeout, socket_keepalive=True,
                retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
            )  # fmt: skip
            try:
                async with client, client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel_prefix + process)
                    ready.set()
                    async for message in pubsub.listen():
                        data = message.get("data")
                        if isinstance(data, bytes):
                            deliver(data)
            except (redis.RedisError, OSError) as exc:
                logger.warning("the answer relay lost Redis (%s); reconnecting", exc)
                await asyncio.sleep(_RECONNECT_DELAY)

    async def aclose(self) -> None:
        await self._client.aclose()
