"""`ApiKeys`: who an API key is, as a replica knows it: the keys seen lately, each looked up by its digest.

A replica loads no key at start. A key it has not seen is looked up in the registry by its digest (`confirm`),
within a budget of lookups a second (a quarter of it for one client address) and a few at a time, and kept in a
bounded cache, the oldest lookup dropped first (`CRANK_KEY_CACHE`; a request costs one dictionary look-up, and a
key dropped is looked up again on its next request); a key the registry does not know is
remembered too, in a smaller cache, so that a client repeating a wrong or revoked key costs one lookup. A reload
(`AgentSource.reload`) reads again the cached keys its changes touch: a revoked key is refused on every replica as
soon as its change reaches it. The cache is trusted for `list_max_age` seconds after the registry last confirmed
it; past that, every key is refused with 503 until the registry answers again, so that a key revoked meanwhile
never goes on working on a replica that cannot hear of it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final

from crank.exceptions import DependencyUnavailableError
from crank.registry import Changes, KeyScope, Registry, key_digest
from crank.sources.registry_reads import registry_read
from crank.wire.budgets import CLIENT_SHARE, SharedBudget
from crank.wire.notices import ThrottledLog

__all__ = ["DEFAULT_KEY_CACHE", "DEFAULT_KEY_LIST_MAX_AGE", "KEY_LOOKUPS_PER_SECOND", "ApiKeys", "KeyCacheLimits"]

logger = logging.getLogger("crank.gateway")
_notices = ThrottledLog(logger)

DEFAULT_KEY_CACHE: Final = 10_000
"""API keys a replica keeps (`CRANK_KEY_CACHE`), the most recently looked up: about 1 KB each."""
KEY_LOOKUPS_PER_SECOND: Final = 100.0
"""Registry lookups of keys a replica does not hold, per replica and second, with bursts of as many
(`CRANK_KEY_LOOKUPS_PER_SECOND`); a quarter of them for one client address."""
DEFAULT_KEY_LIST_MAX_AGE: Final = 30.0
"""Seconds a replica trusts the keys it holds without the registry confirming them (a generation read by the
watcher). Past it, a revoked key could still be held: every key is refused with 503 until the registry answers
again."""
LOOKUPS_AT_ONCE: Final = 4
"""Key lookups that run at once (each holds a worker thread); the others wait their turn."""
LOOKUP_QUEUE: Final = 256
"""Requests that may wait for a lookup's turn; past it, 503 with `Retry-After`."""
_ABSENT_CACHE: Final = 4096  # digests the registry does not know, remembered
_DIGEST_CACHE: Final = 4096
_STALE_RETRY_AFTER: Final = 5
_BUSY_RETRY_AFTER: Final = 1
_READ_CHUNK: Final = 500  # digests one registry read asks for (a reload of every held key)
_LOOKUP_ATTEMPTS: Final = 3  # reads of one key when reloads overlap them
_UNKNOWN: Final = object()


@dataclass(frozen=True, slots=True)
class KeyCacheLimits:
    """How many keys a replica holds (`size`) and how many it may look up a second."""

    size: int = DEFAULT_KEY_CACHE
    lookups_per_second: float = KEY_LOOKUPS_PER_SECOND

    def __post_init__(self) -> None:
        if self.size < 1 or self.lookups_per_second <= 0:
            raise ValueError("a key cache holds at least one key and looks up more than none a second")


