"""Target `crank-rpcservice`: the in-process product as the README teaches it (section "Adding MCP to a Python
JSON-RPC service"): an `RPCApp` method in the `mcp` group, served by `RPCService` at `/mcp`, beside its
JSON-RPC endpoint. The tool is the benchmark's `echo` (bench/wrk/tools_call.lua); issue 38 asks 0.7x the bare
ASGI app of it."""

from __future__ import annotations

from crank.rpc import MCP, RPCApp
from crank.server import MCPConfig, RPCService

rpc = RPCApp(title="Bench")


@rpc.method("echo", groups=["mcp"], mcp=MCP(format="plain"))
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


app = RPCService(rpc, mcp={"/mcp": MCPConfig(enabled=True)})
