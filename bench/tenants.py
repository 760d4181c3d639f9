"""Many tenants on one replica (issue 39): memory, start, a cold and a warm `tools/list`, and publish -> served.

    .venv/bin/python -m bench.tenants [--tenants 100,1000] [--tools 20] [--publishes 5] [--base DIR]
        [--databases sqlite,postgresql] [--seeders 2] [--base-tenants 100,1000]

For each N and database: a registry of N workspaces, each with one agent of `--tools` tools taken from GitHub's
API description (the first operations the importer reads of it, the same for every tenant) and one API key,
written by `--seeders` processes side by side (a PostgreSQL registry is a database of a cluster the run starts on
a free port). Then `crank serve --role mcp` (one worker) starts on it, and the run measures:

- the time from the process's start until `/readyz` answers 200, and its RSS then;
- one tenant's first `tools/list` (a cold agent, where agents are built when asked for), and the median of the
  next 20 (warm);
- publish -> served: each of `--publishes` rounds publishes a new version of one tenant's agent (one the replica
  has served, so it holds it), from a process of its own as `crank publish` does, which announces it (PostgreSQL
  NOTIFY, or over a Redis of the run's own for SQLite, `CRANK_REDIS_URL`); the clock starts when that process has
  committed, and stops when the replica lists the new description (p50, p99 and max);
- its RSS after the publishes.

With `--base DIR` (a `git worktree` of an older commit), the same is measured for that tree's Crank, each on a
registry its own code made (an older Crank cannot read a newer registry's migrations), one after the other, for
the sizes of `--base-tenants` (default: all of them; a design that holds every tenant may not fit the largest).
It measures latency, not throughput: other work on the machine adds to it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from tests.services import fresh_database, start_postgres, start_redis

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
START_TIMEOUT = 600.0
SERVED_TIMEOUT = 60.0
WARM_LISTS = 20  # a warm tools/list: the median of this many
GITHUB = ROOT / "node_modules" / "@octokit" / "openapi" / "generated" / "api.github.com.json"


def github_operations(tools: int) -> dict[str, Any]:
    """The first `tools` operations of GitHub's description, as drafts (imported by this tree's Crank)."""
    from crank.admin import load_document
    from crank.admin.openapi import import_openapi

    imported = import_openapi(load_document(str(GITHUB)), base_url="https://api.github.com")
    return {operation.name: operation.spec for operation in imported[:tools]}


MIGRATE = """
import sys
from crank.registry import migrate, open_engine
migrate(open_engine(sys.argv[1], pooled=False))
print("migrated")
"""

SEED = """
import json, sys
from crank.registry import Registry, open_engine
url, first, end, operations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(open(sys.argv[4]).read())
registry = Registry(open_engine(url))  # pooled: a connection per call would cost a PostgreSQL backend each
keys = {}
for index in range(first, end):
    slug = f"t{index:05}"
    registry.put_workspace(slug, slug)
    registry.put_operations(slug, operations)
    registry.put_agent(slug, "desk", {"bindings": [{"operation": name} for name in operations]})
    registry.publish(slug, "desk")
    keys[slug] = registry.create_api_key(slug)
print(json.dumps(keys))
"""

PUBLISH = """
import json, sys, time
from crank.registry import Registry, open_engine
from crank.registry.changes import change_announcer
url, redis, slug, name, text = sys.argv[1:6]
registry = Registry(open_engine(url, pooled=False), announce=change_announcer(url, redis or None))
spec = registry.operation(slug, name)
registry.put_operation(slug, name, {**spec, "description": text})
registry.publish(slug, "desk")
print(time.time())
"""


def python_of(tree: Path) -> dict[str, str]:
    """The environment that runs `tree`'s Crank with this interpreter."""
    path = os.pathsep.join([str(tree / "src"), str(tree)])
    return {**{key: value for key, value in os.environ.items() if not key.startswith("CRANK_")}, "PYTHONPATH": path}


