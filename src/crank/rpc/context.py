"""What a method may ask of the call it serves: a parameter annotated `Context` is given it, never an argument.

```python
@app.method("Reports.build", groups=["mcp"], mcp=MCP())
async def build(year: int, ctx: Context) -> str:
    await ctx.progress(0, 2)
    answer = await ctx.elicit("Include drafts?", {"type": "object", "properties": {"drafts": {"type": "boolean"}}})
    await ctx.progress(2, 2)
    return "built"
```

Called as an MCP tool, the context is the MCP call's own (`crank.mcp.CallContext`): progress and log messages reach
the client, and questions are asked as each protocol era asks them. Called over /rpc, nothing reaches the client
before the answer: `progress` and `log` send nothing, `can_ask` is False, and `elicit` or `sample` fail the call with
an `RPCError` (-32000). The parameter is in neither the method's schema nor its OpenRPC document.

The context's coroutines run on the event loop. A sync method (run in a worker thread) reaches them with
`anyio.from_thread.run(ctx.progress, 1, 2)`.
"""

from __future__ import annotations

from typing import Any, Protocol

from crank.exceptions import RPCError
from crank.ids import new_request_id
from crank.types import JSONObject

__all__ = ["Context", "RPCContext"]


class Context(Protocol):
    """The call's way to its client. `crank.mcp.CallContext` is one; `RPCContext` is the /rpc call's."""

    @property
    def request_id(self) -> str: ...

    @property
    def progress_token(self) -> str | int | None:
        """Whether anyone listens to `progress`: the request's progress token, or None."""

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None: ...

    async def log(self, level: str, data: Any, logger: str | None = None) -> None: ...

    def can_ask(self, capability: str) -> bool:
        """Whether the client declared `capability` (`elicitation`, `sampling`) and can be asked here."""

    async def elicit(self, message: str, schema: JSONObject, *, timeout: float | None = None) -> JSONObject: ...

    async def sample(self, prompt: str, max_tokens: int = 1000, **options: Any) -> JSONObject: ...


class RPCContext:
    """A /rpc call's context: its answer is the only thing its client receives."""

    __slots__ = ("_request_id",)

    def __init__(self, request_id: str | None = None) -> None:
        self._request_id = request_id

    @property
    def request_id(self) -> str:
        if self._request_id is None:
            self._request_id = new_request_id()
        return self._request_id

    @property
    def progress_token(self) -> str | int | None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        return None

    def can_ask(self, capability: str) -> bool:
        return False

    async def elicit(self, message: str, schema: JSONObject, *, timeout: float | None = None) -> JSONObject:
        raise _cannot_ask("elicitation/create")

    async def sample(self, prompt: str, max_tokens: int = 1000, **options: Any) -> JSONObject:
        raise _cannot_ask("sampling/createMessage")


def _cannot_ask(method: str) -> RPCError:
    return RPCError(
        f"This call cannot send {method}: over /rpc nothing reaches the client before the answer. Call the method "
        "as an MCP tool from a client that declared the capability."
    )
