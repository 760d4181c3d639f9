"""Crank: publish existing APIs to LLM agents as MCP tools."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
