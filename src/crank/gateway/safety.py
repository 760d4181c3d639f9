"""Two guarantees the gateway keeps itself, whatever the upstream does (seed 004):

**Idempotency.** An operation names an argument as its idempotency key
(`execution_config.idempotency: {"argument": "request_id", "header": "Idempotency-Key", "window": 86400}`).
The key goes upstream in the header, and the gateway guarantees at most one effect per key within
the window (a day by default, `crank.registry.runtime.DEFAULT_IDEMPOTENCY_WINDOW`): the first call
claims the key (an atomic add in the state store), a repeat with the same arguments gets the stored
result without calling the upstream, the same key with other arguments is `idempotency_key_reused`,
a repeat while the first runs is `idempotency_in_progress`. A first call that fails before the
upstream acted (a refused connection, a 4xx, 429 or 503, a mapping error) is not stored and frees the
key for a retry; one that may have acted (a timeout, another 5xx, a dropped connection, a cancelled
call) keeps the key as `idempotency_outcome_unknown` until the window ends.

A claim is kept for the whole window; only its owner writes an outcome over it or frees it. While it
works, the owner renews a lease on the claim (`IDEMPOTENCY_LEASE` seconds, renewed every third of it).
A claim whose lease lapsed without an outcome (its replica died, or the store failed when the outcome
was to be written) is `idempotency_outcome_unknown` to every repeat: never free, never run twice.

**Two-step confirmation.** A destructive operation (DELETE by default; `execution_config.confirmation`
true or false says otherwise) never reaches the upstream on its first call: that returns
`confirmation_required` with a token. The model repeats the same call with `_crank_confirmation_token`.
The token is 256 random bits, single-use (taken from the store in one step), expires after
`execution_config.confirmation_ttl` seconds (300 by default, `DEFAULT_CONFIRMATION_TTL`), and is
bound to the workspace, agent, operation, operation version (a digest of its published definition)
and the canonical arguments, compared in constant time. A mismatch, reuse, expiry or forgery is
`confirmation_invalid`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from crank import _json
from crank.exceptions import ConfigurationError, ConfirmationError, IdempotencyError, ToolError
from crank.registry.runtime import ConfirmationConfig, IdempotencyConfig
from crank.state import StateStore
from crank.types import JSONObject
from crank.wire.notices import ThrottledLog

__all__ = [
    "CONFIRMATION_ARGUMENT",
    "HUMAN_CONFIRMATION_SENTENCE",
    "IDEMPOTENCY_LEASE",
    "Confirmation",
    "Idempotency",
    "fingerprint",
]

logger = logging.getLogger("crank.gateway")
_renewal_failures = ThrottledLog(logger)  # while the store is down, every call in flight fails each heartbeat

IDEMPOTENCY_LEASE = 10.0
"""Seconds a claimed idempotency key stays "in progress" without a heartbeat from its owner. Past it, a claim
without an outcome is `idempotency_outcome_unknown`. Short enough that a client learns of a dead replica soon;
long enough that a busy event loop does not miss three heartbeats in a row (docs/safety.md)."""

CONFIRMATION_ARGUMENT = "_crank_confirmation_token"
CONFIRMATION_SENTENCE = (
    "Destructive: the first call only returns a confirmation token; repeat the same call with the same "
    f"arguments plus {CONFIRMATION_ARGUMENT} to run it."
)

HUMAN_CONFIRMATION_SENTENCE = "Destructive: the user is asked to confirm each call before it runs."


def fingerprint(*parts: Any) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of the parts."""
    return hashlib.sha256(_json.dumps_sorted(list(parts))).hexdigest()


