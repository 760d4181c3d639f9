"""How long `crank` commands take, start to exit (issue 40): the commands that only read the registry, and a few
that write, on a registry of the demo's size in a data folder of the run's own (SQLite).

    .venv/bin/python -m bench.cli_start [--runs 10] [--base DIR]

Each command runs once to warm the disk cache and write byte code, then `--runs` times; the run prints each
command's minimum and median wall time. With `--base DIR` (a `git worktree` of an older commit) the same commands
run with that tree's Crank, on a data folder of its own, in turn with this one's (A B A B ...), so that a machine
whose speed drifts affects both alike. It times whole processes from outside: Python's start, the imports, the
settings, the registry's connection and the command's own work.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "src" / "crank" / "demo" / "openapi.yaml"
SETUP = [
    ["workspace", "create", "shop"],
    ["import", "openapi", str(SPEC), "-w", "shop", "--base-url", "http://127.0.0.1:9/api"],
    ["agent", "bind", "shop", "desk", "search_books"],
    ["publish", "shop", "desk"],
    ["key", "create", "shop"],
]
READING = [
    ["--help"],
    ["workspace", "list"],
    ["operation", "list", "shop"],
    ["agent", "list", "shop"],
    ["agent", "show", "shop", "desk"],
    ["key", "list", "shop"],
    ["versions", "shop", "desk"],
    ["catalog", "shop"],
]
WRITING = [
    ["agent", "bind", "shop", "desk", "get_book"],
    ["publish", "shop", "desk"],
]


def environment(tree: Path, folder: Path) -> dict[str, str]:
    kept = {name: value for name, value in os.environ.items() if not name.startswith("CRANK_")}
    return {**kept, "PYTHONPATH": str(tree / "src"), "CRANK_DATA_DIR": str(folder),
            "CRANK_EGRESS_ALLOW": "127.0.0.1:9"}  # fmt: skip


def run(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "crank.cli", *command], env=env, capture_output=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"crank {' '.join(command)}: exit {done.returncode}\n{done.stderr.decode()[-1500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--base", type=Path, default=None, help="an older tree to time beside this one")
    args = parser.parse_args()
    trees = [("this", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as temporary:
        envs = {name: environment(tree, Path(temporary) / name) for name, tree in trees}
        for env in envs.values():
            for command in SETUP:
                run(command, env)
        print(f"{'command':<32}" + "".join(f"{name + ' min':>12}{name + ' median':>14}" for name, _ in trees))
        for command in READING + WRITING:
            times: dict[str, list[float]] = {name: [] for name, _ in trees}
            for name, _ in trees:
                run(command, envs[name])  # warm: byte code written, pages cached
            for _ in range(args.runs):
                for name, _ in trees:
                    times[name].append(run(command, envs[name]))
            row = "".join(f"{min(times[name]) * 1000:10.0f}ms{statistics.median(times[name]) * 1000:12.0f}ms"
                          for name, _ in trees)  # fmt: skip
            print(f"{'crank ' + ' '.join(command):<32}{row}", flush=True)


if __name__ == "__main__":
    main()
