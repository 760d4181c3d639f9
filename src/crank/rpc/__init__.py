"""The rpc layer: Python methods as JSON-RPC 2.0, OpenRPC and MCP tools, through one executor."""

from __future__ import annotations

from crank.rpc.app import RPCApp
from crank.rpc.auth import BearerTokenRoles, RoleResolver
from crank.rpc.context import Context
from crank.rpc.events import Event
from crank.rpc.executor import fencing_token
from crank.rpc.method import MCP, RateLimit

__all__ = ["MCP", "BearerTokenRoles", "Context", "Event", "RPCApp", "RateLimit", "RoleResolver", "fencing_token"]
