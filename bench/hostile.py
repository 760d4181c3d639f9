#!/usr/bin/env python3
"""A bounded load run with a hostile tenant (issue 12): one Crank gateway, two workspaces, a loopback upstream.

    python bench/hostile.py                      # ~2 minutes: warm-up 10 s, alone 30 s, hostile 60 s, after 20 s
    python bench/hostile.py --tiny               # a few seconds, to check that it works (tests/test_bench_hostile.py)
    python bench/hostile.py --attack forged-tokens   # one of issue 36's attacks instead of the junk requests

`--attack` replaces the hostile tenant's junk load with one attack (`wrk/hostile_attack.lua`), the hostile
workspace trusting an issuer of its own (`bench/apps/issuer.py`) with lazy sign-in: `forged-tokens` (a new
made-up token each request, naming the issuer's ordinary key: each would cost a signature check), `costly-key`
(the same, naming its key of unbounded cost), `prompt` (its heaviest stored prompt, anonymously, with a 16 KiB
argument), `anonymous` (tools/list without credentials). What matters is the honest tenant's p50 and p99 under
the attack against alone; the attack's own answers may be 401, 429 or 503 (its spent budget), never another 5xx.

The gateway (`bench/apps/gateway_hostile.py`, `GatewayService` with API keys, as `crank serve` runs it) serves
the agents of workspaces `honest` and `hostile` on `--server-cpu`, with `crank serve`'s HTTP protocol (uvicorn's
httptools protocol with connection limits and the gateway's early answers, uvloop; `--server uvicorn`: plain
uvicorn, uvloop and httptools); nginx
(bench/upstream/nginx.conf, as in bench/run.py) answers their upstream calls; wrk drives the load from
`--client-cpu`, beside nginx. Phases, each one run of wrk per load:

1. warm-up: everything below at once (the memory reaches its working size);
2. alone: the honest tenant only, paced (`wrk/hostile_valid.lua`, `--honest-connections`, `--honest-pace-ms`);
3. hostile: the honest tenant as in 2, plus the hostile tenant's own valid calls (`hostile_valid.lua`) and its
   invalid and hostile requests (`wrk/hostile_junk.lua`: unknown tools, wrong types, bodies that are not
   JSON, unsupported versions, other tenants' agents with no key, a wrong key or its own, JSON 65 and 5,000
   levels deep, batches of 101 and of 100 calls or lists, a 1 MB argument);
4. after: the honest tenant alone again.

The gateway's RSS is read from /proc/PID/status every `--sample` seconds, its CPU time from /proc/PID/stat.
The run fails (exit 1) when a valid call failed (a non-2xx status, an error result, a socket error), when
a request got a 5xx, or when an answer leaked a traceback; it reports the honest tenant's p99 alone and under
the hostile load, and RSS at start, after the warm-up, at its peak and at the end. Needs only the standard
library; the gateway runs under `--python` (default: this interpreter) with this checkout's src/ first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.run import check_response, cpu_model, free_port, stop, upstream_server, wait_listening  # noqa: E402

HOST = "127.0.0.1"
APP = "bench.apps.gateway_hostile:app"
HONEST_PATH = "/mcp/v1/honest/agent"
HOSTILE_PATH = "/mcp/v1/hostile/agent"
PHASES = ("warm-up", "alone", "hostile", "after")
SERVERS = {"crank": "served as `crank serve` serves", "uvicorn": "under plain uvicorn"}
ATTACKS = ("junk", "forged-tokens", "costly-key", "prompt", "anonymous")
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_item", "arguments": {"id": 7}}}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default=sys.executable, help="interpreter of the gateway (default: this one)")
    p.add_argument("--warmup", type=int, default=10, help="seconds")
    p.add_argument("--alone", type=int, default=30, help="seconds of the honest tenant alone")
    p.add_argument("--hostile", type=int, default=60, help="seconds of the honest tenant beside the hostile one")
    p.add_argument("--after", type=int, default=20, help="seconds of the honest tenant alone, afterwards")
    p.add_argument("--honest-connections", type=int, default=4)
    p.add_argument("--honest-pace-ms", type=int, default=5, help="pause between a connection's requests")
    p.add_argument("--hostile-connections", type=int, default=4, help="for its valid calls")
    p.add_argument("--hostile-pace-ms", type=int, default=2)
    p.add_argument("--junk-connections", type=int, default=4, help="for its invalid and hostile requests")
    p.add_argument("--junk-pace-ms", type=int, default=2)
    p.add_argument(
        "--honest-limit",
        type=int,
        default=0,
        help="the honest workspace's plan: requests and tool calls per second (0: no limit)",
    )
    p.add_argument(
        "--hostile-limit",
        type=int,
        default=0,
        help="the hostile workspace's plan: requests and tool calls per second (0: no limit)",
    )
    p.add_argument(
        "--server",
        choices=SERVERS,
        default="crank",
        help="crank: as `crank serve` serves (its HTTP protocol, with early answers); uvicorn: plain uvicorn",
    )
    p.add_argument("--attack", choices=ATTACKS, default="junk", help="the hostile tenant's attack (default: junk)")
    p.add_argument("--src", type=Path, default=ROOT / "src", help="the Crank sources the gateway runs (another "
                   "checkout's src/, to measure it in the same harness)")  # fmt: skip
    p.add_argument("--sample", type=float, default=0.25, help="seconds between two RSS samples")
    p.add_argument("--server-cpu", default="0", help="taskset CPU list of the gateway")
    p.add_argument("--client-cpu", default="1", help="taskset CPU list of wrk and nginx")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "hostile", help="latest.md and latest.json")
    p.add_argument("--tiny", action="store_true", help="1-second phases, to check that the run works")
    args = p.parse_args()
    SOURCES[0] = args.src.resolve()
    if args.tiny:
        args.warmup = args.alone = args.hostile = args.after = 1
    return args


# -- the gateway and its memory -----------------------------------------------------------------------------


SOURCES = [ROOT / "src"]  # `--src`: the Crank the gateway runs


def gateway_env(extra: dict[str, str]) -> dict[str, str]:
    # This checkout's src/ first (or `--src`): the venv may have another checkout installed in editable mode.
    path = os.pathsep.join(filter(None, [str(SOURCES[0]), str(ROOT), os.environ.get("PYTHONPATH")]))
    # nginx listens on loopback, which the gateway's egress policy refuses unless the operator allows it.
    return {**os.environ, "PYTHONPATH": path, "CRANK_EGRESS_ALLOW": "127.0.0.0/8,::1", **extra}


def make_registry(python: str, upstream: str, directory: Path, limits: dict[str, int],
                  issuer: str = "") -> tuple[Path, dict[str, str]]:  # fmt: skip
    db = directory / "registry.sqlite3"
    env = gateway_env({"BENCH_UPSTREAM": upstream, "BENCH_LIMITS": json.dumps(limits), "BENCH_ISSUER": issuer})
    proc = subprocess.run([python, "-m", "bench.apps.gateway_hostile", str(db)], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"creating the registry failed: {proc.stderr.strip()[-2000:]}")
    return db, dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@contextlib.contextmanager
def gateway(args: argparse.Namespace, db: Path, upstream: str, log: Path) -> Iterator[tuple[str, int]]:
    """The gateway on the server CPU; yields its root URL and PID (taskset execs Python)."""
    port = free_port()
    cmd = ["taskset", "-c", args.server_cpu, args.python]
    if args.server == "crank":
        cmd += ["-m", "bench.apps.gateway_hostile", "--serve", HOST, str(port)]
    else:
        cmd += ["-m", "uvicorn", APP, "--host", HOST, "--port", str(port)]
        cmd += "--workers 1 --loop uvloop --http httptools --log-level warning --no-access-log".split()
    log.parent.mkdir(parents=True, exist_ok=True)
    env = gateway_env({"BENCH_GATEWAY_DB": str(db), "BENCH_UPSTREAM": upstream})
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_listening("gateway", proc, port, log)
        yield f"http://{HOST}:{port}", proc.pid
    finally:
        stop(proc)


@contextlib.contextmanager
def issuer_server(args: argparse.Namespace, log: Path) -> Iterator[str]:
    """The hostile tenant's own issuer (`bench/apps/issuer.py`) on the client CPU; yields its URL."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["taskset", "-c", args.client_cpu, args.python, "-m", "bench.apps.issuer", str(port)]
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=gateway_env({}), stdout=log_file, stderr=subprocess.STDOUT)
    try:
        wait_listening("issuer", proc, port, log)
        yield f"http://{HOST}:{port}"
    finally:
        stop(proc)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@dataclass
