from __future__ import annotations

import pytest

from crank import _json
from crank.exceptions import InvalidParamsError, RPCError
from crank.wire.jsonrpc import encode_error, is_request_id, is_response, request_envelope_error


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"jsonrpc": "2.0", "method": "ping", "id": 1}, None),
        ({"jsonrpc": "2.0", "method": "ping"}, None),
        ({"jsonrpc": "1.0", "method": "ping", "id": 1}, "jsonrpc"),
        ({"jsonrpc": "2.0", "method": 3, "id": 1}, "method"),
        ({"jsonrpc": "2.0", "method": "ping", "id": None}, "id"),
        ({"jsonrpc": "2.0", "method": "ping", "id": True}, "id"),
        ({"jsonrpc": "2.0", "method": "ping", "id": 1, "params": []}, "params"),
    ],
)
def test_request_envelope_error(message: dict[str, object], problem: str | None) -> None:
    error = request_envelope_error(message)
    if problem is None:
        assert error is None
    else:
        assert error is not None and error.code == -32600 and problem in error.message and error.http_status == 400


def test_one_error_class_carries_code_message_and_data() -> None:
    error = InvalidParamsError("bad", data={"violations": []})
    assert isinstance(error, RPCError)
    assert _json.loads(encode_error(7, error)) == {
        "jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "bad", "data": {"violations": []}},
    }  # fmt: skip
    assert RPCError("x", code=-32020).to_wire() == {"code": -32020, "message": "x"}


def test_ids_and_responses() -> None:
    assert is_request_id("a") and is_request_id(1) and not is_request_id(None) and not is_request_id(False)
    assert is_response({"jsonrpc": "2.0", "id": 1, "result": None})
    assert not is_response({"jsonrpc": "2.0", "id": 1}) and not is_response([])
