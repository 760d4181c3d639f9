"""Discovery mode, measured in-process (docs/benchmarks.md, "Discovery").

    .venv/bin/python -m bench.discovery [--rounds 2000] [--calls 3000]

1. GitHub's whole API (tests/realapis.py) as one discovery agent: build time, `tools/list` tokens.
2. Search latency (p50/p99 over the task set's queries, after the heap is frozen as the server does) and
   answer tokens for 5 results, through the search tool's `call_tool`.
3. The index engines on the same documents and queries: SQLite FTS5 BM25 (plain, and Crank's ordering by
   coverage) against `bm25s` (`pip install bm25s`; skipped when absent), recall@5 and latency.
4. `tools/call` through discovery against the same operation as a direct tool: CPU of this process per call,
   interleaved blocks, against tests/gateway/upstream.py served by uvicorn in a subprocess (its CPU is not
   counted).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.sources.test_discovery_real import DOCUMENTS, TASKS, discovery_runtime

from crank import _json
from crank.mcp.calls import call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.tools import CallContext
from crank.registry.runtime import AgentInfo, RuntimeView, WorkspaceInfo, tool_from_spec
from crank.sources.agents import build_catalog
from crank.sources.discovery import CALL_TOOL, SEARCH_TOOL, Discovery
from crank.sources.search import _canonical, _columns, _terms, words_of

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def discovery_of(catalog: Catalog) -> Discovery:
    entry = catalog.get(SEARCH_TOOL)
    assert entry is not None
    return entry.tool.invoker.__self__  # type: ignore[attr-defined,no-any-return]


async def search_answers(
    catalog: Catalog, queries: list[str], rounds: int
) -> tuple[list[float], list[float], list[int]]:
    """Wall and CPU seconds of each search tool call (CPU: what the call costs without the machine's other
    load; the wall clock's tail on a shared machine is mostly waiting for a core), and answer tokens."""
    entry = catalog.get(SEARCH_TOOL)
    assert entry is not None
    seconds, cpu, tokens = [], [], []
    for index in range(rounds):
        query = queries[index % len(queries)]
        context = CallContext(SEARCH_TOOL, "2025-11-25")
        started, started_cpu = time.perf_counter(), time.thread_time()
        answer = await call_tool(entry, {"query": query}, context, result_format="json")
        seconds.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
        if index < len(queries):
            tokens.append(-(-len(_json.dumps(answer)) // 3))
    return seconds, cpu, tokens


def engines(discoveries: dict[str, Discovery]) -> list[tuple[str, float, float, float]]:
    """(engine, recall@5, p50 ms, p99 ms) over every task."""
    tasks = TASKS["tasks"] + TASKS["held_out"]
    rows = []

    def measure(name: str, search: Any) -> None:
        hits, seconds = 0, []
        for _ in range(5):
            for task in tasks:
                started = time.perf_counter()
                found = search(task["api"], task["task"])
                seconds.append(time.perf_counter() - started)
                hits += task["operation"] in found
        rows.append((name, hits / (5 * len(tasks)), percentile(seconds, 0.5) * 1e3, percentile(seconds, 0.99) * 1e3))

    def fts5_plain(api: str, query: str) -> list[str]:
        index = discoveries[api].index
        expression = " OR ".join(f'"{term}"' for term in _terms(words_of(query)))
        rows = index._db.execute(index._query, (expression, 5)).fetchall()
        return [index.operations[row[0]].name for row in rows]

    measure("SQLite FTS5 bm25(), column weights", fts5_plain)
    measure(
        "SQLite FTS5 bm25() + coverage order (Crank)",
        lambda api, q: [op.name for op in discoveries[api].index.search(q)],
    )
    try:
        import bm25s
    except ImportError:
        print("bm25s not installed: pip install bm25s to compare it", file=sys.stderr)
        return rows
    retrievers = {}
    for api, discovery in discoveries.items():
        corpus = [" ".join(_columns(op)).split() for op in discovery.index.operations]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenization.Tokenized(*_vocabulary(corpus)), show_progress=False)
        retrievers[api] = (retriever, discovery, _vocabulary(corpus)[1])

    def with_bm25s(api: str, query: str) -> list[str]:
        retriever, discovery, vocabulary = retrievers[api]
        ids = [vocabulary[word] for word in _canonical(" ".join(_terms(words_of(query)))).split() if word in vocabulary]
        if not ids:
            return []
        found, _ = retriever.retrieve(bm25s.tokenization.Tokenized([ids], vocabulary), k=5, show_progress=False)
        return [discovery.index.operations[int(row)].name for row in found[0]]

    measure("bm25s 0.3 (BM25 over the same words, no stemmer)", with_bm25s)
    return rows


def _vocabulary(corpus: list[list[str]]) -> tuple[list[list[int]], dict[str, int]]:
    vocabulary: dict[str, int] = {}
    ids = [[vocabulary.setdefault(word, len(vocabulary)) for word in document] for document in corpus]
    return ids, vocabulary


async def calls(count: int) -> tuple[float, float]:
    """CPU microseconds per call, direct and through discovery, of the same operation on a loopback upstream."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "uvicorn", "tests.gateway.upstream:app", "--port", str(port),
               "--log-level", "warning", "--no-access-log"]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        spec = {"protocol": "http", "target": {"method": "GET", "url": f"http://127.0.0.1:{port}/users/{{id}}"},
                "tool_name": "get_user", "tool_description": "One user.",
                "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
                "output_mapping": {"select": "{id: id, name: name}"}}  # fmt: skip
        tool = tool_from_spec(spec)
        catalogs = {
            mode: build_catalog(
                RuntimeView(
                    workspace=WorkspaceInfo(id="w", slug="w"),
                    agent=AgentInfo(id="a", slug="a", mode=mode),
                    tools=(tool,),
                )
            )  # fmt: skip
            for mode in ("direct", "discovery")
        }
        direct, discovery = catalogs["direct"].get("get_user"), catalogs["discovery"].get(CALL_TOOL)
        assert direct is not None and discovery is not None
        cpu: dict[str, list[float]] = {"direct": [], "discovery": []}
        pairs = [("direct", direct, {"id": 3}), ("discovery", discovery, {"name": "get_user", "arguments": {"id": 3}})]
        for block in range(count // 100):
            for mode, entry, arguments in reversed(pairs) if block % 2 else pairs:  # interleaved, each order half
                started = time.process_time()
                for _ in range(100):
                    context = CallContext(entry.tool.name, "2025-11-25")
                    result = await call_tool(entry, arguments, context, result_format="json")
                    assert not result["isError"], result
                cpu[mode].append((time.process_time() - started) / 100 * 1e6)
        return statistics.median(cpu["direct"]), statistics.median(cpu["discovery"])
    finally:
        server.terminate()
        server.wait()


async def main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    runtimes = {api: discovery_runtime(api) for api in DOCUMENTS}
    imported = time.perf_counter() - started
    catalogs: dict[str, Catalog] = {}
    for api, runtime in runtimes.items():
        started = time.perf_counter()
        catalogs[api] = build_catalog(runtime)
        print(f"{api}: {len(runtime.tools)} operations, built in {time.perf_counter() - started:.2f} s, "
              f"tools/list {catalogs[api].token_estimate} tokens")  # fmt: skip
    print(f"imported the three documents in {imported:.1f} s")
    gc.collect()
    gc.freeze()  # as AgentSource does after a reload
    queries = [task["task"] for task in TASKS["tasks"] + TASKS["held_out"] if task["api"] == "github"]
    seconds, cpu, tokens = await search_answers(catalogs["github"], queries, args.rounds)
    wall = f"p50 {percentile(seconds, 0.5) * 1e3:.2f} ms, p99 {percentile(seconds, 0.99) * 1e3:.2f} ms"
    own = f"p50 {percentile(cpu, 0.5) * 1e3:.2f} ms, p99 {percentile(cpu, 0.99) * 1e3:.2f} ms"
    print(f"github search tool call over {len(seconds)} calls: wall {wall}; CPU {own}")
    print(f"answer tokens for 5 results: median {statistics.median(tokens)}, max {max(tokens)}")
    for name, recall, p50, p99 in engines({api: discovery_of(catalog) for api, catalog in catalogs.items()}):
        print(f"{name}: recall@5 {recall:.3f}, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    direct, discovery = await calls(args.calls)
    print(f"tools/call CPU per call: direct {direct:.0f} us, through discovery {discovery:.0f} us "
          f"({discovery / direct:.2f}x)")  # fmt: skip
    print(json.dumps({"python": sys.version.split()[0]}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=3000)
    asyncio.run(main(parser.parse_args()))
