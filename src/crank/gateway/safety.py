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

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from crank import _json
from crank.exceptions import ConfigurationError, ConfirmationError, IdempotencyError, ToolError
from crank.registry.runtime import ConfirmationConfig, IdempotencyConfig
from crank.state import StateStore
from crank.types import JSONObject

__all__ = ["CONFIRMATION_ARGUMENT", "Confirmation", "Idempotency", "fingerprint"]

CONFIRMATION_ARGUMENT = "_crank_confirmation_token"
CONFIRMATION_SENTENCE = (
    "Destructive: the first call only returns a confirmation token; repeat the same call with the same "
    f"arguments plus {CONFIRMATION_ARGUMENT} to run it."
)


def fingerprint(*parts: Any) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no spaces) of the parts."""
    return hashlib.sha256(_json.dumps_sorted(list(parts))).hexdigest()


@dataclass(frozen=True)
class Idempotency:
    argument: str
    header: str
    window: float
    scope: str  # workspace and operation: a key means the same thing in every agent binding the operation

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
    ) -> JSONObject:
        """`call` once per key and argument set; its JSON-able outcome is what repeats get back."""
        value = arguments.get(self.argument)
        if value is None:
            return await call()  # no key given: nothing to deduplicate on
        key = f"idem:{self.scope}:{fingerprint(value)}"
        arguments_print = fingerprint(arguments)
        claim = secrets.token_hex(16)  # ours: every later write checks it, in case our claim expired meanwhile
        if not await state.add(key, {"state": "running", "arguments": arguments_print, "claim": claim}, in_flight_ttl):
            return self._repeat(await state.get(key), arguments_print)
        unknown = {"state": "unknown", "arguments": arguments_print, "claim": claim}
        try:
            outcome = await call()
        except ToolError as exc:
            if exc.may_have_taken_effect:  # a timeout, a 5xx: the upstream may have acted; keep the key
                await state.replace_if(key, claim, unknown, self.window)
            else:  # nothing happened upstream (refused, 4xx, 503, bad mapping): free the key for a retry
                await state.replace_if(key, claim, None, self.window)
            raise
        except BaseException:  # cancelled or failed mid-call: the outcome is not known either
            await state.replace_if(key, claim, unknown, self.window)
            raise
        done = {"state": "done", "arguments": arguments_print, "claim": claim, "outcome": outcome}
        await state.replace_if(key, claim, done, self.window)
        return outcome

    def _repeat(self, record: JSONObject | None, arguments_print: str) -> JSONObject:
        if record is None:  # expired between the two steps: treat as in flight, the model retries
            record = {"state": "running", "arguments": arguments_print}
        if not hmac.compare_digest(str(record.get("arguments")), arguments_print):
            raise IdempotencyError(
                f"The idempotency key {self.argument!r} was already used with other arguments.",
                error_code="idempotency_key_reused", recoverable=True,
                suggested_action=f"Use a new {self.argument} for a new request; reuse one only to repeat a call.",
            )  # fmt: skip
        if record.get("state") == "unknown":
            raise IdempotencyError(
                f"An earlier call with this {self.argument} failed in a way that may still have changed data "
                "upstream (a timeout or a server error), so it is not repeated.",
                error_code="idempotency_outcome_unknown", recoverable=True,
                suggested_action="Check whether the change happened (read it back) before trying again with a "
                f"new {self.argument}.",
            )  # fmt: skip
        if record.get("state") != "done":
            raise IdempotencyError(
                "A call with this idempotency key is still running.", error_code="idempotency_in_progress",
                recoverable=True, suggested_action="Wait a few seconds, then repeat the same call.",
            )  # fmt: skip
        outcome: JSONObject = record["outcome"]
        return outcome


@dataclass(frozen=True)
class Confirmation:
    ttl: float
    binding: str  # workspace, agent, operation and its version: what a token is valid for

    @classmethod
    def compile(cls, config: ConfirmationConfig, http_method: str, binding: str) -> Confirmation | None:
        required = config.required if config.required is not None else http_method == "DELETE"
        return cls(config.ttl, binding) if required else None

    async def check(self, state: StateStore, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments without the token, when it confirms them; else a `ConfirmationError`."""
        token = arguments.get(CONFIRMATION_ARGUMENT)
        rest = {name: value for name, value in arguments.items() if name != CONFIRMATION_ARGUMENT}
        expected = fingerprint(self.binding, rest)
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
