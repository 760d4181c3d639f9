"""MCP protocol constants: versions, MCP's own error codes, `_meta` keys (JSON-RPC's codes: `crank.wire.jsonrpc`).

Names follow the official MCP SDK (`mcp_types`) so that code reads the same on both sides.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLIENT_CAPABILITIES_META_KEY",
    "CLIENT_INFO_META_KEY",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "HEADER_MISMATCH",
    "LATEST_HANDSHAKE_VERSION",
    "LATEST_MODERN_VERSION",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "MODERN_PROTOCOL_VERSIONS",
    "PROTOCOL_VERSION_META_KEY",
    "SERVER_INFO_META_KEY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "BATCH_PROTOCOL_VERSIONS",
    "DEFAULT_HEADERLESS_VERSION",
]

HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Versions reached through the `initialize` handshake, oldest first."""
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
"""Stateless versions: no handshake, version and capabilities in every request's `_meta`."""
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_PROTOCOL_VERSIONS[-1]
LATEST_MODERN_VERSION: Final = MODERN_PROTOCOL_VERSIONS[-1]

BATCH_PROTOCOL_VERSIONS: Final = ("2025-03-26",)
"""JSON-RPC batches were added in 2025-03-26 and removed in 2025-06-18 (changelog, major change 1)."""
DEFAULT_HEADERLESS_VERSION: Final = "2025-03-26"
"""Transports §Protocol Version Header: without the header and no other clue, assume 2025-03-26."""

PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY: Final = "io.modelcontextprotocol/serverInfo"

HEADER_MISMATCH: Final = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