class Sampler:
    """Samples the gateway's RSS in a thread; `phase` tags each sample."""

    pid: int
    every: float
    phase: str = "start"
    samples: list[tuple[float, str, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(self.every):
            self.samples.append((time.monotonic() - started, self.phase, rss_kib(self.pid)))

    @contextlib.contextmanager
    def running(self) -> Iterator[Sampler]:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def peak(self, phase: str) -> int:
        return max((kib for _, tagged, kib in self.samples if tagged == phase), default=0)


# -- load -----------------------------------------------------------------------------------------------------


def wrk(args: argparse.Namespace, script: str, url: str, connections: int, seconds: int,
        env: dict[str, str]) -> subprocess.Popen[str]:  # fmt: skip
    cmd = ["taskset", "-c", args.client_cpu, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
           "-s", str(BENCH / "wrk" / script), url]  # fmt: skip
    return subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(name: str, proc: subprocess.Popen[str], seconds: int) -> dict[str, Any]:
    out, err = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0:
        raise SystemExit(f"wrk ({name}) failed ({proc.returncode}): {err.strip() or out.strip()}")
    return dict(json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{"))))


def phase(args: argparse.Namespace, root: str, keys: dict[str, str], loads: tuple[str, ...],
          seconds: int, issuer: str = "") -> dict[str, dict[str, Any]]:  # fmt: skip
    """Run the named loads at once for `seconds`: honest, hostile (its valid calls), junk (or `--attack`'s)."""
    valid = {"BENCH_COUNT": "1", "BENCH_ERA": "legacy"}
    specs = {
        "honest": ("hostile_valid.lua", root + HONEST_PATH, args.honest_connections,
                   {**valid, "BENCH_AUTH": keys["honest"], "BENCH_PACE_MS": str(args.honest_pace_ms)}),
        "hostile": ("hostile_valid.lua", root + HOSTILE_PATH, args.hostile_connections,
                    {**valid, "BENCH_AUTH": keys["hostile"], "BENCH_PACE_MS": str(args.hostile_pace_ms)}),
        "junk": ("hostile_junk.lua", root, args.junk_connections,
                 {"BENCH_HOSTILE_KEY": keys["hostile"], "BENCH_PACE_MS": str(args.junk_pace_ms)}),
    }  # fmt: skip
    if args.attack != "junk":  # the junk load's place: one attack
        specs["junk"] = ("hostile_attack.lua", root, args.junk_connections, {
            "BENCH_ATTACK": args.attack, "BENCH_PACE_MS": str(args.junk_pace_ms),
            "BENCH_TOKEN_PREFIX": token_prefix(issuer, "big" if args.attack == "costly-key" else "k1"),
            "BENCH_SIGNATURE_BYTES": "384" if args.attack == "costly-key" else "256",  # the key's modulus
        })  # fmt: skip
    running = {name: wrk(args, *specs[name][:3], seconds, specs[name][3]) for name in loads}
    return {name: result(name, proc, seconds) for name, proc in running.items()}


def token_prefix(issuer: str, kid: str) -> str:
    if not issuer:
        return ""
    from bench.apps.issuer import prefix  # Starlette: only where the attack runs

    return prefix(issuer, kid)


def failed_calls(name: str, stats: dict[str, Any]) -> int:
    """A valid load's failed calls: non-2xx, error results and socket errors (wrk's `status` errors are the
    non-2xx again), and for the honest tenant, calls refused by a limit."""
    socket_errors = sum(n for kind, n in stats["errors"].items() if kind != "status")
    refused = stats.get("limited", 0) if name == "honest" else 0
    return int(stats["non2xx"] + stats["body_errors"] + socket_errors + refused)


def failures(phase_name: str, results: dict[str, dict[str, Any]]) -> list[str]:
    """Every valid call that failed, any 5xx, any leak, any socket error of a valid load. The hostile tenant's
    valid calls that its own rate limit refused (429, or `rate_limited`) are answers, not failures; the honest
    tenant's would be."""
    found = []
    for name, stats in results.items():
        if name == "junk":  # (an attack's 503s, counted apart as s503, are its spent budget's answer)
            if stats["s5xx"] or stats["leaks"]:
                found.append(f"{phase_name}/junk: {stats['s5xx']} answers 5xx, {stats['leaks']} leaked a traceback")
        elif failed_calls(name, stats):
            found.append(f"{phase_name}/{name}: {stats['non2xx']} non-2xx, {stats['body_errors']} error results, "
                         f"{stats.get('limited', 0)} refused by a limit, wrk errors {stats['errors']} in "
                         f"{stats['requests']} calls")  # fmt: skip
    return found


def check_gateway(root: str, key: str, path: str) -> None:
    """One honest call, checked as bench/run.py checks the gateway's answer, before any load."""
    request = urllib.request.Request(root + path, data=json.dumps(CALL).encode(), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {key}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        body, status, ctype = response.read(), response.status, response.headers.get("content-type", "")
    problem = check_response("gateway_call", CALL, status, ctype, body)
    if problem is not None:
        raise SystemExit(f"the gateway does not answer a valid call correctly: {problem}")


# -- report ---------------------------------------------------------------------------------------------------


def ms(microseconds: float) -> str:
    return f"{microseconds / 1000:.2f}"


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def markdown(meta: dict[str, Any], runs: dict[str, dict[str, dict[str, Any]]], memory: dict[str, int],
             cpu: dict[str, float]) -> str:  # fmt: skip
    lines = [
        f"# Hostile tenant run ({meta['date']})", "",
        f"Crank {meta['crank']}, {meta['cpu']}; gateway ({SERVERS[meta['server']]}) on CPU {meta['server_cpu']}, "
        f"wrk and nginx on CPU "
        f"{meta['client_cpu']}. Honest tenant: {meta['honest']}; hostile tenant: {meta['hostile']}; its attack: "
        f"{meta['attack']}.", "",
        f"Plans (requests and tool calls per second per workspace): {meta['limits']}.", "",
        "| phase | load | requests | req/s | p50 ms | p99 ms | max ms | failed valid calls | refused by its limit | "
        "2xx / 4xx / 5xx | gateway CPU |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]  # fmt: skip
    for phase_name, results in runs.items():
        for name, s in results.items():
            failed = "–" if name == "junk" else str(failed_calls(name, s))
            classes = "–"
            if name == "junk":
                classes = f"{s['s2xx']:,} / {s['s4xx']:,} / {s['s5xx'] + s.get('s503', 0):,}"
            latency = f"{ms(s['p50_us'])} | {ms(s['p99_us'])} | {ms(s['max_us'])}"
            refused = "–" if name == "junk" else f"{s.get('limited', 0):,}"
            lines.append(f"| {phase_name} | {name} | {s['requests']:,} | {s['rps']:,.0f} | {latency} | {failed} | "
                         f"{refused} | {classes} | {cpu[phase_name]:.0%} |")  # fmt: skip
    alone, hostile = runs["alone"]["honest"]["p99_us"], runs["hostile"]["honest"]["p99_us"]
    lines += [
        "",
        f"Honest tenant's p99: {ms(alone)} ms alone, {ms(hostile)} ms beside the hostile tenant "
        f"({hostile / alone:.2f}×, target ≤ 2×), {ms(runs['after']['honest']['p99_us'])} ms afterwards.",
        f"Gateway RSS (MiB): {mib(memory['start'])} at start, {mib(memory['warm'])} after the warm-up, peak "
        f"{mib(memory['peak'])} (during the hostile phase {mib(memory['hostile_peak'])}), {mib(memory['end'])} "
        "at the end.",
    ]
    return "\n".join(lines) + "\n"


def crank_version() -> str:
    checkout = SOURCES[0].parent
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=checkout, capture_output=True, text=True)
    return (head.stdout.strip() or "src/") + (" with uncommitted changes" if dirty.stdout.strip() else "")


def main() -> int:
    args = parse_args()
    seconds = {"warm-up": args.warmup, "alone": args.alone, "hostile": args.hostile, "after": args.after}
    loads = {"warm-up": ("honest", "hostile", "junk"), "alone": ("honest",), "hostile": ("honest", "hostile", "junk"),
             "after": ("honest",)}  # fmt: skip
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    cpu: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        upstream = stack.enter_context(upstream_server(args.client_cpu, args.out / "logs" / "nginx.log"))
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-hostile-")))
        limits = {name: n for name, n in (("honest", args.honest_limit), ("hostile", args.hostile_limit)) if n}
        issuer = ""
        if args.attack != "junk":
            issuer = stack.enter_context(issuer_server(args, args.out / "logs" / "issuer.log"))
        db, keys = make_registry(args.python, upstream.url, directory, limits, issuer)
        root, pid = stack.enter_context(gateway(args, db, upstream.url, args.out / "logs" / "gateway.log"))
        check_gateway(root, keys["honest"], HONEST_PATH)
        sampler = stack.enter_context(Sampler(pid, args.sample).running())
        start = warm = rss_kib(pid)
        for name in PHASES:
            sampler.phase = name
            before = cpu_seconds(pid)
            runs[name] = phase(args, root, keys, loads[name], seconds[name], issuer)
            cpu[name] = (cpu_seconds(pid) - before) / seconds[name]
            print(f"{name}: " + ", ".join(f"{load} {s['requests']} requests, p99 {ms(s['p99_us'])} ms"
                                          for load, s in runs[name].items()), file=sys.stderr)  # fmt: skip
            if name == "warm-up":
                warm = rss_kib(pid)
        time.sleep(1)  # the last calls' buffers are freed
        end = rss_kib(pid)
        check_gateway(root, keys["honest"], HONEST_PATH)
    everywhere = max(kib for _, _, kib in sampler.samples) if sampler.samples else end
    memory = {"start": start, "warm": warm, "peak": max(everywhere, end), "hostile_peak": sampler.peak("hostile"),
              "end": end}  # fmt: skip
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "crank": crank_version(), "cpu": cpu_model(),
        "server_cpu": args.server_cpu, "client_cpu": args.client_cpu, "seconds": seconds, "server": args.server,
        "limits": ", ".join(f"{name} {n}/s" for name, n in limits.items()) or "none",
        "honest": f"{args.honest_connections} connections, {args.honest_pace_ms} ms between a connection's calls",
        "attack": args.attack,
        "hostile": f"valid calls on {args.hostile_connections} connections paced {args.hostile_pace_ms} ms, "
                   f"junk on {args.junk_connections} connections paced {args.junk_pace_ms} ms",
    }  # fmt: skip
    report = markdown(meta, runs, memory, cpu)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(report)
    raw = {"meta": meta, "runs": runs, "memory_kib": memory, "cpu": cpu, "rss_samples": sampler.samples}
    (args.out / "latest.json").write_text(json.dumps(raw, indent=1) + "\n")
    found = [problem for name in PHASES for problem in failures(name, runs[name])]
    for problem in found:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
