"""The console's sessions: a signed cookie, an idle timeout, and a CSRF token per session.

Nothing is stored on the server. The cookie holds a random session id, the session's CSRF token, whether the
admin token was given, and when the session began; itsdangerous signs it with a key derived from the admin
token (so a new admin token ends every session) and stamps the time of each request's answer:

- a cookie older than `idle_timeout` seconds (no request in that time) is no session;
- a session older than `max_age` seconds ends whatever its activity;
- signing in starts a new session (new id, new CSRF token): a session id planted before sign-in is useless.

The cookie is `HttpOnly`, `SameSite=Strict`, `Path=/console`, and `Secure` when the request came over TLS.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Final

from itsdangerous import BadSignature, URLSafeTimedSerializer

__all__ = [
    "COOKIE",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_AGE",
    "LOGIN_COOKIE",
    "ConsoleSession",
    "Sessions",
    "signer",
]

COOKIE: Final = "crank_console"
LOGIN_COOKIE: Final = "crank_console_login"
"""The session of a sign-in page, before anyone signed in (its CSRF token guards the sign-in form), kept apart
from a signed-in session's cookie: a sign-in page opened from another site (whose navigation carries no
`SameSite=Strict` cookie) never writes over a signed-in session."""
DEFAULT_IDLE_TIMEOUT: Final = 30 * 60
"""Seconds without a request after which a session ends (`CRANK_CONSOLE_IDLE_TIMEOUT`)."""
DEFAULT_MAX_AGE: Final = 12 * 3600
"""Seconds after sign-in after which a session ends, however busy."""
_MAX_COOKIE: Final = 512
"""A longer cookie is no session of ours: refused before it is parsed."""


@dataclass(frozen=True)
class ConsoleSession:
    sid: str
    csrf: str
    """The token every state-changing form carries (`Sessions.csrf_ok`)."""
    signed_in: bool
    started: int
    """Unix time the session began."""
    who: str = ""
    """Who signed in: the subject or e-mail address the OpenID provider proved; "" for the admin token."""
    via: str = ""
    """How: `token` (the admin token) or `sso`; "" before anyone signed in."""

    def checks(self, token: str | None) -> bool:
        """Whether a form's CSRF token is this session's (constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


def signer(admin_token: str, purpose: str) -> URLSafeTimedSerializer:
    """What signs (and dates) one kind of the console's cookies: keyed by the admin token, so that a new admin
    token ends them all, and by `purpose`, so that one kind is never taken for another."""
    key = hashlib.sha256(f"crank console {purpose}\0".encode() + admin_token.encode()).digest()
    return URLSafeTimedSerializer(key, salt=f"crank-console-{purpose}")


class Sessions:
    def __init__(
        self, admin_token: str, *, idle_timeout: int = DEFAULT_IDLE_TIMEOUT, max_age: int = DEFAULT_MAX_AGE
    ) -> None:
        if idle_timeout < 1 or max_age < idle_timeout:
            raise ValueError("the console's idle timeout must be at least 1 s and no longer than its max age")
        self._serializer = signer(admin_token, "session")
        self.idle_timeout = idle_timeout
        self.max_age = max_age

    def read(self, cookie: str | None) -> ConsoleSession | None:
        """The session a cookie holds, or None (none, forged, idle too long, or too old)."""
        if not cookie or len(cookie) > _MAX_COOKIE:
            return None
        try:
            sid, csrf, signed_in, started, who, via = self._serializer.loads(cookie, max_age=self.idle_timeout)
        except (BadSignature, ValueError, TypeError):
            return None
        if not isinstance(started, int) or time.time() - started > self.max_age:
            return None
        return ConsoleSession(str(sid), str(csrf), signed_in is True, started, str(who), str(via))

    def start(self, *, via: str = "", who: str = "") -> ConsoleSession:
        """A new session, with a new id and CSRF token: signed in `via` the admin token or sso, or not ("")."""
        token, csrf = secrets.token_urlsafe(16), secrets.token_urlsafe(32)
        return ConsoleSession(token, csrf, bool(via), int(time.time()), who, via)

    def cookie(self, session: ConsoleSession, *, secure: bool) -> str:
        """The `Set-Cookie` value that keeps `session` (stamped now: the idle timeout starts again)."""
        value = self._serializer.dumps(
            [session.sid, session.csrf, session.signed_in, session.started, session.who, session.via]
        )
        return _cookie(value, self.idle_timeout, secure, signed_in=session.signed_in)

    @staticmethod
    def cleared(*, secure: bool, signed_in: bool = True) -> str:
        """The `Set-Cookie` value that ends the session (or the sign-in page's) in the browser."""
        return _cookie("", 0, secure, signed_in=signed_in)


def _cookie(value: str, max_age: int, secure: bool, *, signed_in: bool) -> str:
    name, path = (COOKIE, "/console") if signed_in else (LOGIN_COOKIE, "/console/login")
    attributes = f"{name}={value}; Max-Age={max_age}; Path={path}; HttpOnly; SameSite=Strict"
    return attributes + ("; Secure" if secure else "")
