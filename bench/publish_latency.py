"""Publish-to-served latency across MCP replicas, with the push (LISTEN/NOTIFY) and with polling only (issue 13).

    .venv/bin/python -m bench.publish_latency [--replicas 3] [--publishes 100] [--tools 20] [--poll-interval 0.5]

Two clusters of `--replicas` `crank serve --role mcp` OS processes, each cluster on a PostgreSQL database of
its own (one server: $CRANK_BENCH_POSTGRES_URL, an admin URL that may create databases, else a throwaway one
started here as the tests do): one with `CRANK_REGISTRY_PUSH=true` (the default), one with `false`. Both
poll every `--poll-interval` seconds (the default setting, 0.5 s).

Each round publishes a new version of one agent (`--tools` tools whose descriptions name the version) in
each cluster in turn, with `Registry.publish` in this process as `crank publish` does; the clock starts when
the publish's transaction has committed. One thread per replica asks that replica's plain tool list
(`GET /mcp/v1/bench/desk/tools`) in a loop until it lists the new version; the publish's latency is the
time until the last replica does. Between rounds a random pause of up to one poll interval, so the
publishes fall anywhere in the polling cycle. The run prints p50, p90, p99 and max of each mode.

It measures latency, not throughput: other work on the machine adds to it (note the load when you run it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import make_url
from tests import services

from crank.registry import Registry, migrate, open_engine
from crank.registry.changes import POSTGRES_CHANNEL

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
START_TIMEOUT = 60.0
SERVED_TIMEOUT = 30.0  # seconds a replica may take to serve a publish before the run fails


def operations(tools: int, version: int) -> dict[str, dict[str, Any]]:
    target = {"method": "GET", "url": "http://127.0.0.1:9/never"}
    return {f"op{i:03}": {"protocol": "http", "target": target, "description": f"v{version}"} for i in range(tools)}


@dataclass
class Cluster:
    name: str
    push: bool
    database_url: str
    registry: Registry
    ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    clients: list[httpx.Client] = field(default_factory=list)  # one per replica, made once (keep-alive)
    latencies: list[float] = field(default_factory=list)
    version: int = 1

    def start(self, replicas: int, poll_interval: float, root: Path) -> None:
        for index in range(replicas):
            port = services.free_port()
            env = {
                **{key: value for key, value in os.environ.items() if not key.startswith("CRANK_")},
                "CRANK_DATABASE_URL": self.database_url,
                "CRANK_ROLE": "mcp",
                "CRANK_LISTEN": f"{HOST}:{port}",
                "CRANK_DATA_DIR": str(root / f"{self.name}-{index}"),
                "CRANK_REQUIRE_API_KEYS": "false",
                "CRANK_POLL_INTERVAL": str(poll_interval),
                "CRANK_REGISTRY_PUSH": "true" if self.push else "false",
                "CRANK_LOG_LEVEL": "warning",
            }
            log = (root / f"{self.name}-{index}.log").open("wb")
            process = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve"], cwd=ROOT, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            self.ports.append(port)
            self.processes.append(process)
        for port in self.ports:
            wait_until(lambda port=port: ready(port), f"replica on port {port} ready")
            self.clients.append(httpx.Client(base_url=f"http://{HOST}:{port}", timeout=SERVED_TIMEOUT))
        if self.push:
            wait_until(lambda: listeners(self.database_url) == replicas, "every replica listening")

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def publish_once(self, tools: int, pool: ThreadPoolExecutor) -> float:
        """Publish the next version; the seconds from its commit until every replica lists it."""
        self.version += 1
        self.registry.put_operations("bench", operations(tools, self.version))
        expected = f"v{self.version}"
        start = threading.Event()
        waits = [pool.submit(served_at, client, expected, start) for client in self.clients]
        self.registry.publish("bench", "desk")
        committed = time.perf_counter()
        start.set()
        latency = max(wait.result() for wait in waits) - committed
        self.latencies.append(latency)
        return latency


def served_at(client: httpx.Client, expected: str, start: threading.Event) -> float:
    """When the replica first listed the version described `expected` (perf_counter), asked in a loop."""
    start.wait()
    deadline = time.perf_counter() + SERVED_TIMEOUT
    while True:
        answer = client.get("/mcp/v1/bench/desk/tools")
        now = time.perf_counter()
        if answer.status_code == 200 and answer.json()["tools"][0]["description"] == expected:
            return now
        if now > deadline:
            raise SystemExit(f"{client.base_url} did not serve {expected} in {SERVED_TIMEOUT:g} s")
        time.sleep(0.001)


def ready(port: int) -> bool:
    try:
        return httpx.get(f"http://{HOST}:{port}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def listeners(database_url: str) -> int:
    url = make_url(database_url)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False)) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query = %s",
            (url.database, f'LISTEN "{POSTGRES_CHANNEL}"'),
        ).fetchone()
    return int(row[0]) if row else 0


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {START_TIMEOUT:g} s")
        time.sleep(0.05)


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    configured = os.environ.get("CRANK_BENCH_POSTGRES_URL") or os.environ.get("CRANK_TEST_POSTGRES_URL")
    if configured:
        yield configured
        return
    with services.start_postgres() as server:
        yield server.url


def seeded_database(admin_url: str, tools: int) -> tuple[str, Registry]:
    url, _ = services.create_database(admin_url, "crank_bench")
    engine = open_engine(url, pooled=False)
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace("bench", "Bench")
    registry.put_operations("bench", operations(tools, 1))
    registry.put_agent("bench", "desk", {"bindings": [{"operation": name} for name in sorted(operations(tools, 1))]})
    registry.publish("bench", "desk")
    return url, registry


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def report(cluster: Cluster) -> str:
    values = [latency * 1000 for latency in cluster.latencies]
    cells = [percentile(values, fraction) for fraction in (0.5, 0.9, 0.99)] + [max(values)]
    mode = "push (LISTEN/NOTIFY) + poll" if cluster.push else "poll only"
    return (
        f"| {mode} | {len(values)} | "
        + " | ".join(f"{cell:.1f}" for cell in cells)
        + f" | {statistics.mean(values):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--publishes", type=int, default=100, help="publishes per mode")
    parser.add_argument("--tools", type=int, default=20, help="tools of the published agent")
    parser.add_argument("--poll-interval", type=float, default=0.5)
    options = parser.parse_args()
    load = os.getloadavg()
    with postgres() as admin_url, tempfile.TemporaryDirectory(prefix="crank-publish-") as folder:
        clusters = []
        for name, push in (("push", True), ("poll", False)):
            url, registry = seeded_database(admin_url, options.tools)
            clusters.append(Cluster(name, push, url, registry))
        try:
            for cluster in clusters:
                cluster.start(options.replicas, options.poll_interval, Path(folder))
            with ThreadPoolExecutor(options.replicas) as pool:
                for _ in range(options.publishes):
                    for cluster in clusters:  # interleaved: drift in the machine's speed hits both alike
                        time.sleep(random.uniform(0, options.poll_interval))
                        cluster.publish_once(options.tools, pool)
        finally:
            for cluster in clusters:
                cluster.stop()
                cluster.registry.engine.dispose()
    print(f"{options.replicas} replicas, {options.tools} tools, poll interval {options.poll_interval:g} s, "
          f"{os.cpu_count()} cores, load average before the run {load[0]:.2f}")  # fmt: skip
    print("| mode | publishes | p50 ms | p90 ms | p99 ms | max ms | mean ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for cluster in clusters:
        print(report(cluster))


if __name__ == "__main__":
    main()
