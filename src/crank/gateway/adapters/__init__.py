"""Adapters: how a mapped call reaches an upstream. One module per protocol."""
