from __future__ import annotations

import pytest

from crank.wire.security import HostOriginPolicy, is_loopback

LOOPBACK = ("127.0.0.1", 8000)
PUBLIC = ("10.1.2.3", 8000)


@pytest.mark.parametrize(
    ("host", "expected"),
    [("127.0.0.9", True), ("::1", True), ("[::1]", True), ("localhost", True), ("10.0.0.1", False), ("x.com", False)],
)
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


@pytest.mark.parametrize(
    ("server", "host", "origin", "verdict"),
    [
        (LOOPBACK, "127.0.0.1:8000", None, None),
        (LOOPBACK, "[::1]:8000", "http://[::1]:8000", None),
        (LOOPBACK, "localhost", None, None),
        (LOOPBACK, None, None, 421),
        (LOOPBACK, "evil.example.com", "http://evil.example.com", 421),
        (LOOPBACK, "127.0.0.1:8000", "null", 403),
        (LOOPBACK, "127.0.0.1:8000", "file://x", 403),
        (PUBLIC, "api.example.com", None, None),  # not loopback: Host is the proxy's business
        (PUBLIC, "api.example.com", "https://api.example.com", None),
        (PUBLIC, "api.example.com", "https://localhost:3000", 403),  # loopback origins only pass when protected
        (None, "api.example.com", "https://other.example.com", 403),
    ],
)
def test_default_policy(
    server: tuple[str, int] | None, host: str | None, origin: str | None, verdict: int | None
) -> None:
    assert HostOriginPolicy.build(None, (), ()).check(server, host, origin) == verdict


def test_verdicts_are_cached_and_bounded() -> None:
    policy = HostOriginPolicy.build(True, ["api.example.com"], [])
    for i in range(5000):
        policy.check(LOOPBACK, f"h{i}.example.com", None)
    assert len(policy._verdicts) <= 4096
    assert policy.check(LOOPBACK, "api.example.com:443", None) is None


def test_non_ascii_hosts_and_origins_are_refused_even_where_they_lower_case_to_an_allowed_name() -> None:
    policy = HostOriginPolicy.build(True, ["kube.example"], [])
    assert policy.check(LOOPBACK, "kube.example", None) is None
    assert policy.check(LOOPBACK, "\u212aube.example", None) == 421  # the Kelvin sign lower-cases to "k"
    assert policy.check(LOOPBACK, "kube.example", "http://\u212aube.example") == 403
