"""How long importing a newer version of a large real document takes (issue 11, item 5).

    .venv/bin/python -m bench.reimport [DOCUMENT]   # default: GitHub's, 1,223 operations, 13 MB

Imports the document into a fresh SQLite registry, binds ten operations into an agent and publishes
it, then times: an unchanged import, a dry run and a real import of a newer version (one bound operation
removed, a required parameter added to another, an optional one to a third), each the best
of three (`time.perf_counter`, the whole `reimport` call: reading the parsed document, validation,
conversion, the comparison and the registry transaction).
"""

from __future__ import annotations

import copy
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crank.admin.changes import reimport
from crank.admin.documents import load_document
from crank.registry import Registry, migrate, open_engine

DEFAULT = Path(__file__).resolve().parent.parent / "node_modules/@octokit/openapi/generated/api.github.com.json"


def newer(document: dict[str, Any], bound: list[tuple[str, str]]) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    (path0, method0), (path1, method1), (path2, method2) = bound[:3]
    del changed["paths"][path0][method0]
    param = {"name": "crank_bench", "in": "query", "required": True, "schema": {"type": "string"}}
    changed["paths"][path1][method1].setdefault("parameters", []).append(param)
    optional = {"name": "crank_bench_typed", "in": "query", "schema": {"type": "string"}}
    changed["paths"][path2][method2].setdefault("parameters", []).append(optional)
    return changed


def best(label: str, run: Callable[[], Any]) -> Any:
    times, result = [], None
    for _ in range(3):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    print(f"{label:<40} {min(times):6.2f} s")
    return result


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    document = load_document(str(source))
    with tempfile.TemporaryDirectory() as folder:
        engine = open_engine(f"sqlite:///{folder}/registry.sqlite3", pooled=False)
        migrate(engine)
        registry = Registry(engine)
        registry.put_workspace("bench", "Bench")
        start = time.perf_counter()
        first = reimport(registry, "bench", "openapi", document)
        print(f"{source.name}: {len(first.names)} operations; first import {time.perf_counter() - start:.2f} s")
        drafts = registry.operations("bench")
        names = [name for name in first.names if drafts[name]["source"]["method"] == "GET"][:10]
        registry.put_agent("bench", "desk", {"bindings": [{"operation": name} for name in names]})
        registry.publish("bench", "desk")
        places = [(drafts[n]["source"]["path"], drafts[n]["source"]["method"].lower()) for n in names]
        best("unchanged import", lambda: reimport(registry, "bench", "openapi", document))
        changed = newer(document, places)
        report = best("newer version, --dry-run", lambda: reimport(registry, "bench", "openapi", changed, dry_run=True))
        print("\n".join(f"  {line}" for line in report.lines()))
        start = time.perf_counter()
        reimport(registry, "bench", "openapi", changed)
        print(f"{'newer version, applied and republished':<40} {time.perf_counter() - start:6.2f} s")
        engine.dispose()


if __name__ == "__main__":
    main()