def run_python(tree: Path, code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], env=python_of(tree), capture_output=True, text=True,
                          check=False, timeout=3600)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def rss_mb(pid: int) -> float:
    """The resident memory of the process and its children, in MB."""
    total = 0
    for task in [pid, *children(pid)]:
        try:
            status = Path(f"/proc/{task}/status").read_text()
        except FileNotFoundError:
            continue
        total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        found = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []
    return found + [grandchild for child in found for grandchild in children(child)]


def tools_list(client: httpx.Client, slug: str, key: str) -> tuple[float, str]:
    """Seconds one `tools/list` of the tenant's agent took, and its first tool's description."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    started = time.perf_counter()
    answer = client.post(f"/mcp/v1/{slug}/desk", json=body, headers=headers)
    took = time.perf_counter() - started
    if answer.status_code != 200:
        raise SystemExit(f"tools/list of {slug}: {answer.status_code} {answer.text[:300]}")
    tools = answer.json()["result"]["tools"]
    return took, min(tools, key=lambda tool: tool["name"])["description"]


def seed(tree: Path, url: str, tenants: int, seeders: int, operations_file: Path) -> dict[str, str]:
    """The registry's tenants, written by `seeders` processes side by side; their keys by workspace."""
    run_python(tree, MIGRATE, url)
    bounds = [tenants * part // seeders for part in range(seeders + 1)]
    keys: dict[str, str] = {}
    with ThreadPoolExecutor(seeders) as pool:
        parts = pool.map(lambda part: run_python(tree, SEED, url, str(bounds[part]), str(bounds[part + 1]),
                                                 str(operations_file)), range(seeders))  # fmt: skip
        for part in parts:
            keys.update(json.loads(part))
    return keys


def measure(tree: Path, name: str, tenants: int, publishes: int, operations_file: Path, folder: Path,
            redis: str, database: str, seeders: int) -> None:  # fmt: skip
    folder.mkdir(parents=True)
    url = f"sqlite:///{folder / f'{name}.sqlite3'}" if database == "sqlite" else database
    seeded = time.perf_counter()
    keys = seed(tree, url, tenants, seeders, operations_file)
    seeded = time.perf_counter() - seeded
    print(f"{name} {tenants} tenants seeded in {seeded:.0f} s; measuring", file=sys.stderr, flush=True)
    port = free_port()
    env = {**python_of(tree), "CRANK_DATABASE_URL": url, "CRANK_ROLE": "mcp", "CRANK_LISTEN": f"{HOST}:{port}",
           "CRANK_DATA_DIR": str(folder / f"{name}-data"), "CRANK_LOG_LEVEL": "error"}  # fmt: skip
    if url.startswith("sqlite"):  # a SQLite registry announces its changes over Redis; PostgreSQL by NOTIFY
        env["CRANK_REDIS_URL"] = redis
    log = (folder / f"{name}.log").open("wb")
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "crank.cli", "serve"], env=env, cwd=folder, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        client = httpx.Client(base_url=f"http://{HOST}:{port}", timeout=SERVED_TIMEOUT)
        wait_ready(client, server)
        ready, rss_ready = time.perf_counter() - started, rss_mb(server.pid)
        operation = min(json.loads(operations_file.read_text()))
        cold, _ = tools_list(client, "t00001", keys["t00001"])
        warm = statistics.median(tools_list(client, "t00001", keys["t00001"])[0] for _ in range(WARM_LISTS))
        announce = redis if url.startswith("sqlite") else ""
        latencies = [publish_served(tree, client, url, announce, keys, operation, round_, tenants)
                     for round_ in range(publishes)]  # fmt: skip
        p99 = statistics.quantiles(latencies, n=100, method="inclusive")[98] if len(latencies) > 1 else latencies[0]
        kind = "sqlite" if url.startswith("sqlite") else "postgresql"
        print(f"{name:>5} {kind:>10} {tenants:>6} tenants: seeded in {seeded:6.1f} s; ready in "
              f"{ready:6.2f} s, RSS {rss_ready:7.0f} MB; tools/list cold {cold * 1000:7.1f} ms, warm "
              f"{warm * 1000:6.1f} ms; publish -> served p50 {statistics.median(latencies) * 1000:5.0f} ms, p99 "
              f"{p99 * 1000:5.0f} ms, max {max(latencies) * 1000:5.0f} ms; RSS then {rss_mb(server.pid):7.0f} MB",
              flush=True)  # fmt: skip
        client.close()
    finally:
        server.terminate()
        server.wait(30)


