"""The bottom layer: JSON-RPC envelopes and codes, ASGI primitives, HTTP grammar and the request checks
that wrap any ASGI app. Every layer above (rpc, mcp, gateway, admin) imports these; nothing here imports
a layer above."""

from __future__ import annotations
