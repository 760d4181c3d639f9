from __future__ import annotations

import pytest

from crank.wire.http import accepts_json, bearer_token, is_json_media_type, is_token


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("Bearer abc", "abc"),
        (b"bearer  abc ", "abc"),
        ("BEARER abc", "abc"),
        ("Bearer ", None),
        ("Basic abc", None),
        ("abc", None),
    ],
)
def test_bearer_token(header: str | bytes | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_http_grammar() -> None:
    assert is_token("X-Custom_1") and not is_token("a b") and not is_token("a\r\n")
    assert accepts_json(None) and accepts_json("text/html, application/*;q=0.5") and not accepts_json("text/html")
    assert is_json_media_type("application/json; charset=utf-8") and not is_json_media_type("text/json")