@dataclass(frozen=True)
class Idempotency:
    argument: str
    header: str
    window: float
    scope: str  # workspace and operation: a key means the same thing in every agent binding the operation
    lease: float = IDEMPOTENCY_LEASE

    @classmethod
    def compile(
        cls, config: IdempotencyConfig | None, input_schema: JSONObject, scope: str, *, where: str
    ) -> Idempotency | None:
        if config is None:
            return None
        if config.argument not in (input_schema.get("properties") or {}):
            raise ConfigurationError(f"{where}: idempotency argument {config.argument!r} is not in the input schema")
        return cls(config.argument, config.header, config.window, scope)

    async def run(
        self,
        state: StateStore,
        arguments: dict[str, Any],
        in_flight_ttl: float,
        call: Callable[[], Awaitable[JSONObject]],
        who: str = "",
    ) -> JSONObject:
        """`call` once per key and argument set; its JSON-able outcome is what repeats get back.

        `in_flight_ttl` is how long the call may take (its timeouts and retries): the claim lasts at least
        that, and the window. `who` is the caller's identity (`Principal.id`): a key one caller used is not
        another's to replay."""
        value = arguments.get(self.argument)
        if value is None:
            return await call()  # no key given: nothing to deduplicate on
        key = f"idem:{self.scope}:{fingerprint(who, value) if who else fingerprint(value)}"
        arguments_print = fingerprint(arguments)
        claim = secrets.token_hex(16)  # ours: every later write checks it
        ttl = max(self.window, in_flight_ttl)  # never free while it runs, whatever the window
        running = {"state": "running", "arguments": arguments_print, "claim": claim}
        if not await state.claim(key, running, ttl, self.lease):
            return self._repeat(*await state.inspect(key), arguments_print)
        heartbeat = _Heartbeat(state, key, claim, self.lease)
        unknown = {"state": "unknown", "arguments": arguments_print, "claim": claim}
        try:
            outcome = await call()
        except BaseException as exc:
            heartbeat.stop()
            # Nothing happened upstream (refused, 4xx, 503, bad mapping): free the key for a retry. A timeout,
            # a 5xx, a cancelled or crashed call: the upstream may have acted, keep the key.
            untouched = isinstance(exc, ToolError) and not exc.may_have_taken_effect
            await _settle(state, key, claim, None if untouched else unknown, ttl)
            raise
        heartbeat.stop()
        done = {"state": "done", "arguments": arguments_print, "claim": claim, "outcome": outcome}
        await _settle(state, key, claim, done, ttl)
        return outcome  # the upstream acted: its answer is the caller's even if the store could not keep it

    def _repeat(self, record: JSONObject | None, leased: bool, arguments_print: str) -> JSONObject:
        if record is None:  # its window ended between the two steps: in flight to us, and a repeat claims it anew
            record, leased = {"state": "running", "arguments": arguments_print}, True
        if not hmac.compare_digest(str(record.get("arguments")), arguments_print):
            raise IdempotencyError(
                f"The idempotency key {self.argument!r} was already used with other arguments.",
                error_code="idempotency_key_reused", recoverable=True,
                suggested_action=f"Use a new {self.argument} for a new request; reuse one only to repeat a call.",
            )  # fmt: skip
        state = record.get("state")
        if state == "done":
            outcome: JSONObject = record["outcome"]
            return outcome
        if state == "unknown" or not leased:
            raise self._unknown(interrupted=state != "unknown")
        raise IdempotencyError(
            f"A call with this {self.argument} is still running; it is never run twice.",
            error_code="idempotency_in_progress", recoverable=True,
            suggested_action=f"Wait a few seconds, then repeat the same call with the same {self.argument}: you "
            "get its result once it is written, or idempotency_outcome_unknown if the call was interrupted. "
            f"A new {self.argument} would run it again.",
        )  # fmt: skip

    def _unknown(self, *, interrupted: bool) -> IdempotencyError:
        why = (
            "was interrupted before its outcome was recorded (the server running it stopped, or its state store failed)"
            if interrupted
            else "failed in a way that may still have changed data upstream (a timeout or a server error)"
        )
        return IdempotencyError(
            f"An earlier call with this {self.argument} {why}, so it is not repeated.",
            error_code="idempotency_outcome_unknown", recoverable=True,
            suggested_action="Check whether the change happened (read it back) before trying again with a "
            f"new {self.argument}.",
        )  # fmt: skip


