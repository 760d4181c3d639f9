"""Claude Desktop and the other hosts that start MCP servers only as local processes reach a Crank gateway
through the stdio bridge `mcp-remote` (npm, pinned in package.json), which adds the workspace API key as a
header: the entry of claude_desktop_config.json that the docs give, run as the host runs it and driven by the
official SDK's stdio client. Without the key the gateway answers 401 and the bridge serves no tools: it tries
OAuth instead, which this gateway (API keys only) does not offer, and gives up.

At test time nothing is fetched: `npx mcp-remote` becomes Node 22 from node_modules (`scripts/install --node`)
running the bridge's own entry point, and the bridge keeps its state (~/.mcp-auth) in the test's directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from crank.registry import Registry
from crank.server import GatewayService
from crank.types import ASGIApp, Message, Receive, Scope, Send
from mcp import Client
from tests.gateway import upstream
from tests.gateway.test_gateway import publish_demo

ROOT = Path(__file__).resolve().parent.parent.parent
NODE = ROOT / "node_modules" / ".bin" / "node"
PACKAGE = ROOT / "node_modules" / "mcp-remote"
# The whole life of one bridge, from its start to its last answer. Past it the session is cancelled and the SDK's
# shutdown closes the bridge's stdin, then kills it: a bridge that hangs never hangs the suite.
BRIDGE_TIMEOUT = 60

pytestmark = pytest.mark.anyio


def desktop_entry(url: str, env: dict[str, str], header: str | None) -> dict[str, Any]:
    """One `mcpServers` entry of claude_desktop_config.json, as the docs give it, with `--allow-http` for a
    gateway on plain HTTP (mcp-remote lets HTTP through to localhost and 127.0.0.1 even without it). Crank serves
    Streamable HTTP only: `--transport http-only` keeps the bridge from falling back to the old SSE transport."""
    headers = ["--header", header] if header is not None else []
    return {
        "command": "npx",
        "args": ["mcp-remote", url, *headers, "--allow-http", "--transport", "http-only"],
        "env": env,
    }


def bridge(entry: dict[str, Any], home: Path) -> StdioServerParameters:
    """What the host starts for `entry`: `npx mcp-remote ARGS` is the package's bin script run by Node with
    ARGS, and the entry's `env` comes on top of the host's own (here: the SDK's default environment, with a
    home directory of the test's)."""
    assert NODE.exists() and PACKAGE.exists(), "Node 22 and mcp-remote are missing: run scripts/install --node"
    assert entry["command"] == "npx" and entry["args"][0] == "mcp-remote"
    bins = json.loads((PACKAGE / "package.json").read_text())["bin"]
    script = PACKAGE / (bins if isinstance(bins, str) else bins["mcp-remote"])
    env = {"HOME": str(home), "MCP_REMOTE_CONFIG_DIR": str(home / ".mcp-auth"), **entry["env"]}
    return StdioServerParameters(command=str(NODE), args=[str(script), *entry["args"][1:]], env=env, cwd=home)


@dataclass
class Gateway:
    url: str
    key: str
    answers: list[tuple[str, str, int]] = field(default_factory=list)
    """(method, path, status) of every HTTP answer the gateway gave, in order."""

    def statuses(self, method: str = "POST") -> list[int]:
        """The statuses of the answers to `method` at the agent's MCP endpoint."""
        path = "/" + self.url.split("/", 3)[3]
        return [status for seen, at, status in self.answers if (seen, at) == (method, path)]


def recording(app: ASGIApp, answers: list[tuple[str, str, int]]) -> ASGIApp:
    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                answers.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await app(scope, receive, sending if scope["type"] == "http" else send)

    return recorded


@pytest.fixture
def gateway(sqlite_registry: Registry, serve: Callable[..., str]) -> Gateway:
    """The published demo agent (workspace `acme`, agent `support`) on a gateway that requires API keys, over
    real HTTP on loopback, and a key of the workspace."""
    publish_demo(sqlite_registry, serve(upstream.app))
    answers: list[tuple[str, str, int]] = []
    root = serve(recording(GatewayService(sqlite_registry, poll_interval=0.05), answers))
    return Gateway(root + "/mcp/v1/acme/support", sqlite_registry.create_api_key("acme"), answers)


# What the SDK client raises when the bridge exits (inside task groups).
CLOSED = pytest.RaisesGroup(
    pytest.RaisesExc(MCPError, match="Connection closed"), flatten_subgroups=True, allow_unwrapped=True
)

# The two forms of the header that mcp-remote's README gives: the key alone in the environment, and the whole
# value there with no space in the argument (for hosts that split arguments at spaces: Claude Desktop on Windows).
HEADERS: dict[str, tuple[str, Callable[[str], dict[str, str]]]] = {
    "key-in-env": ("Authorization: Bearer ${CRANK_API_KEY}", lambda key: {"CRANK_API_KEY": key}),
    "header-in-env": ("Authorization:${CRANK_AUTHORIZATION}", lambda key: {"CRANK_AUTHORIZATION": "Bearer " + key}),
}


@pytest.mark.parametrize("form", list(HEADERS))
async def test_claude_desktop_reaches_the_gateway_through_mcp_remote(
    gateway: Gateway, tmp_path: Path, form: str
) -> None:
    header, env = HEADERS[form]
    entry = desktop_entry(gateway.url, env(gateway.key), header)
    assert gateway.key not in json.dumps(entry["args"])  # the key stays in `env`, out of the process list
    server = bridge(entry, tmp_path)
    with (tmp_path / "bridge.log").open("w") as errlog, anyio.fail_after(BRIDGE_TIMEOUT):
        # Claude Desktop speaks the handshake era (2025-11-25); mcp-remote passes its `initialize` through.
        async with Client(stdio_client(server, errlog=errlog), mode="legacy") as client:
            tools = await client.list_tools()
            result = await client.call_tool("get_user", {"id": 2})
    log = (tmp_path / "bridge.log").read_text()
    assert "get_user" in [tool.name for tool in tools.tools], log
    assert result.is_error is False, log
    assert result.structured_content == {"result": {"id": 2, "name": "user2"}}
    assert 401 not in gateway.statuses() and 200 in gateway.statuses()
    assert gateway.key not in log  # the bridge names the header, never its value


@pytest.mark.parametrize("header", [None, "Authorization: Bearer ${CRANK_API_KEY}"], ids=["no-header", "unset-key"])
async def test_without_the_key_the_bridge_gets_no_tools(gateway: Gateway, tmp_path: Path, header: str | None) -> None:
    entry = desktop_entry(gateway.url, {}, header)  # unset-key: the variable is missing from `env`
    server = bridge(entry, tmp_path)
    tools = None
    with (tmp_path / "bridge.log").open("w") as errlog, anyio.move_on_after(BRIDGE_TIMEOUT):
        # On the 401 mcp-remote tries OAuth (discovery, client registration), which this gateway does not offer,
        # and exits before the handshake is answered: the SDK client sees the connection close. Should it wait
        # instead, the deadline ends the session, and the SDK's shutdown closes its stdin and kills it.
        try:
            async with Client(stdio_client(server, errlog=errlog), mode="legacy") as client:
                tools = await client.list_tools()
        except Exception as error:  # an ExceptionGroup too; not the deadline's cancellation
            assert CLOSED.matches(error), (tmp_path / "bridge.log").read_text()
    log = (tmp_path / "bridge.log").read_text()
    assert tools is None, log
    assert gateway.statuses() and set(gateway.statuses()) == {401}, (gateway.answers, log)
