"""What one publish costs a replica that serves N tenants: `AgentSource.reload` after it, with the change log
(issue 39: only what changed is read and rebuilt) and reading everything, as every reload did before.

    .venv/bin/python -m bench.publish_reload [--tenants 100,1000] [--tools 20] [--publishes 10]

A SQLite registry of N workspaces, each with one agent of `--tools` tools (one operation each) and one API key.
One `AgentSource` with room for all of them builds every agent (a request each: the worst case, a replica that
holds every tenant; its heap settled as `crank serve` does), then each round publishes a new version of one
tenant's agent and times the reload that follows, twice: as the change log allows, and with the log bypassed
(a replica told `everything`, which reads every held agent's view again, as every reload did before). Prints the
time to load and build them all, and the median and max reload time of each.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from crank.gateway.client import UpstreamClient
from crank.mcp.catalog import Catalog
from crank.registry import Changes, Registry, migrate, open_engine
from crank.sources.agent_cache import AgentCacheLimits
from crank.sources.agents import AgentSource


def operation(tool: int, version: int) -> dict[str, Any]:
    target = {"method": "GET", "url": f"https://api.example.com/items/{tool}"}  # never called
    schema = {"type": "object", "properties": {"id": {"type": "string", "description": "The item's id."}}}
    return {"protocol": "http", "target": target, "description": f"Item {tool}, v{version}", "input_schema": schema}


def seed(registry: Registry, tenants: int, tools: int) -> None:
    for index in range(tenants):
        slug = f"t{index:05}"
        registry.put_workspace(slug, slug)
        for tool in range(tools):
            registry.put_operation(slug, f"op{tool:03}", operation(tool, 1))
        registry.put_agent(slug, "desk", {"bindings": [{"operation": f"op{tool:03}"} for tool in range(tools)]})
        registry.publish(slug, "desk")
        registry.create_api_key(slug)


class Everything(Registry):
    """The registry with its change log bypassed: every reload reads all, as before issue 39."""

    def changes_since(self, generation: int) -> Changes:
        return Changes(self.generation(), everything=True)


async def build_all(source: AgentSource, tenants: int) -> None:
    """Every tenant's agent built, as its first request builds it."""
    for index in range(tenants):
        scope = {"path": "/", "path_params": {"workspace": f"t{index:05}", "agent": "desk"}}
        provided = source.provide(scope)
        if not isinstance(provided, Catalog):
            await provided
    await source.aclose()


def timed_reloads(source: AgentSource, registry: Registry, tenants: int, publishes: int, tools: int) -> list[float]:
    times = []
    for round_ in range(publishes):
        slug = f"t{(round_ * 7919) % tenants:05}"
        registry.put_operation(slug, "op000", operation(0, round_ + 2))
        registry.publish(slug, "desk")
        started = time.perf_counter()
        source.reload()
        times.append(time.perf_counter() - started)
    return times


def run(tenants: int, tools: int, publishes: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'registry.sqlite3'}"
        engine = open_engine(url, pooled=False)
        migrate(engine)
        seed(Registry(engine), tenants, tools)
        for name, kind in (("change log", Registry), ("everything", Everything)):
            registry = kind(engine)
            source = AgentSource(registry, UpstreamClient(), require_keys=False,
                                 agent_cache=AgentCacheLimits(size=tenants, builds_per_second=1e6))  # fmt: skip
            started = time.perf_counter()
            source.reload()
            asyncio.run(build_all(source, tenants))
            loaded = time.perf_counter() - started
            times = timed_reloads(source, registry, tenants, publishes, tools)
            print(f"{tenants:>6} tenants, {name:<10}: all built in {loaded:6.2f} s; reload after a publish "
                  f"p50 {statistics.median(times) * 1000:8.1f} ms, max {max(times) * 1000:8.1f} ms")  # fmt: skip
        engine.dispose()


def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="100,1000")
    parser.add_argument("--tools", type=int, default=20)
    parser.add_argument("--publishes", type=int, default=10)
    args = parser.parse_args()
    for tenants in (int(part) for part in args.tenants.split(",")):
        run(tenants, args.tools, args.publishes)


if __name__ == "__main__":
    main()
