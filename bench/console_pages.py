#!/usr/bin/env python3
"""Server time of each console page for a workspace of 1,000 operations and 50 agents (issue 23: under 100 ms).

Builds a SQLite registry in a temporary folder: 1,000 operations imported from GitHub's OpenAPI description
(node_modules/@octokit/openapi), 50 agents of 20 tools each, every agent published twice, and 20 API keys.
Then asks the console (in-process, over ASGI, signed in) for each page once (the first request, reported apart:
templates are compiled then) and `--rounds` times more, and prints the median and the slowest of those, from the
request to the last byte of the answer:

    .venv/bin/python bench/console_pages.py --rounds 20

No wrk here: a page is rendered once per operator click, so what counts is one page's own time, not throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

os.environ["CRANK_EGRESS_ALLOW"] = "127.0.0.1:9"  # the operations' target: nothing is called here
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crank.admin.actions import publish_agent  # noqa: E402
from crank.admin.changes import reimport  # noqa: E402
from crank.admin.console import Console  # noqa: E402
from crank.registry import Registry, migrate, open_engine  # noqa: E402

GITHUB = ROOT / "node_modules" / "@octokit" / "openapi" / "generated" / "api.github.com.json"
TOKEN = "bench-console-admin-token-0123456789"
OPERATIONS, AGENTS, TOOLS = 1000, 50, 20


def build(folder: Path) -> Registry:
    engine = open_engine(f"sqlite:///{folder / 'registry.db'}")
    migrate(engine)
    registry = Registry(engine)
    registry.create_workspace("github", "GitHub")
    started = time.perf_counter()
    reimport(registry, "github", "openapi", str(GITHUB), base_url="http://127.0.0.1:9")
    names = sorted(registry.operations("github"))
    for name in names[OPERATIONS:]:
        registry.delete_operation("github", name)
    names = names[:OPERATIONS]
    for index in range(AGENTS):
        chosen = names[index * TOOLS : (index + 1) * TOOLS]
        registry.put_agent("github", f"agent-{index:02d}", {"bindings": [{"operation": name} for name in chosen]})
        publish_agent(registry, "github", f"agent-{index:02d}")
        registry.put_agent("github", f"agent-{index:02d}", {"bindings": [{"operation": name} for name in chosen[1:]]})
        publish_agent(registry, "github", f"agent-{index:02d}")
    for _ in range(20):
        registry.create_api_key("github")
    print(f"registry: {len(names)} operations, {AGENTS} agents, built in {time.perf_counter() - started:.0f} s")
    return registry


async def measure(registry: Registry, rounds: int) -> None:
    transport = httpx.ASGITransport(app=Console(registry, token=TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        form = await client.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        signed = await client.post("/console/login", data={"csrf": csrf.group(1), "token": TOKEN})
        assert signed.status_code == 303
        agent = "/console/workspaces/github/agents/agent-25"
        tool = sorted(registry.operations("github"))[25 * TOOLS + 1]
        pages = {
            "workspaces": "/console/",
            "workspace (1,000 operations)": "/console/workspaces/github",
            "workspace, search": "/console/workspaces/github?q=repos",
            "agent (catalog, lint, versions)": agent,
            "agent, discovery mode": agent + "?mode=discovery",
            "versions compared": agent + "/diff?from=1&to=2",
            "try it (form)": f"{agent}/tools/{tool}",
            "API keys": "/console/workspaces/github/keys",
        }
        print(f"{'page':36} {'first ms':>9} {'median ms':>10} {'max ms':>8}")
        for name, path in pages.items():
            started = time.perf_counter()
            await client.get(path)  # the first: templates compiled, caches filled (reported apart)
            first = (time.perf_counter() - started) * 1000
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                answer = await client.get(path)
                times.append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
            print(f"{name:36} {first:9.1f} {statistics.median(times):10.1f} {max(times):8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(measure(build(Path(folder)), args.rounds))


if __name__ == "__main__":
    main()
