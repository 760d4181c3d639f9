"""A small RPCApp for the rpc tests, and what its methods saw."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from crank.exceptions import NotFoundError
from crank.rpc import MCP, BearerTokenRoles, RPCApp
from crank.server import MCPConfig, RPCService


class Product(BaseModel):
    id: int
    name: str
    secret: str = "s3cret"


class Ran:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.active = 0
        self.overlapped = False


def make_app(**mcp_options: Any) -> tuple[RPCService, Ran]:
    ran = Ran()
    app = RPCApp(title="Test", versions=("v1", "v2"), roles=BearerTokenRoles({"t-admin": ["admin"]}))

    @app.method("echo", groups=["mcp"], mcp=MCP())
    async def echo(text: str, times: int = 1) -> str:
        """Repeat the text.

        Args:
            text: What to repeat.
            times: How often.
        """
        ran.calls.append(("echo", text))
        return text * times

    @app.method(
        "product.get", groups=["mcp"], cache=60, mcp=MCP(transformer=lambda r: {"id": r["id"], "name": r["name"]})
    )
    def get_product(id: int) -> Product:
        ran.calls.append(("product.get", id))
        if id == 0:
            raise NotFoundError(f"No product {id}")
        return Product(id=id, name=f"p{id}")

    @app.method("slow", groups=["mcp"], lock=True, mcp=MCP())
    async def slow() -> int:
        ran.active += 1
        ran.overlapped |= ran.active > 1
        await asyncio.sleep(0.02)
        ran.active -= 1
        return 1

    @app.method("limited", groups=["mcp"], rate_limit="2/minute", mcp=MCP())
    async def limited() -> str:
        return "ok"

    @app.method("boom", groups=["mcp"], mcp=MCP())
    async def boom() -> None:
        raise RuntimeError("database password hunter2")

    @app.method("admin.purge", groups=["mcp"], roles=["admin"], mcp=MCP(destructive_hint=True))
    async def purge() -> bool:
        ran.calls.append(("admin.purge", None))
        return True

    @app.method("new.thing", groups=["mcp"], versions=["v2"], mcp=MCP())
    async def new_thing() -> str:
        return "v2 only"

    @app.method("hidden", groups=["mcp"])
    async def hidden() -> str:
        return "no opt-in"

    @app.method("other.group", groups=["other"], mcp=MCP())
    async def other() -> str:
        return "other"

    return RPCService(app, mcp={"/mcp": MCPConfig(enabled=True, **mcp_options)}), ran