class ApiKeys:
    """The API keys of one registry, as a replica knows them. `authenticate` is the look-up on every request;
    `confirm` the registry's answer for a key not held; `update` and `confirmed` are the reload's."""

    def __init__(
        self,
        registry: Registry,
        limits: KeyCacheLimits | None = None,
        *,
        list_max_age: float = DEFAULT_KEY_LIST_MAX_AGE,
    ) -> None:
        self.registry = registry
        self.limits = limits = limits or KeyCacheLimits()
        self.list_max_age = list_max_age
        self._held: OrderedDict[str, KeyScope] = OrderedDict()  # digest -> scope, the latest lookup last
        self._absent: OrderedDict[str, None] = OrderedDict()  # digests the registry did not know
        self._digests: dict[str, str] = {}  # key -> its digest, so a call hashes no key it has seen
        self._lock = threading.Lock()  # a reload (in a thread) against a lookup adding its answer (`_look_up`)
        self._epoch = 0  # bumped when a reload starts and ends: a lookup that overlapped one keeps nothing
        self._trusted_until = -math.inf  # monotonic: the cache is trusted until then (`confirmed`)
        self._stale_since: float | None = None  # the start of an episode of unconfirmed keys, logged once
        self._budget = SharedBudget(limits.lookups_per_second, CLIENT_SHARE)  # a quarter of it for one address
        self._turns = asyncio.Semaphore(LOOKUPS_AT_ONCE)
        self._waiting = 0
        self._lookups: dict[str, asyncio.Future[KeyScope | None]] = {}
        """The registry lookup running now for a digest, for its key's other requests."""

    def __len__(self) -> int:
        return len(self._held)

    def update(self, changes: Changes) -> bool:
        """Follow `changes` (the reload's thread): the held keys they may change, and the keys they name, read again
        from the registry; a key no longer there is dropped. True when a key they name is gone (revoked)."""
        with self._lock:
            self._epoch += 1  # a lookup running now may have read the registry before these changes
            if changes.everything:
                self._absent.clear()
                touched = list(self._held)
            else:
                for digest in changes.keys:
                    self._absent.pop(digest, None)
                touched = [digest for digest, scope in list(self._held.items())
                           if changes.touches_key(digest, scope.workspace or "")]  # fmt: skip
        wanted = sorted(set(touched) | changes.keys)
        read: dict[str, KeyScope] = {}
        for start in range(0, len(wanted), _READ_CHUNK):
            read.update(self.registry.api_keys(wanted[start : start + _READ_CHUNK]))
        with self._lock:
            self._epoch += 1
            for digest in touched:
                scope = read.get(digest)
                if scope is None:
                    self._held.pop(digest, None)
                elif digest in self._held:
                    self._held[digest] = scope
        return any(digest not in read for digest in changes.keys)

    def confirmed(self) -> None:
        """The registry confirmed the keys just now (a reload, or a generation read): trusted for `list_max_age`."""
        now = time.monotonic()
        self._trusted_until = now + self.list_max_age
        if self._stale_since is not None:
            logger.info("the registry confirmed the API keys again after %.0f s: accepting keys",
                        now - self._stale_since)  # fmt: skip
            self._stale_since = None

    def authenticate(self, token: str | None) -> KeyScope | None:
        """The scope of an API key held here, or None for no key, one the registry does not know, or one not held
        (then `confirm`).

        Raises `DependencyUnavailableError` (503) for any key while the keys are not trusted (`list_max_age`)."""
        if token is None:
            return None
        if time.monotonic() > self._trusted_until:
            self._refuse_stale()
        digest = self._digests.get(token)
        if digest is None:
            if len(self._digests) >= _DIGEST_CACHE:  # bounded: a flood of wrong keys cannot grow it
                self._digests.clear()
            digest = self._digests[token] = key_digest(token)
        return self._held.get(digest)

    async def confirm(self, token: str, client: Hashable = "") -> KeyScope | None:
        """A key `authenticate` does not hold, looked up in the registry by its digest: a key made a moment ago (by
        the CLI, the admin API or another replica) works on its first request, and a key dropped from the cache on
        its next one. None: the registry has no such key (remembered: asked again once a change names it).

        Lookups take one from the replica's budget and one from the `client` address's (a quarter of it), and run
        `LOOKUPS_AT_ONCE` at a time: a flood of wrong keys costs the registry that much. Past the budget, or with
        `LOOKUP_QUEUE` requests waiting, a key is 503 with `Retry-After` (it may be good), as is a lookup the
        registry fails. The requests of the key being looked up meanwhile wait for that lookup's answer (a client's
        first requests with a new key often come together)."""
        if time.monotonic() > self._trusted_until:
            self._refuse_stale()
        digest = self._digests.get(token) or key_digest(token)
        if digest in self._absent:
            return None
        running = self._lookups.get(digest)
        if running is not None:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if running.cancelled() and (task is None or not task.cancelling()):
                    return await self.confirm(token, client)  # the lookup's own request went away: look again
                raise
        self._take_lookup(client)
        answer: asyncio.Future[KeyScope | None] = asyncio.get_running_loop().create_future()
        self._lookups[digest] = answer
        try:
            key_scope = await self._look_up(digest)
        except asyncio.CancelledError:
            answer.cancel()
            raise
        except BaseException as exc:
            answer.set_exception(exc)
            answer.exception()  # retrieved: no waiter is no error
            raise
        else:
            answer.set_result(key_scope)
            return key_scope
        finally:
            del self._lookups[digest]

    def _refuse_stale(self) -> None:
        """503 once the cache is older than `list_max_age` (past `_trusted_until`): a key revoked meanwhile must not
        go on working on a replica that cannot hear of it. The first refusal of an episode is logged."""
        now = time.monotonic()
        if self._stale_since is None:
            self._stale_since = now
            age = now - (self._trusted_until - self.list_max_age)
            logger.warning("the registry has not confirmed the API keys for %.0f s (more than %g s): refusing every "
                           "key with 503 until it answers", age, self.list_max_age)  # fmt: skip
        raise DependencyUnavailableError(
            "registry",
            "This server cannot confirm API keys right now (its registry does not answer); retry later.",
            retry_after=_STALE_RETRY_AFTER,
        )

    def _take_lookup(self, client: Hashable) -> None:
        """One lookup from the client's share and the replica's budget, with a place in the queue; else 503."""
        if not (self._waiting < LOOKUP_QUEUE and self._budget.take(client)):
            _notices.warning("key-lookups", "API keys this replica does not hold come faster than it may look them "
                             "up (%g a second): refusing them with 503", self.limits.lookups_per_second)  # fmt: skip
            raise DependencyUnavailableError(
                "registry",
                "This server is looking up many API keys at once; retry in a moment.",
                retry_after=_BUSY_RETRY_AFTER,
            )

    async def _look_up(self, digest: str) -> KeyScope | None:
        self._waiting += 1
        try:
            await self._turns.acquire()
        finally:
            self._waiting -= 1
        try:
            for _ in range(_LOOKUP_ATTEMPTS):
                epoch = self._epoch
                key_scope = await registry_read(self.registry.api_key, digest, what="look up API keys",
                                                retry_after=_STALE_RETRY_AFTER)  # fmt: skip
                with self._lock:
                    if self._epoch == epoch:
                        self._keep(digest, key_scope)
                        return key_scope
                # A reload ran meanwhile: this answer may be older than a revocation it carries, so it is read
                # again (that read starts after the reload did, and sees what it saw).
        finally:
            self._turns.release()
        return key_scope  # reloads overlapped every read: the last one started after the others, and is kept by none

    def _keep(self, digest: str, key_scope: KeyScope | None) -> None:
        """A lookup's answer held, the oldest lookup pushed out past the bounds (under the lock)."""
        if key_scope is None:
            self._absent[digest] = None
            if len(self._absent) > _ABSENT_CACHE:
                self._absent.popitem(last=False)
            return
        self._held[digest] = key_scope
        while len(self._held) > self.limits.size:
            self._held.popitem(last=False)
