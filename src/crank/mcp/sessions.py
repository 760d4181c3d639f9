"""Legacy-era sessions without a session store: signed ids, and the one preference a session keeps.

2025-11-25 clients get an `Mcp-Session-Id` from `initialize` and send it on every request. Crank keeps no
session: the id is a random token plus its HMAC (`SessionIds`), so any replica that shares the secret can tell
its own ids from made-up ones, and a request without one, or with an unknown one, is served all the same (the
server is stateless; docs/mcp.md). The only thing a session sets is its log level (`logging/setLevel`); that is
kept in a bounded map per process (`LogLevels`), the least recently set forgotten first. A level set through one
replica applies to the calls that replica serves: a preference about how much to tell, never a rule that a
wrong answer would break. Without a level, a session gets `info` and above.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from typing import Final

from crank.exceptions import InvalidParamsError

__all__ = ["DEFAULT_LOG_LEVEL", "LOG_LEVELS", "URL_ELICITATION", "LogLevels", "SessionIds", "log_level_rank"]

LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""RFC 5424's severities, least severe first, as MCP logging names them."""
DEFAULT_LOG_LEVEL: Final = "info"
_RANK = {level: rank for rank, level in enumerate(LOG_LEVELS)}
_MAX_ID = 200
URL_ELICITATION: Final = "url-elicitation"
"""What a session id carries for a client that declared URL-mode elicitation (`elicitation: {url: {}}`)."""
_CARRIED = ("elicitation", "sampling", "roots", URL_ELICITATION)


def log_level_rank(level: object, where: str) -> int:
    """The rank of a level name; `InvalidParamsError` naming `where` for anything else."""
    rank = _RANK.get(level) if isinstance(level, str) else None
    if rank is None:
        raise InvalidParamsError(f"{where} must be one of {', '.join(LOG_LEVELS)}")
    return rank


class SessionIds:
    """Issues and checks `Mcp-Session-Id` values: `<random>.<capabilities>.<hmac>`, visible ASCII as the
    transport requires. The capabilities the client declared at `initialize` that a server may ask through
    (`elicitation`, `sampling`, `roots`) ride in the id, signed: a later request says what its client can
    answer without any store."""

    def __init__(self, secret: str | bytes | None = None) -> None:
        key = secret.encode() if isinstance(secret, str) else secret
        self._key = key or secrets.token_bytes(32)

    def issue(self, capabilities: object = None) -> str:
        declared = dict(capabilities) if isinstance(capabilities, dict) else {}
        elicitation = declared.get("elicitation")
        if isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict):
            declared[URL_ELICITATION] = True
        said = "+".join(name for name in _CARRIED if name in declared)
        body = f"{secrets.token_urlsafe(16)}.{said}"
        return f"{body}.{self._sign(body)}"

    def verified(self, session_id: str | None) -> str | None:
        """The id when this server (or a replica sharing its secret) issued it; None otherwise."""
        if not session_id or len(session_id) > _MAX_ID:
            return None
        body, _, signature = session_id.rpartition(".")
        return session_id if body and hmac.compare_digest(signature, self._sign(body)) else None

    def capabilities(self, session_id: str | None) -> frozenset[str]:
        """The capabilities a session's client declared (of `elicitation`, `sampling`, `roots`); none for an
        id this server did not sign."""
        if self.verified(session_id) is None:
            return frozenset()
        said = session_id.split(".")[1] if session_id is not None else ""  # verified: `<random>.<said>.<hmac>`
        return frozenset(name for name in said.split("+") if name in _CARRIED)

    def _sign(self, token: str) -> str:
        return hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()[:32]


class LogLevels:
    """The log level each session asked for, at most `capacity` sessions per process."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._levels: OrderedDict[str, int] = OrderedDict()

    def set(self, session_id: str, rank: int) -> None:
        self._levels[session_id] = rank
        self._levels.move_to_end(session_id)
        while len(self._levels) > self.capacity:
            self._levels.popitem(last=False)

    def rank(self, session_id: str | None) -> int:
        found = self._levels.get(session_id) if session_id is not None else None
        return _RANK[DEFAULT_LOG_LEVEL] if found is None else found
