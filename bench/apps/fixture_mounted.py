"""The conformance fixture's endpoint mounted in a Starlette router, as examples/conformance_app.py served it
before `EndpointRouter`: what bench/profile_core.py compares the served fixture with."""

from __future__ import annotations

from examples.conformance_app import endpoint
from starlette.applications import Starlette

from crank.mcp import mount

app = Starlette(routes=[mount("/mcp", endpoint)])
