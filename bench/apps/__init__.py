"""ASGI targets for the Crank benchmark; each module exposes `app` serving MCP (POST) at /."""
