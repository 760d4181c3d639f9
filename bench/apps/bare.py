"""Target (d): a bare ASGI app with no MCP logic, the upper limit for one uvicorn worker.

It parses each JSON-RPC body with orjson and answers `tools/call` with the echo
result shape, and `tools/list` with the result recorded in
`bench/data/tools_list_1000.json` (written by `bench/run.py` from Crank's, or
else the SDK's, own `tools/list` response), re-wrapped around the request id.
"""

from pathlib import Path
from typing import Any

import orjson

TOOLS_LIST_FILE = Path(__file__).resolve().parents[1] / "data" / "tools_list_1000.json"
TOOLS_LIST_RESULT = orjson.dumps(orjson.loads(TOOLS_LIST_FILE.read_bytes())["result"])


def respond(request: dict[str, Any]) -> bytes:
    method = request.get("method")
    if method == "tools/call":
        text = request["params"]["arguments"]["text"]
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        return orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})
    if method == "tools/list":
        return b'{"jsonrpc":"2.0","id":' + orjson.dumps(request["id"]) + b',"result":' + TOOLS_LIST_RESULT + b"}"
    error = {"code": -32601, "message": f"Method not found: {method}"}
    return orjson.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    out = respond(orjson.loads(body))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})
