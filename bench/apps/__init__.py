"""ASGI targets for the Crank benchmark; each module exposes `app` serving MCP (POST) at /."""

from __future__ import annotations

from typing import Any


def serve_gateway(gateway: Any, host: str, port: int) -> None:
    """A `GatewayService` served as `crank serve` serves it: Crank's HTTP protocol with the default connection
    limits and the gateway's early answers (the `serve` of each Crank gateway app). Crank is imported here, not
    by the package: the peers' apps run where it may not be installed."""
    from crank.wire.connection_limits import ConnectionLimits
    from crank.wire.listen import bind_listener, serve_on

    serve_on(
        gateway,
        bind_listener(host, port),
        ConnectionLimits(),
        answer_early=gateway.answer_early,
        answers_early_now=gateway.answers_early_now,
    )
