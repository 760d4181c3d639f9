from __future__ import annotations

import pytest

from crank.mcp.translations import negotiate_language

AVAILABLE = ("en", "pt-BR", "uk")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, "en"),
        ("", "en"),
        ("uk", "uk"),
        ("uk-UA", "uk"),
        ("UK", "uk"),
        ("fr, uk;q=0.8", "uk"),
        ("en;q=0.1, uk;q=0.9", "uk"),
        ("pt", "pt-BR"),
        ("fr", "en"),
        ("*", "en"),
        ("uk;q=0, en", "en"),
        ("uk;q=bogus, en;q=0.5", "en"),
    ],
)
def test_negotiation(header: str | None, expected: str) -> None:
    assert negotiate_language(header, AVAILABLE, "en") == expected
