"""Crank benchmark harness (see bench/README.md)."""
