"""Fuzzing every endpoint over real HTTP (issue 12, "one tenant can never harm another").

Real servers on loopback, sharing this module: a gateway (`GatewayService`) with two workspaces and a real
upstream, the rpc example app (`examples/rpc_app.py`: `/rpc` and its own MCP endpoint), and the admin API on
a registry of its own. Hypothesis sends them valid-ish JSON-RPC envelopes with mutated fields, random JSON,
wrong types, long strings, deep nesting and batches near and past their limits, bad headers and random bytes.

Every answer must:
- come within the client's timeout, with a status below 500;
- be the documented shape of its endpoint: a JSON-RPC response (or a batch of them) whose errors carry an
  integer code, the plain pair's `{"isError": true, "error": {...}}`, or the admin API's
  `{"error": {"code", "message"}}`; an empty body only where the endpoint answers without one;
- never be an internal error (-32603, `internal_error`), never carry a traceback or a Python exception name;
- leave nothing at error level in the log (an internal error there is the same fault, and a way to flood it).

Afterwards an honest client of each workspace, of `/rpc` and of the admin API is still served.
`derandomize=True`: the examples are the same on every run (CI is reproducible); the sizes of the
examples are kept so that the module runs in well under a minute on a slow 2-core machine.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crank.admin.actions import check_runtime
from crank.admin.api import AdminAPI
from crank.registry import Registry, migrate, open_engine
from crank.server import GatewayService
from crank.wire.jsonrpc import DEFAULT_MAX_BATCH_ITEMS, INTERNAL_ERROR
from tests.conftest import serving
from tests.gateway import upstream
from tests.mcp.wire import MODERN, modern_meta

ADMIN_TOKEN = "admin-token-for-the-fuzz-0123456789"
MAX_BODY = 4 * 1024 * 1024  # crank.wire.asgi.DEFAULT_MAX_BODY_SIZE, as the limits table says
TIMEOUT = 20.0  # seconds: an answer that takes longer is a hang
FUZZ = settings(
    max_examples=50,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# -- the servers ------------------------------------------------------------------------------------------


@dataclass
class Servers:
    gateway: str
    rpc: str
    admin: str
    upstream: str
    keys: dict[str, str]  # acme (all agents), limited (acme, one agent that does not exist), other (workspace)
    errors: list[logging.LogRecord]


USER = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def operations(base: str) -> dict[str, dict[str, Any]]:
    """The acme workspace's operations: reads, a write with an idempotency key, a delete that asks for
    confirmation, and upstream answers that are errors (500 with a traceback in its body, HTML)."""
    return {
        "get_user": {"protocol": "http", "target": {"method": "GET", "url": base + "/users/{id}"},
                     "description": "One user.", "input_schema": USER,
                     "output_schema": {"type": "object", "properties": {"id": {"type": "integer"}}}},
        "list_users": {"protocol": "http", "target": {"method": "GET", "url": base + "/users"},
                       "description": "Users.",
                       "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}}},
        "create_user": {"protocol": "http", "target": {"method": "POST", "url": base + "/users"},
                        "description": "Create a user.",
                        "input_schema": {"type": "object", "required": ["name", "request_id"], "properties": {
                            "name": {"type": "string"}, "request_id": {"type": "string"}}},
                        "input_mapping": [{"from": "name", "to": "body.name"}],
                        "execution_config": {"idempotency": {"argument": "request_id"}}},
        "delete_user": {"protocol": "http", "target": {"method": "DELETE", "url": base + "/users/{id}"},
                        "description": "Delete a user.", "input_schema": USER},
        "broken": {"protocol": "http", "target": {"url": base + "/broken"}, "description": "Fails."},
        "html": {"protocol": "http", "target": {"url": base + "/html"}, "description": "Not JSON."},
    }  # fmt: skip


TOOLS = ("get_user", "list_users", "create_user", "delete_user", "broken", "html")
VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "get_user": {"id": 2},
    "list_users": {"limit": 2},
    "create_user": {"name": "ann", "request_id": "r-1"},
    "delete_user": {"id": 3},
    "broken": {},
    "html": {},
}


def gateway_registry(directory: Path, base: str) -> tuple[Registry, dict[str, str]]:
    registry = Registry(open_engine(f"sqlite:///{directory / 'gateway.sqlite3'}", pooled=False))
    migrate(registry.engine)
    registry.create_workspace("acme", "Acme")
    for name, spec in operations(base).items():
        registry.put_operation("acme", name, spec)
    registry.put_agent("acme", "support", {"bindings": [{"operation": name} for name in TOOLS]})
    registry.publish("acme", "support", check=check_runtime)
    registry.create_workspace("other", "Other")
    registry.put_operation("other", "get_user", operations(base)["get_user"])
    registry.put_agent("other", "desk", {"bindings": [{"operation": "get_user"}]})
    registry.publish("other", "desk", check=check_runtime)
    keys = {
        "acme": registry.create_api_key("acme"),
        "limited": registry.create_api_key("acme", agents=["nobody"]),
        "other": registry.create_api_key("other"),
    }
    return registry, keys


class _Errors(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    from examples import rpc_app

    directory = tmp_path_factory.mktemp("fuzz")
    users = dict(rpc_app.USERS)  # the example's user.delete changes its module: put it back afterwards
    with serving() as start, pytest.MonkeyPatch.context() as patch:
        # The upstream is on loopback, which an egress policy refuses unless allowed (read as the gateway starts).
        patch.setenv("CRANK_EGRESS_ALLOW", "127.0.0.0/8,::1")
        base = start(upstream.app)
        registry, keys = gateway_registry(directory, base)
        admin_registry = Registry(open_engine(f"sqlite:///{directory / 'admin.sqlite3'}", pooled=False))
        migrate(admin_registry.engine)
        admin_registry.create_workspace("acme", "Acme")
        records: list[logging.LogRecord] = []
        found = Servers(
            gateway=start(GatewayService(registry, poll_interval=0.1)),
            rpc=start(rpc_app.app),
            admin=start(AdminAPI(admin_registry, token=ADMIN_TOKEN)) + "/admin/v1",
            upstream=base,
            keys=keys,
            errors=records,
        )
        # After the servers started: uvicorn configures its loggers (dropping their handlers) as it starts.
        handler = _Errors(records)
        watched = [logging.getLogger(), logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn")]
        for logger in watched:
            logger.addHandler(handler)
        try:
            yield found
        finally:
            for logger in watched:
                logger.removeHandler(handler)
            rpc_app.USERS.clear()
            rpc_app.USERS.update(users)
            registry.engine.dispose()
            admin_registry.engine.dispose()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    # One client for the module: its kept-alive connections see every odd request before the next one.
    with httpx.Client(timeout=TIMEOUT) as http:
        yield http


# -- what every answer must be ----------------------------------------------------------------------------

_EXCEPTION_NAMES = sorted(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)
)
_LEAKS = re.compile(r"Traceback \(most recent call|File \"[^\"]*\.py\"|\b(" + "|".join(_EXCEPTION_NAMES) + r")\b")


@dataclass
class Sent:
    method: str
    url: str
    headers: list[tuple[str, str | bytes]]
    body: bytes
    drop: tuple[str, ...] = ()  # headers httpx adds by itself that this request goes without

    def describe(self) -> str:
        return f"{self.method} {self.url} headers={self.headers} drop={self.drop} body={self.body[:300]!r}"


def wire_header(value: str | bytes) -> bytes:
    """What a client can put on the wire as a header value: any bytes but controls, without outer spaces."""
    raw = value.encode() if isinstance(value, str) else value
    return bytes(c for c in raw if c >= 0x20 and c != 0x7F).strip(b" \t")


def send(client: httpx.Client, sent: Sent) -> httpx.Response:
    headers = [(name, wire_header(value)) for name, value in sent.headers]
    request = client.build_request(sent.method, sent.url, headers=headers, content=sent.body)
    for name in sent.drop:
        if name in request.headers and not any(k.lower() == name for k, _ in sent.headers):
            del request.headers[name]
    try:
        return client.send(request)
    except httpx.TimeoutException:
        pytest.fail(f"no answer within {TIMEOUT} s: {sent.describe()}")


def jsonrpc_problem(value: Any) -> str | None:
    """Why `value` is not a JSON-RPC response or a non-empty batch of them, or None."""
    items = value if isinstance(value, list) else [value]
    if not items:
        return "an empty batch answer"
    for item in items:
        if not isinstance(item, dict) or item.get("jsonrpc") != "2.0" or "id" not in item:
            return f"not a JSON-RPC response: {item!r:.200}"
        if ("result" in item) == ("error" in item):
            return "a response needs exactly one of result and error"
        if "error" in item:
            error = item["error"]
            if not isinstance(error, dict) or type(error.get("code")) is not int:
                return f"an error without an integer code: {error!r:.200}"
            if not isinstance(error.get("message"), str):
                return "an error without a message"
            if error["code"] == INTERNAL_ERROR:
                return "an internal error (-32603)"
    return None


def plain_problem(route: str, status: int, value: Any) -> str | None:
    """The plain pair: `{"tools": [...]}`, a CallToolResult, or `{"isError": true, "error": {"code": int}}`."""
    if not isinstance(value, dict):
        return "not an object"
    if status == 200 and route == "tools" and isinstance(value.get("tools"), list):
        return None
    if status == 200 and route == "call" and isinstance(value.get("content"), list) and "error" not in value:
        return None
    if value.get("isError") is not True or not isinstance(value.get("content"), list):
        return f"neither an answer nor the plain pair's error: {value!r:.200}"
    error = value.get("error")
    if status == 200 and route == "call" and isinstance(error, dict) and isinstance(error.get("error_code"), str):
        return None  # a tool's structured error, parsed from its text
    if not isinstance(error, dict) or type(error.get("code")) is not int:
        return f"an error without an integer code: {error!r:.200}"
    return None


def admin_problem(status: int, value: Any) -> str | None:
    if status < 400:
        return None
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict) or not all(isinstance(error.get(field), str) for field in ("code", "message")):
        return f"not the admin error shape: {value!r:.200}"
    return None


def check(servers: Servers, sent: Sent, response: httpx.Response, kind: str) -> None:
    """The properties of every answer; `kind` is mcp, tools, call, rpc or admin."""
    where = f"\n{response.status_code} {response.content[:400]!r}\nfor {sent.describe()}"
    assert response.status_code < 500, where
    body = response.content
    leaked = {match.group(0) for match in _LEAKS.finditer(body.decode("utf-8", "replace"))}
    leaked = {text for text in leaked if text.encode() not in sent.body and text not in str(sent.headers)}
    assert not leaked, f"{leaked} in the answer{where}"
    assert b'"internal_error"' not in body, where
    assert not servers.errors, f"logged: {[r.getMessage() for r in servers.errors]}{where}"
    if not body:
        empty_allowed = response.status_code in (202, 204) or sent.method == "HEAD"
        empty_allowed |= response.status_code == 405 and kind in ("mcp", "rpc")
        assert empty_allowed, f"an empty answer{where}"
        return
    assert "json" in response.headers.get("content-type", ""), where
    try:
        value = json.loads(body)
    except ValueError:
        pytest.fail(f"not JSON{where}")
    if kind == "mcp" or (kind == "rpc" and sent.method == "POST"):
        problem = jsonrpc_problem(value)
    elif kind in ("tools", "call"):
        problem = plain_problem(kind, response.status_code, value)
    elif kind == "rpc":
        problem = None if isinstance(value, dict) and "openrpc" in value else "not the OpenRPC document"
    else:
        problem = admin_problem(response.status_code, value)
    assert problem is None, problem + where


# -- strategies -------------------------------------------------------------------------------------------

_VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(str.strip)
header_bytes = st.binary(max_size=30).map(lambda b: bytes(c for c in b if c > 0x20 and c != 0x7F))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
long_texts = st.sampled_from([1_000, 70_000, 1_000_000]).map(lambda n: "é" * (n // 2))


def header_value(*typical: str) -> st.SearchStrategy[str | bytes | None]:
    """None (header left out), one of the typical values, or anything that can be sent."""
    return st.one_of(st.none(), st.sampled_from(typical), header_text, header_bytes) if typical else st.none()


def wire_json(value: Any) -> bytes:
    # Python's json writes integers of any size, which orjson does not read as integers: a case worth sending.
    return json.dumps(value, ensure_ascii=False).encode()


def nested(depth: int, kind: str) -> str:
    if kind == "array":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


_PATHS = (
    ("jsonrpc",), ("id",), ("method",), ("params",), ("params", "name"), ("params", "arguments"),
    ("params", "cursor"), ("params", "_meta"), ("params", "_meta", "io.modelcontextprotocol/protocolVersion"),
    ("params", "_meta", "io.modelcontextprotocol/clientCapabilities"), ("params", "protocolVersion"),
    ("params", "capabilities"), ("params", "clientInfo"), ("params", "arguments", "id"),
    ("params", "arguments", "_crank_confirmation_token"), ("params", "arguments", "request_id"),
    ("params", "inputResponses"), ("params", "requestState"),
)  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, message: dict[str, Any], long: bool = True) -> dict[str, Any]:
    """The message with up to three fields removed, replaced by any JSON value, a wrong type or (`long`) a long
    text."""
    message = json.loads(json.dumps(message))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_PATHS))
        parent: Any = message
        for key in path[:-1]:
            parent = parent.setdefault(key, {}) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        action = draw(st.sampled_from(["delete", "value", "value", "text"] if long else ["delete", "value"]))
        if action == "delete":
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(long_texts if action == "text" else json_values)
    return message


MCP_METHODS = ("initialize", "ping", "tools/list", "tools/call", "server/discover", "notifications/initialized",
               "resources/list", "completion/complete", "nonsense")  # fmt: skip
VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", MODERN, "2099-01-01")


def mcp_message(era: str, method: str, tool: str, request_id: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if method == "tools/call":
        params = {"name": tool, "arguments": dict(VALID_ARGUMENTS.get(tool, {"text": "hello"}))}
    elif method == "initialize":
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}
    if era == "modern":
        params["_meta"] = modern_meta()
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if not method.startswith("notifications/"):
        message["id"] = request_id
    return message


@st.composite
def mcp_headers(
    draw: st.DrawFn, servers: Servers, era: str, method: str, tool: str
) -> tuple[list[Any], tuple[str, ...]]:
    version = MODERN if era == "modern" else "2025-11-25"
    keys = servers.keys
    acme, other, limited = keys["acme"], keys["other"], keys["limited"]
    auth = [f"Bearer {acme}"] * 3 + [f"Bearer {other}", f"Bearer {limited}", "Bearer wrong", "Bearer",
                                     "Basic dXNlcjpwYXNz", f"bearer {acme}", f"Bearer  {acme}"]  # fmt: skip
    modern = era == "modern"

    def mostly(usual: str | None, weight: int, *odd: str) -> st.SearchStrategy[str | bytes | None]:
        return st.sampled_from([usual] * weight) | header_value(*odd)

    chosen = {
        "Content-Type": draw(mostly("application/json", 4, "application/json; charset=utf-8", "text/plain",
                                    "application/x-www-form-urlencoded", "", "APPLICATION/JSON")),
        "Accept": draw(mostly("application/json, text/event-stream", 4, "application/json", "text/event-stream",
                              "*/*", "text/html", "")),
        "MCP-Protocol-Version": draw(mostly(version, 4, *VERSIONS, "")),
        "Authorization": draw(st.sampled_from(auth) | header_value("Bearer")),
        "Mcp-Session-Id": draw(header_value("0" * 32, "", "session-that-never-was")),
        "Mcp-Method": draw(mostly(method if modern else None, 1, method, "tools/list")),
        "Mcp-Name": draw(mostly(tool if modern else None, 1, tool, "=?base64?Zm9v?=")),
        "Origin": draw(mostly(None, 6, "http://evil.example.com", "http://127.0.0.1", "null")),
        "Host": draw(mostly(None, 8, "evil.example.com", "127.0.0.1", "[::1]:1")),
        "Accept-Language": draw(mostly(None, 6, "uk", "*", "en;q=2, uk;q=x")),
    }  # fmt: skip
    headers = [(name, value) for name, value in chosen.items() if value is not None]
    if draw(st.integers(0, 9)) == 0:  # the same routing header twice
        headers.append(("MCP-Protocol-Version", draw(st.sampled_from(VERSIONS))))
    drop = tuple(name.lower() for name, value in chosen.items() if value is None and name != "Host")
    return headers, drop


@st.composite
def mcp_requests(draw: st.DrawFn, servers: Servers, base: str) -> Sent:
    era = draw(st.sampled_from(["legacy", "modern"]))
    method = draw(st.sampled_from(MCP_METHODS))
    tool = draw(st.sampled_from(TOOLS) | st.text(max_size=12))
    request_id = draw(st.sampled_from([1, "a", 2**53]) | scalars)
    message = draw(mutated(mcp_message(era, method, tool, request_id)))
    headers, drop = draw(mcp_headers(servers, era, method, tool))
    body = wire_json(draw(st.sampled_from([message] * 8) | json_values))
    http_method = draw(st.sampled_from(["POST"] * 12 + ["GET", "DELETE", "PUT", "OPTIONS"]))
    return Sent(http_method, base, headers, body, drop)


def mcp_bases(servers: Servers) -> list[str]:
    return [f"{servers.gateway}/mcp/v1/acme/support", f"{servers.gateway}/mcp/v1/other/desk",
            f"{servers.gateway}/mcp/v1/acme/nobody", f"{servers.rpc}/mcp", f"{servers.rpc}/mcp/v2"]  # fmt: skip


def healthy(servers: Servers, client: httpx.Client) -> None:
    """An honest client of each workspace, of the rpc app and of the admin API is served as before."""
    for agent, key in (("acme/support", "acme"), ("other/desk", "other")):
        headers = {"Authorization": f"Bearer {servers.keys[key]}", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
        message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "get_user", "arguments": {"id": 2}}}  # fmt: skip
        answer = client.post(f"{servers.gateway}/mcp/v1/{agent}", headers=headers, json=message).json()
        assert not answer["result"].get("isError") and '"name":"user2"' in answer["result"]["content"][0]["text"]
    search = {"jsonrpc": "2.0", "id": 1, "method": "Catalog.get", "params": {"id": 1}}
    assert client.post(f"{servers.rpc}/rpc", json=search).json()["result"]["name"] == "Kobzar"
    workspaces = client.get(f"{servers.admin}/workspaces", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert workspaces.status_code == 200 and "workspaces" in workspaces.json()
    assert not servers.errors, [record.getMessage() for record in servers.errors]


def mcp_kind(url: str) -> str:
    return url.rsplit("/", 1)[-1] if url.endswith(("/tools", "/call")) else "mcp"


# -- MCP, both eras ---------------------------------------------------------------------------------------


@FUZZ
@given(data=st.data())
def test_mcp_endpoints_answer_mutated_envelopes_and_headers_in_shape(
    servers: Servers, client: httpx.Client, data: st.DataObject
) -> None:
    base = data.draw(st.sampled_from(mcp_bases(servers)), label="endpoint")
    sent = data.draw(mcp_requests(servers, base), label="request")
    check(servers, sent, send(client, sent), "mcp")


@settings(FUZZ, max_examples=25)
@given(data=st.data())
def test_mcp_batches_near_and_past_the_limit_are_answered_in_shape(
    servers: Servers, client: httpx.Client, data: st.DataObject
) -> None:
    base = data.draw(st.sampled_from(mcp_bases(servers)[:1] + mcp_bases(servers)[3:4]), label="endpoint")
    limit = DEFAULT_MAX_BATCH_ITEMS
    size = data.draw(st.sampled_from([0, 1, 2, limit - 1, limit, limit + 1, 10 * limit]), label="size")
    # Without long texts: a batch repeats its item, and its size is what is tested here.
    one = data.draw(mutated(mcp_message("legacy", data.draw(st.sampled_from(MCP_METHODS)), "get_user", 1), long=False))
    odd = data.draw(st.lists(json_values, max_size=3), label="odd items")
    version = data.draw(st.sampled_from([None, "2025-03-26", "2025-11-25", MODERN]), label="version")
    headers: list[Any] = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"),
                          ("Authorization", f"Bearer {servers.keys['acme']}")]  # fmt: skip
    if version is not None:
        headers.append(("MCP-Protocol-Version", version))
    batch = [{**one, "id": index} if "id" in one else one for index in range(size)]
    sent = Sent("POST", base, headers, wire_json(odd + batch))
    check(servers, sent, send(client, sent), "mcp")


# Around each nesting limit there is: 64 (crank._json.MAX_DEPTH), 255 (what orjson can write), 256 (YAML), 1,024
# (what orjson can read). Swept, not drawn: every depth reaches every endpoint.
DEPTHS = (1, 62, 63, 64, 65, 66, 250, 251, 252, 253, 254, 255, 256, 257, 1022, 1023, 1024, 1025, 20_000)


def deep_requests(servers: Servers, deep: str) -> Iterator[tuple[Sent, str]]:
    """One request per endpoint and place carrying `deep`, with the kind its answer is checked as."""
    auth = ("Authorization", f"Bearer {servers.keys['acme']}")
    json_type = ("Content-Type", "application/json")
    accept = ("Accept", "application/json, text/event-stream")
    mcp, call = f"{servers.gateway}/mcp/v1/acme/support", f"{servers.gateway}/mcp/v1/acme/support/call"
    for body in (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_user","arguments":{"id":' + deep + "}}}",
        '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"x":' + deep + "}}}",
        deep,
    ):
        yield Sent("POST", mcp, [auth, json_type, accept], body.encode()), "mcp"
        yield Sent("POST", f"{servers.rpc}/mcp", [json_type, accept], body.encode()), "mcp"
    for body in ('{"name":"get_user","arguments":{"id":' + deep + "}}", deep):
        yield Sent("POST", call, [auth, json_type], body.encode()), "call"
    for body in ('{"jsonrpc":"2.0","id":1,"method":"Catalog.search","params":{"query":' + deep + "}}", deep):
        yield Sent("POST", f"{servers.rpc}/rpc", [json_type], body.encode()), "rpc"
    operation = '{"protocol":"http","target":{"url":"http://127.0.0.1:9/x"},"input_schema":{"x":' + deep + "}}"
    admin_auth = ("Authorization", f"Bearer {ADMIN_TOKEN}")
    for content_type in ("application/json", "application/yaml"):
        for body in (operation, deep):
            url = f"{servers.admin}/workspaces/acme/operations/deep"
            yield Sent("PUT", url, [admin_auth, ("Content-Type", content_type)], body.encode()), "admin"


@pytest.mark.parametrize("shape", ["array", "object"])
def test_deep_json_near_and_past_each_limit_is_answered_in_shape_everywhere(
    servers: Servers, client: httpx.Client, shape: str
) -> None:
    for depth in DEPTHS:
        for sent, kind in deep_requests(servers, nested(depth, shape)):
            check(servers, sent, send(client, sent), kind)


@settings(FUZZ, max_examples=16)
@given(data=st.data())
def test_bodies_near_and_past_the_size_limit_are_answered_in_shape(
    servers: Servers, client: httpx.Client, data: st.DataObject
) -> None:
    size = data.draw(st.sampled_from([MAX_BODY - 200, MAX_BODY, MAX_BODY + 1, MAX_BODY + 100_000]), label="size")
    chunked = data.draw(st.booleans(), label="chunked")
    target = data.draw(st.sampled_from(["mcp", "tools", "call", "rpc"]), label="endpoint")
    prefix = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_user","arguments":{"id":1,"pad":"'
    body = prefix + b"x" * (size - len(prefix) - 4) + b'"}}}'
    assert len(body) == size
    url = {"mcp": f"{servers.gateway}/mcp/v1/acme/support", "tools": f"{servers.gateway}/mcp/v1/acme/support/tools",
           "call": f"{servers.gateway}/mcp/v1/acme/support/call", "rpc": f"{servers.rpc}/rpc"}[target]  # fmt: skip
    headers: list[Any] = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"),
                          ("Authorization", f"Bearer {servers.keys['acme']}")]  # fmt: skip
    method = "GET" if target == "tools" else "POST"
    if chunked:  # no Content-Length: the limit must hold on a streamed body too
        chunks = iter([body[i : i + 65536] for i in range(0, len(body), 65536)])
        request = client.build_request(method, url, headers=headers, content=chunks)
        sent = Sent(method, url, headers, body[:2000])
        response = client.send(request)
    else:
        sent = Sent(method, url, headers, body)
        response = send(client, sent)
    check(servers, sent, response, target)
    if len(body) > MAX_BODY and target != "tools":
        assert response.status_code == 413, response.content[:200]


@settings(FUZZ, max_examples=50)
@given(data=st.data())
def test_random_bytes_and_values_are_answered_in_shape_everywhere(
    servers: Servers, client: httpx.Client, data: st.DataObject
) -> None:
    body = data.draw(st.binary(max_size=300) | json_values.map(wire_json), label="body")
    content_type = data.draw(st.sampled_from(["application/json", "application/yaml", "text/plain"]), label="type")
    target = data.draw(st.sampled_from(["mcp", "call", "rpc", "rpc2", "admin"]), label="endpoint")
    auth = {"admin": f"Bearer {ADMIN_TOKEN}", "rpc": "Bearer admin-token"}.get(target, f"Bearer {servers.keys['acme']}")
    headers: list[Any] = [("Content-Type", content_type), ("Accept", "application/json, text/event-stream"),
                          ("Authorization", auth)]  # fmt: skip
    url = {"mcp": f"{servers.gateway}/mcp/v1/acme/support", "call": f"{servers.gateway}/mcp/v1/acme/support/call",
           "rpc": f"{servers.rpc}/rpc", "rpc2": f"{servers.rpc}/rpc/v2",
           "admin": f"{servers.admin}/workspaces/acme/agents/desk"}[target]  # fmt: skip
    sent = Sent("PUT" if target == "admin" else "POST", url, headers, body)
    check(servers, sent, send(client, sent), {"rpc2": "rpc"}.get(target, target))


# -- the plain pair ---------------------------------------------------------------------------------------


@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_the_plain_pair_answers_in_its_shape(servers: Servers, client: httpx.Client, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(mcp_bases(servers)), label="endpoint")
    route = data.draw(st.sampled_from(["tools", "call"]), label="route")
    tool = data.draw(st.sampled_from(TOOLS) | st.text(max_size=12), label="tool")
    request: Any = {"name": tool, "arguments": dict(VALID_ARGUMENTS.get(tool, {}))}
    request = data.draw(st.sampled_from([request] * 3) | json_values | st.fixed_dictionaries(
        {"name": json_values, "arguments": json_values}), label="body")  # fmt: skip
    headers, drop = data.draw(mcp_headers(servers, "legacy", "tools/call", tool), label="headers")
    method = data.draw(st.sampled_from(["GET" if route == "tools" else "POST"] * 6 + ["PUT", "DELETE"]), label="verb")
    format_query = data.draw(st.sampled_from(["", "", "?format=markdown", "?format=nonsense", "?format="]))
    sent = Sent(method, f"{base}/{route}{format_query}", headers, wire_json(request) if route == "call" else b"", drop)
    check(servers, sent, send(client, sent), route)


# -- /rpc -------------------------------------------------------------------------------------------------

RPC_METHODS = ("Catalog.search", "Catalog.get", "user.get", "user.delete", "internal.reindex", "rpc.discover", "nope")
RPC_PARAMS: dict[str, Any] = {"Catalog.search": {"query": "ko", "limit": 2}, "Catalog.get": {"id": 1},
                              "user.get": {"email": "olena@example.com"}, "user.delete": {"id": 99}}  # fmt: skip


@st.composite
def rpc_messages(draw: st.DrawFn, long: bool = True) -> Any:
    method = draw(st.sampled_from(RPC_METHODS))
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(st.sampled_from([1, "x", None]) | scalars),
                               "method": method, "params": dict(RPC_PARAMS.get(method, {}))}  # fmt: skip
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(["jsonrpc", "id", "method", "params", "params.query", "params.id", "params.limit"]))
        parent, name = (message.get("params"), key[7:]) if key.startswith("params.") else (message, key)
        if not isinstance(parent, dict):
            continue
        if draw(st.booleans()):
            parent.pop(name, None)
        else:
            parent[name] = draw(json_values | long_texts if long else json_values)
    return message


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_rpc_answers_every_request_in_shape(servers: Servers, client: httpx.Client, data: st.DataObject) -> None:
    shape = data.draw(st.sampled_from(["one", "one", "batch", "value"]), label="shape")
    if shape == "batch":
        size = data.draw(st.sampled_from([1, 3, DEFAULT_MAX_BATCH_ITEMS, DEFAULT_MAX_BATCH_ITEMS + 1, 500]))
        one = data.draw(rpc_messages(long=False))  # repeated: its size is what is tested
        payload: Any = [one] * size
    else:
        payload = data.draw(rpc_messages() if shape == "one" else json_values)
    version = data.draw(st.sampled_from(["/rpc", "/rpc/v2", "/rpc/v3"]), label="path")
    auth = data.draw(st.sampled_from([None, "Bearer admin-token", "Bearer nope", "Basic x"]) | header_value("x"))
    content_type = data.draw(header_value("application/json", "text/plain"), label="content-type")
    headers = [(name, value) for name, value in (("Authorization", auth), ("Content-Type", content_type)) if value]
    method = data.draw(st.sampled_from(["POST"] * 8 + ["GET", "PUT", "PATCH"]), label="verb")
    sent = Sent(method, servers.rpc + version, headers, wire_json(payload))
    response = send(client, sent)
    if version == "/rpc/v3":  # not served: Starlette's own 404
        assert response.status_code == 404
        return
    check(servers, sent, response, "rpc")


# -- the admin API ----------------------------------------------------------------------------------------

ADMIN_ROUTES = (
    ("GET", "/workspaces", None), ("PUT", "/workspaces/{ws}", {"name": "Acme", "token_budget": 5000}),
    ("GET", "/workspaces/{ws}", None), ("GET", "/workspaces/{ws}/operations", None),
    ("GET", "/workspaces/{ws}/operations/{name}", None),
    ("PUT", "/workspaces/{ws}/operations/{name}", {"protocol": "http", "target": {"method": "GET",
                                                   "url": "http://127.0.0.1:9/items/{id}"},
                                                   "input_schema": {"type": "object"}}),
    ("DELETE", "/workspaces/{ws}/operations/{name}", None),
    ("POST", "/workspaces/{ws}/operations/{name}/republish", None),
    ("POST", "/workspaces/{ws}/imports", {"format": "openapi", "url": "http://127.0.0.1:9/openapi.json"}),
    ("POST", "/workspaces/{ws}/imports", {"format": "openrpc", "document": {"openrpc": "1.3.2", "methods": []}}),
    ("GET", "/workspaces/{ws}/agents", None), ("GET", "/workspaces/{ws}/agents/{name}", None),
    ("PUT", "/workspaces/{ws}/agents/{name}", {"bindings": [{"operation": "op"}], "mode": "direct"}),
    ("PUT", "/workspaces/{ws}/agents/{name}/bindings/{name}", {"operation": "op", "tool_name": "tool"}),
    ("DELETE", "/workspaces/{ws}/agents/{name}/bindings/{name}", None),
    ("POST", "/workspaces/{ws}/agents/{name}/publish", None), ("GET", "/workspaces/{ws}/agents/{name}/versions", None),
    ("POST", "/workspaces/{ws}/agents/{name}/rollback", {"version": 1}),
    ("POST", "/workspaces/{ws}/api-keys", {"agents": ["desk"]}), ("GET", "/workspaces/{ws}/api-keys", None),
    ("DELETE", "/workspaces/{ws}/api-keys/{name}", None),
    ("POST", "/apply", {"workspace": {"slug": "acme", "name": "Acme"}, "agents": {"desk": {"bindings": []}}}),
    ("GET", "/nowhere", None), ("PATCH", "/workspaces/{ws}", {"name": "x"}),
)  # fmt: skip
_YAML_BOMB = b'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n' + b"".join(
    b"%s: &%s [%s]\n" % (chr(99 + i).encode(), chr(99 + i).encode(), b",".join([b"*" + chr(98 + i).encode()] * 9))
    for i in range(7)
)


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_the_admin_api_answers_in_its_shape(servers: Servers, client: httpx.Client, data: st.DataObject) -> None:
    method, template, body = data.draw(st.sampled_from(ADMIN_ROUTES), label="route")
    names = st.sampled_from(["acme", "desk", "op", "ghost", "a" * 300, "%2e%2e", "x%00y", "ü"]) | st.text(
        st.characters(min_codepoint=0x30, max_codepoint=0x7A), min_size=1, max_size=10
    )  # fmt: skip
    path = template.replace("{ws}", data.draw(names, label="workspace")).replace("{name}", data.draw(names))
    if body is not None:
        body = data.draw(st.sampled_from([body] * 3) | mutated(body) | json_values, label="body")
    content_type = data.draw(st.sampled_from(["application/json", "application/json", "application/yaml"]))
    raw = wire_json(body) if body is not None else b""
    raw = data.draw(st.sampled_from([raw] * 6 + [_YAML_BOMB, b"{", b"- [" * 300]) | st.binary(max_size=40))
    auth = data.draw(st.sampled_from([f"Bearer {ADMIN_TOKEN}"] * 6 + [None, "Bearer nope", ADMIN_TOKEN]))
    headers = [(n, v) for n, v in (("Content-Type", content_type), ("Authorization", auth)) if v is not None]
    sent = Sent(method, servers.admin + path, headers, raw)
    check(servers, sent, send(client, sent), "admin")


# -- afterwards -------------------------------------------------------------------------------------------


def test_every_server_still_serves_an_honest_client(servers: Servers, client: httpx.Client) -> None:
    """Runs last in this module: whatever the fuzz tests above sent, every tenant is served as before."""
    healthy(servers, client)
