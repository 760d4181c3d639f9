"""`ApiKeys`: a replica's list of the registry's API keys, and who a key is.

The list is loaded with the agents (`AgentSource.reload`) and trusted for `key_list_max_age` seconds after the
registry last confirmed it; past that, every key is refused with 503 until the registry answers again, so that a
key revoked meanwhile never goes on working on a replica that cannot hear of it. A key the list does not know is
looked up in the registry (`confirm`): a key made a moment ago works on its first request, at a bounded cost.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Final

from crank.exceptions import DependencyUnavailableError
from crank.registry import Changes, KeyScope, Registry, key_digest
from crank.sources.registry_reads import registry_read
from crank.wire.notices import ThrottledLog

__all__ = ["DEFAULT_KEY_LIST_MAX_AGE", "KEY_LOOKUPS_PER_SECOND", "ApiKeys"]

logger = logging.getLogger("crank.gateway")
_notices = ThrottledLog(logger)

KEY_LOOKUPS_PER_SECOND: Final = 10.0
"""Registry lookups of keys a replica has not loaded yet (`ApiKeys.confirm`), per replica and second."""
DEFAULT_KEY_LIST_MAX_AGE: Final = 30.0
"""Seconds a replica trusts its list of API keys without the registry confirming it (a generation read by the
watcher). Past it, a revoked key could still be in the list: every key is refused with 503 until the registry
answers again."""
_DIGEST_CACHE: Final = 4096
_STALE_RETRY_AFTER: Final = 5


class ApiKeys:
    """The API keys of one registry, as a replica knows them. `authenticate` is the look-up on every request;
    `confirm` the registry's answer for a key the list does not know; `update` and `confirmed` are the reload's."""

    def __init__(
        self,
        registry: Registry,
        *,
        lookups_per_second: float = KEY_LOOKUPS_PER_SECOND,
        list_max_age: float = DEFAULT_KEY_LIST_MAX_AGE,
    ) -> None:
        self.registry = registry
        self.lookups_per_second = lookups_per_second
        self.list_max_age = list_max_age
        self._keys: dict[str, KeyScope] = {}
        self._digests: dict[str, str] = {}  # key -> its digest, so a call hashes no key it has seen
        self._lock = threading.Lock()  # a reload (in a thread) against a lookup adding its key (`_look_up`)
        self._trusted_until = -math.inf  # monotonic: the list is trusted until then (`confirmed`)
        self._stale_since: float | None = None  # the start of an episode of unconfirmed keys, logged once
        self._lookup_budget = max(lookups_per_second, 1.0)
        self._lookup_refilled = time.monotonic()
        self._lookups: dict[str, asyncio.Future[KeyScope | None]] = {}
        """The registry lookup running now, by key digest (at most one at a time), for its key's other requests."""

    def update(self, keys: dict[str, KeyScope], changes: Changes) -> bool:
        """Take the registry's keys (by digest) that `changes` may change, as `Registry.api_keys(changes)` read them:
        those keys are now these, the others stay. True when a key this replica knew is gone (revoked)."""
        with self._lock:
            known = {} if changes.everything else self._keys
            kept = {
                digest: scope
                for digest, scope in known.items()
                if not changes.touches_key(digest, scope.workspace or "")
            }
            fresh = {**kept, **keys}
            gone = bool(self._keys.keys() - fresh.keys())
            self._keys = fresh
        return gone

    def confirmed(self) -> None:
        """The registry confirmed the list just now (a reload, or a generation read): trusted for `list_max_age`."""
        now = time.monotonic()
        self._trusted_until = now + self.list_max_age
        if self._stale_since is not None:
            logger.info("the registry confirmed the API keys again after %.0f s: accepting keys",
                        now - self._stale_since)  # fmt: skip
            self._stale_since = None

    def authenticate(self, token: str | None) -> KeyScope | None:
        """The scope of an API key, or None for no key or one this replica does not know (then `confirm`).

        Raises `DependencyUnavailableError` (503) for any key while the list is not trusted (`list_max_age`)."""
        if token is None:
            return None
        if time.monotonic() > self._trusted_until:
            self._refuse_stale()
        digest = self._digests.get(token)
        if digest is None:
            if len(self._digests) >= _DIGEST_CACHE:  # bounded: a flood of wrong keys cannot grow it
                self._digests.clear()
            digest = self._digests[token] = key_digest(token)
        return self._keys.get(digest)

    async def confirm(self, token: str) -> KeyScope | None:
        """A key `authenticate` does not know, looked up in the registry: a key made a moment ago (by the CLI, the
        admin API or another replica) works on its first request instead of after the next poll.

        At most `lookups_per_second` lookups a second and one at a time, so a flood of wrong keys costs the
        registry that much and holds one worker thread at most; past the budget an unknown key is refused (401)
        without a lookup. The requests of the key being looked up meanwhile wait for that lookup's answer (a
        client's first requests with a new key often come together). A registry that fails the lookup is 503 (the
        key may be good)."""
        if time.monotonic() > self._trusted_until:
            self._refuse_stale()
        digest = self._digests.get(token) or key_digest(token)
        running = self._lookups.get(digest)
        if running is not None:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if running.cancelled() and (task is None or not task.cancelling()):
                    return await self.confirm(token)  # the lookup's own request went away: look again
                raise
        if self._lookups or not self._take_lookup():
            return None
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
        """503 once the list is older than `list_max_age` (past `_trusted_until`): a key revoked meanwhile must not
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

    async def _look_up(self, digest: str) -> KeyScope | None:
        keys = self._keys
        key_scope = await registry_read(self.registry.api_key, digest, what="look up API keys",
                                        retry_after=_STALE_RETRY_AFTER)  # fmt: skip
        if key_scope is None:
            return None
        with self._lock:
            if self._keys is not keys:
                # A reload came in meanwhile: its list is newer than this lookup (the key may have been revoked
                # since), so it decides; adding the key back would let a revoked key live on.
                return self._keys.get(digest)
            self._keys = {**keys, digest: key_scope}  # a new dict: readers on the loop never see it half made
        return key_scope

    def _take_lookup(self) -> bool:
        """One lookup from a budget of `lookups_per_second` that refills continuously."""
        now = time.monotonic()
        rate = self.lookups_per_second
        self._lookup_budget = min(max(rate, 1.0), self._lookup_budget + (now - self._lookup_refilled) * rate)
        self._lookup_refilled = now
        if self._lookup_budget < 1:
            return False
        self._lookup_budget -= 1
        return True
