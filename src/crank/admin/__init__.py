"""The admin layer: getting APIs into the registry (OpenAPI, OpenRPC, declarative YAML) and the admin HTTP API."""

from __future__ import annotations