def publish_served(tree: Path, client: httpx.Client, url: str, redis: str, keys: dict[str, str], operation: str,
                   round_: int, tenants: int) -> float:  # fmt: skip
    """Publish a new description of one tenant's first tool; seconds from the commit until the replica lists it."""
    slug = f"t{(round_ * 7 + 2) % tenants:05}"
    tools_list(client, slug, keys[slug])  # served once: held where agents are built when asked for
    text = f"round {round_} at {time.time()}"
    committed: list[float] = []
    thread = threading.Thread(target=lambda: committed.append(float(run_python(tree, PUBLISH, url, redis, slug,
                                                                                    operation, text))))  # fmt: skip
    thread.start()
    deadline = time.time() + SERVED_TIMEOUT
    while True:
        _, description = tools_list(client, slug, keys[slug])
        if description.startswith(text):
            served = time.time()
            break
        if time.time() > deadline:
            raise SystemExit(f"{slug}: the publish was not served within {SERVED_TIMEOUT:g} s")
        time.sleep(0.002)
    thread.join()
    return served - committed[0]


def wait_ready(client: httpx.Client, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"crank serve exited with {server.returncode}")
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"crank serve was not ready within {START_TIMEOUT:g} s")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="100,1000")
    parser.add_argument("--tools", type=int, default=20)
    parser.add_argument("--publishes", type=int, default=5)
    parser.add_argument("--base", type=Path, default=None, help="an older tree to measure beside this one")
    parser.add_argument("--base-tenants", default=None, help="the sizes the older tree is measured at (default: all)")
    parser.add_argument("--databases", default="sqlite", help="sqlite, postgresql, or both (comma-separated)")
    parser.add_argument("--seeders", type=int, default=2, help="processes that write the tenants side by side")
    args = parser.parse_args()
    databases = args.databases.split(",")
    redis = start_redis()  # of its own, on a free port: a SQLite registry's publishes are announced over it
    postgres = start_postgres() if "postgresql" in databases else None  # a cluster of its own, on a free port
    try:
        run(args, redis.url, postgres.url if postgres is not None else None)
    finally:
        redis.stop()
        if postgres is not None:
            postgres.destroy()


def run(args: argparse.Namespace, redis: str, postgres: str | None) -> None:
    sizes = [int(part) for part in args.tenants.split(",")]
    base_sizes = [int(part) for part in args.base_tenants.split(",")] if args.base_tenants else sizes
    with tempfile.TemporaryDirectory(prefix="bench-tenants-") as temporary:
        folder = Path(temporary)
        operations_file = folder / "operations.json"
        operations_file.write_text(json.dumps(github_operations(args.tools)))
        trees = [("this", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
        for database in args.databases.split(","):
            for tenants in sizes:
                for name, tree in trees:
                    if name == "base" and tenants not in base_sizes:
                        continue
                    run_one(args, tree, name, tenants, database, folder, operations_file, redis, postgres)


def run_one(args: argparse.Namespace, tree: Path, name: str, tenants: int, database: str, folder: Path,
            operations_file: Path, redis: str, postgres: str | None) -> None:  # fmt: skip
    """One tree at one size on one database (a PostgreSQL database of its own, dropped after)."""
    where = folder / f"{name}-{database}-{tenants}"
    if database == "sqlite":
        measure(tree, name, tenants, args.publishes, operations_file, where, redis, "sqlite", args.seeders)
        return
    if postgres is None:
        raise SystemExit(f"unknown database {database!r}: sqlite or postgresql")
    with fresh_database(postgres, "bench_tenants") as (url, _):
        measure(tree, name, tenants, args.publishes, operations_file, where, redis, url, args.seeders)


if __name__ == "__main__":
    main()
