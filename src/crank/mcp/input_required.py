"""Tools that ask the client for input inside their result (2026-07-28, SEP-2322 "input_required").

A stateless server cannot send the client a request in the middle of a call. Instead the invoker
returns `InputRequired`: the result carries `resultType: "input_required"`, the `inputRequests` (an
elicitation, a sampling request, a roots listing) and an opaque `requestState`; the client answers
them and repeats the same `tools/call` with `inputResponses` and the `requestState`. The invoker
then finds both in its `CallContext`.

`requestState` goes through the client, so it is signed (itsdangerous, HMAC-SHA256) and bound to
the tool and its arguments, and it expires; a tampered, foreign or expired state is -32602. It is
signed, not encrypted: keep secrets out of it. Replicas that must honour each other's states share
the endpoint's `request_state_secret`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from itsdangerous import BadData, URLSafeTimedSerializer

from crank import _json
from crank.exceptions import CallSignal, InvalidRequestStateError
from crank.types import JSONObject

__all__ = [
    "CAPABILITY_OF_METHOD",
    "DEFAULT_STATE_MAX_AGE",
    "InputRequired",
    "NeedsInput",
    "RequestStateSigner",
    "elicitation",
    "roots_listing",
    "sampling",
]

CAPABILITY_OF_METHOD = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
"""The client capability each kind of input request needs."""

DEFAULT_STATE_MAX_AGE = 600


@dataclass(frozen=True, slots=True)
class InputRequired:
    """Returned by an invoker that needs the client's input before it can finish."""

    input_requests: Mapping[str, JSONObject] = field(default_factory=dict)
    state: Any = None


class NeedsInput(CallSignal):  # the call ends with its `InputRequired`
    """Raised by `CallContext.elicit` and `sample` in the 2026-07-28 era: the call answers `input_required`."""

    def __init__(self, value: InputRequired) -> None:
        super().__init__("input required")
        self.value = value


def elicitation(message: str, properties: JSONObject, required: list[str] | None = None) -> JSONObject:
    """Ask the user to fill in a form."""
    schema: JSONObject = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


def sampling(prompt: str, max_tokens: int) -> JSONObject:
    """Ask the client's model for a completion."""
    message = {"role": "user", "content": {"type": "text", "text": prompt}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


def roots_listing() -> JSONObject:
    """Ask the client for its roots."""
    return {"method": "roots/list", "params": {}}


class RequestStateSigner:
    """Signs request states, bound to the tool name and a digest of the arguments."""

    def __init__(self, secret: str | bytes | None = None, *, max_age: int = DEFAULT_STATE_MAX_AGE) -> None:
        self._serializer = URLSafeTimedSerializer(secret or secrets.token_bytes(32), salt="crank.request-state")
        self.max_age = max_age

    def sign(self, state: Any, tool_name: str, arguments: Mapping[str, Any]) -> str:
        return self._serializer.dumps({"s": state, "t": tool_name, "a": _digest(arguments)})

    def verify(self, token: str, tool_name: str, arguments: Mapping[str, Any]) -> Any:
        try:
            payload = self._serializer.loads(token, max_age=self.max_age)
        except BadData:
            raise InvalidRequestStateError("signature or age") from None
        if not isinstance(payload, dict) or payload.get("t") != tool_name or payload.get("a") != _digest(arguments):
            raise InvalidRequestStateError("issued for another call")
        return payload.get("s")


def _digest(arguments: Mapping[str, Any]) -> str:
    # Sorted keys: the same arguments in another order are the same call.
    return hashlib.sha256(_json.dumps_sorted(arguments)).hexdigest()[:32]
