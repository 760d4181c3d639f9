"""Console sessions: signed, idle-bounded, age-bounded, tied to the admin token."""

from __future__ import annotations

import time

import itsdangerous.timed
import pytest

from crank.admin.console.session import Sessions

TOKEN = "console-admin-token-0123456789"


def value_of(set_cookie: str) -> str:
    return set_cookie.split(";", 1)[0].split("=", 1)[1]


def test_a_session_reads_back_until_it_is_idle_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = Sessions(TOKEN, idle_timeout=60, max_age=3600)
    session = sessions.start(via="token")
    cookie = value_of(sessions.cookie(session, secure=False))
    assert sessions.read(cookie) == session
    later = time.time() + 61
    monkeypatch.setattr(itsdangerous.timed.time, "time", lambda: later)  # the signature's clock, 61 s on
    assert sessions.read(cookie) is None


def test_a_busy_session_still_ends_at_its_max_age(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = Sessions(TOKEN, idle_timeout=60, max_age=120)
    session = sessions.start(via="token")
    later = time.time() + 121
    monkeypatch.setattr(itsdangerous.timed.time, "time", lambda: later)
    monkeypatch.setattr("crank.admin.console.session.time.time", lambda: later)
    fresh_stamp = value_of(sessions.cookie(session, secure=False))  # stamped "now": not idle
    assert sessions.read(fresh_stamp) is None


def test_a_cookie_of_another_admin_token_or_tampered_is_no_session() -> None:
    mine, other = Sessions(TOKEN), Sessions(TOKEN + "-rotated")
    cookie = value_of(mine.cookie(mine.start(via="token"), secure=True))
    assert other.read(cookie) is None
    assert mine.read(cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")) is None
    assert mine.read("x" * 5000) is None and mine.read(None) is None


def test_the_cookie_is_strict_http_only_and_secure_behind_tls() -> None:
    sessions = Sessions(TOKEN)
    cookie = sessions.cookie(sessions.start(via="sso", who="alice"), secure=True)
    assert cookie.startswith("crank_console=") and "Max-Age=1800" in cookie
    assert cookie.endswith("; Path=/console; HttpOnly; SameSite=Strict; Secure")
    assert Sessions.cleared(secure=False).startswith("crank_console=; Max-Age=0")


def test_a_sign_in_pages_session_has_a_cookie_of_its_own() -> None:
    """A sign-in page opened from another site (its navigation carries no Strict cookie) makes a new session:
    written to its own cookie, it never replaces a signed-in session's."""
    sessions = Sessions(TOKEN)
    cookie = sessions.cookie(sessions.start(), secure=False)
    assert cookie.startswith("crank_console_login=") and "; Path=/console/login;" in cookie
    assert sessions.read(cookie.split(";")[0].split("=", 1)[1]) is not None
    assert not sessions.start().signed_in and sessions.start(via="token").signed_in


def test_csrf_tokens_are_per_session_and_compared_whole() -> None:
    sessions = Sessions(TOKEN)
    one, two = sessions.start(via="token"), sessions.start(via="token")
    assert one.checks(one.csrf) and not one.checks(two.csrf) and not one.checks("") and not one.checks(None)
    assert not one.checks(one.csrf[:-1])
