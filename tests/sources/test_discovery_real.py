"""Discovery mode on large real API descriptions (tests/realapis.py): GitHub's 1,223 operations as one agent,
the search answer's size, and recall@5 on the task set in discovery_tasks.json (GitHub, Stripe, Mailchimp),
all through the served pipeline: import -> runtime view -> `build_catalog` -> the search tool's call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crank import _json
from crank.admin.actions import imported_specs
from crank.admin.documents import load_document
from crank.mcp.calls import call_tool
from crank.mcp.catalog import Catalog
from crank.mcp.tools import CallContext
from crank.registry.runtime import AgentInfo, RuntimeView, WorkspaceInfo, tool_from_spec
from crank.sources.agents import build_catalog
from crank.sources.discovery import SEARCH_TOOL
from tests import realapis

pytestmark = pytest.mark.anyio

TASKS = json.loads((Path(__file__).parent / "discovery_tasks.json").read_text())
DOCUMENTS = {
    "github": (realapis.GITHUB, None),
    # Stripe's POST operations send form bodies, which the importer refuses; the rest import.
    "stripe": (realapis.STRIPE, ["!post_*"]),
    "mailchimp": (realapis.MAILCHIMP, None),
}


def discovery_runtime(api: str) -> RuntimeView:
    path, include = DOCUMENTS[api]
    specs = imported_specs("openapi", load_document(str(path)), include=include).specs
    tools = tuple(
        tool_from_spec({**spec, "tool_name": name, "tool_description": spec.get("description")})
        for name, spec in specs.items()
    )
    agent = AgentInfo(id=api, slug=api, description=f"{api}'s API", mode="discovery")
    return RuntimeView(workspace=WorkspaceInfo(id="w", slug="apis"), agent=agent, tools=tools)


@pytest.fixture(scope="module")
def catalogs() -> dict[str, tuple[RuntimeView, Catalog]]:
    built = {}
    for api in DOCUMENTS:
        runtime = discovery_runtime(api)
        built[api] = (runtime, build_catalog(runtime))
    return built


async def search(catalog: Catalog, query: str, limit: int = 5) -> dict[str, Any]:
    entry = catalog.get(SEARCH_TOOL)
    assert entry is not None
    context = CallContext(SEARCH_TOOL, "2025-11-25")
    return await call_tool(entry, {"query": query, "limit": limit}, context, result_format="json")


async def test_githubs_whole_api_is_one_agent_whose_tools_list_fits(catalogs: dict[str, Any]) -> None:
    runtime, catalog = catalogs["github"]
    assert len(runtime.tools) >= 1_000
    assert len(catalog) == 3 and catalog.token_estimate <= 1_000
    answer = await search(catalog, "list the open pull requests of a repository")
    found = answer["structuredContent"]["operations"]
    assert len(found) == 5 and all(set(op) == {"name", "summary"} for op in found)
    assert len(_json.dumps(answer)) / 3 <= 600  # the whole result: the text and the structured content


async def test_recall_at_5_on_the_task_set(catalogs: dict[str, Any]) -> None:
    def hits(tasks: list[dict[str, str]]) -> list[bool]:
        return [task["operation"] in names[task["task"]] for task in tasks]

    names: dict[str, list[str]] = {}
    for task in TASKS["tasks"] + TASKS["held_out"]:
        answer = await search(catalogs[task["api"]][1], task["task"])
        names[task["task"]] = [op["name"] for op in answer["structuredContent"]["operations"]]
    tasks, held_out = hits(TASKS["tasks"]), hits(TASKS["held_out"])
    assert len(tasks) >= 40 and {task["api"] for task in TASKS["tasks"]} >= {"github", "stripe"}
    recall = sum(tasks + held_out) / len(tasks + held_out)
    print(f"recall@5: {sum(tasks)}/{len(tasks)} tasks, {sum(held_out)}/{len(held_out)} held out, {recall:.3f} in all")
    assert recall >= 0.9
