"""In-process CPU cost of checking one answer against its tool's outputSchema (issue 11, item 3).

Runs `crank.mcp.calls.call_tool` on one tool whose invoker returns a typical answer at once (no network),
with and without an output schema, interleaved, and prints the median cost per call of each and their
difference: what per-call output validation adds to a gateway `tools/call`.

    .venv/bin/python -m bench.output_validation [--calls 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from crank.mcp.calls import call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.tools import CallContext, Tool
from crank.schema import wrap_output

# A typical answer: one record of a REST API (a GitHub-like issue, about 1.2 KB of JSON).
USER = {"login": "octocat", "id": 583231, "type": "User", "site_admin": False, "html_url": "https://github.com/octocat"}
ANSWER: dict[str, Any] = {
    "id": 1, "number": 1347, "state": "open", "title": "Found a bug", "body": "I'm having a problem with this.",
    "user": USER, "labels": [{"id": 208045946, "name": "bug", "color": "f29513", "default": True}] * 3,
    "assignees": [USER, USER], "comments": 12, "locked": False, "created_at": "2011-04-22T13:33:48Z",
    "updated_at": "2011-04-22T13:33:48Z", "closed_at": None, "url": "https://api.github.com/repos/o/r/issues/1347",
}  # fmt: skip
_USER_SCHEMA = {"type": "object", "properties": {"login": {"type": "string"}, "id": {"type": "integer"},
                "type": {"type": "string"}, "site_admin": {"type": "boolean"}, "html_url": {"type": "string"}},
                "required": ["login", "id"]}  # fmt: skip
_LABEL_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                 "color": {"type": "string"}, "default": {"type": "boolean"}}}  # fmt: skip
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "number": {"type": "integer"},
        "state": {"type": "string", "enum": ["open", "closed"]},
        "title": {"type": "string"},
        "body": {"type": ["string", "null"]},
        "user": _USER_SCHEMA,
        "labels": {"type": "array", "items": _LABEL_SCHEMA},
        "assignees": {"type": "array", "items": _USER_SCHEMA},
        "comments": {"type": "integer"},
        "locked": {"type": "boolean"},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string"},
        "closed_at": {"type": ["string", "null"]},
        "url": {"type": "string"},
    },
    "required": ["id", "number", "state", "title", "user"],
}


async def _answer(arguments: dict[str, Any], context: CallContext) -> Any:
    return ANSWER


def _catalog(checked: bool) -> Catalog:
    schema = wrap_output(SCHEMA) if checked else None
    return Catalog([Tool(name="get_issue", invoker=_answer, output_schema=schema, wrap_result=True)])


async def _run(catalog: Catalog, calls: int) -> float:
    entry = catalog.get("get_issue")
    assert entry is not None
    started = time.process_time()
    for _ in range(calls):
        result = await call_tool(entry, {}, CallContext("get_issue", "2025-11-25"), result_format="json")
    assert result["isError"] is False
    return (time.process_time() - started) / calls


async def main(args: argparse.Namespace) -> None:
    catalogs = {"without": _catalog(False), "with": _catalog(True)}
    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(args.rounds):  # interleaved, so drift in the machine's load hits both alike
        for name, catalog in catalogs.items():
            times[name].append(await _run(catalog, args.calls))
    without, checked = statistics.median(times["without"]), statistics.median(times["with"])
    print(f"call_tool without an output schema: {without * 1e6:.2f} us CPU per call")
    print(f"call_tool with output validation:   {checked * 1e6:.2f} us CPU per call")
    print(f"output validation adds:             {(checked - without) * 1e6:.2f} us per call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    asyncio.run(main(parser.parse_args()))