class _Heartbeat:
    """Renews the claim's lease every third of it until stopped. Most calls end before the first beat: for
    them it is one timer, armed and cancelled, and no task (the lease costs nothing, docs/safety.md)."""

    def __init__(self, state: StateStore, key: str, claim: str, lease: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._renewing: asyncio.Task[None] | None = None
        self._timer = self._loop.call_later(lease / 3, self._start, state, key, claim, lease)

    def _start(self, state: StateStore, key: str, claim: str, lease: float) -> None:
        self._renewing = self._loop.create_task(_renew_until_cancelled(state, key, claim, lease))

    def stop(self) -> None:
        self._timer.cancel()
        if self._renewing is not None:
            self._renewing.cancel()


async def _renew_until_cancelled(state: StateStore, key: str, claim: str, lease: float) -> None:
    """Renew now, then every third of the lease. A lease that lapsed stays lapsed: repeats have been told
    the outcome is unknown, and a late outcome still replaces the claim."""
    while True:
        try:
            if not await state.renew(key, claim, lease):
                return
        except Exception as exc:  # unreachable or timed out: the lease lapses unless a later beat gets through
            _renewal_failures.warning(
                "idempotency_lease", "could not renew an idempotency lease",
                idempotency_scope=key, error=f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        await asyncio.sleep(lease / 3)


async def _settle(state: StateStore, key: str, claim: str, value: JSONObject | None, ttl: float) -> None:
    """Write the claim's outcome (or free it). When the store fails or times out (`DEFAULT_REDIS_TIMEOUT`),
    the claim stays as it was and its lease lapses: repeats get `idempotency_outcome_unknown`, never a second
    run, and the caller still gets the upstream's answer."""
    try:
        await state.replace_if(key, claim, value, ttl)
    except Exception as exc:
        logger.warning(
            "could not record an idempotency outcome: the key stays claimed, and repeats get "
            "idempotency_outcome_unknown", extra={"idempotency_scope": key, "error": f"{type(exc).__name__}: {exc}"},
        )  # fmt: skip


@dataclass(frozen=True)
class Confirmation:
    ttl: float
    binding: str  # workspace, agent, operation and its version: what a token is valid for
    human: bool = False
    """Only a person may confirm (through a client that can ask its user): no token is ever issued."""

    @classmethod
    def compile(cls, config: ConfirmationConfig, http_method: str, binding: str) -> Confirmation | None:
        required = config.required if config.required is not None else http_method == "DELETE"
        return cls(config.ttl, binding, config.human) if required else None

    @staticmethod
    def without_token(arguments: dict[str, Any]) -> dict[str, Any]:
        """The call's own arguments, without the token (which a user's confirmation makes meaningless)."""
        return {name: value for name, value in arguments.items() if name != CONFIRMATION_ARGUMENT}

    async def check(self, state: StateStore, arguments: dict[str, Any], who: str = "") -> dict[str, Any]:
        """The arguments without the token, when it confirms them; else a `ConfirmationError`. A token is bound
        to the caller it was issued to (`who`, its `Principal.id`): nobody else can confirm that call."""
        if self.human:
            raise ConfirmationError(
                "This call must be confirmed by a person, and this client cannot ask its user. Nothing was changed.",
                error_code="confirmation_unavailable", recoverable=False,
                suggested_action="Call it from a client that supports elicitation (it asks the user to confirm).",
            )  # fmt: skip
        token = arguments.get(CONFIRMATION_ARGUMENT)
        rest = self.without_token(arguments)
        expected = fingerprint(self.binding, who, rest) if who else fingerprint(self.binding, rest)
        if token is None:
            await self._issue(state, expected)
        record = await state.take("confirm:" + hashlib.sha256(str(token).encode()).hexdigest())
        if record is None or not hmac.compare_digest(str(record.get("for")), expected):
            raise ConfirmationError(
                "The confirmation token is not valid for this call: it expired, was used already, or was "
                "issued for another tool or other arguments. Nothing was changed.",
                error_code="confirmation_invalid", recoverable=True,
                suggested_action=f"Call the tool again without {CONFIRMATION_ARGUMENT} to get a new token.",
            )  # fmt: skip
        return rest

    async def _issue(self, state: StateStore, expected: str) -> None:
        token = secrets.token_urlsafe(32)
        await state.put("confirm:" + hashlib.sha256(token.encode()).hexdigest(), {"for": expected}, self.ttl)
        raise ConfirmationError(
            f"This call changes or deletes data and needs confirmation. Nothing was changed yet. To run it, "
            f"repeat the same call with the same arguments plus {CONFIRMATION_ARGUMENT}: {token!r} "
            f"(valid {self.ttl:g} s, once).",
            error_code="confirmation_required", recoverable=True,
            suggested_action=f"Make sure the user wants this, then repeat the call with {CONFIRMATION_ARGUMENT}.",
            details={"confirmation_token": token, "expires_in": self.ttl},
        )  # fmt: skip
