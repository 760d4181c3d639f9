"""Import and compaction of a 1,000-operation document: `python -m bench.compact_import [--runs N]`.

The document is GitHub's official OpenAPI description (node_modules, `scripts/install --node`) cut to
its first 1,000 operations (components kept whole). Each run times, in process: the import
(`crank.admin.openapi.import_openapi`: validation and conversion to drafts) and the compaction of every
draft as a tool (`crank.schema.compact.compact_tool`, default settings). The issue's target: <= 5 s for
both. The median run is reported; the machine's load shows in the spread.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from crank.admin.documents import load_document
from crank.admin.openapi import import_openapi
from crank.schema.compact import compact_tool

GITHUB = Path(__file__).resolve().parent.parent / "node_modules/@octokit/openapi/generated/api.github.com.json"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def first_operations(document: dict[str, Any], count: int) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    taken = 0
    for path, item in document["paths"].items():
        kept = {key: value for key, value in item.items() if key not in METHODS}
        for method in METHODS:
            if method in item and taken < count:
                kept[method] = item[method]
                taken += 1
        if len(kept) > len([key for key in item if key not in METHODS]):
            paths[path] = kept
    return {**document, "paths": paths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--operations", type=int, default=1000)
    args = parser.parse_args()
    document = first_operations(load_document(str(GITHUB)), args.operations)
    rows = []
    for _ in range(args.runs):
        started = time.perf_counter()
        operations = import_openapi(document)
        imported = time.perf_counter()
        for operation in operations:
            spec = operation.spec
            compact_tool(spec.get("description"), spec.get("input_schema"), spec.get("output_schema"),
                         name=operation.name)  # fmt: skip
        done = time.perf_counter()
        rows.append((done - started, imported - started, done - imported))
        print(f"{len(operations)} operations: import {rows[-1][1]:.2f} s + compaction {rows[-1][2]:.2f} s "
              f"= {rows[-1][0]:.2f} s")  # fmt: skip
    total, imported, compacted = sorted(rows)[len(rows) // 2]
    print(
        f"median run: {total:.2f} s (import {imported:.2f} s, compaction {compacted:.2f} s; "
        f"all runs {', '.join(f'{row[0]:.2f}' for row in rows)} s)"
    )


if __name__ == "__main__":
    main()
