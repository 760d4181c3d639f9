"""The gateway runtime: remote operations called through mappings and adapters, with structured errors."""

from __future__ import annotations

from crank.gateway.mapping import InputMapping, OutputMapping, RequestParts
from crank.gateway.operation import RemoteOperation

__all__ = ["InputMapping", "OutputMapping", "RemoteOperation", "RequestParts"]
