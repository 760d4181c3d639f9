"""Every code block of README.md and docs/*.md runs, each kind its own way.

- ```` ```python ````: a page's blocks run in order in one namespace (a later block may use what an
  earlier one defined), in an empty working directory.
- ```` ```sh ```` (`bash`, `shell`): a page's blocks run in order, each in `bash -euo pipefail`, in one
  temporary folder, against a demo gateway the test starts (`crank.demo.build_demo`, served on a free
  port, its data folder the documented `~/.local/share/crank-demo` under a temporary `HOME`). What the
  test substitutes, so that a block runs as written:
  - `http://127.0.0.1:8000` is the started demo's address; `$KEY` its API key; the CLI's registry
    (`CRANK_DATA_DIR`) the demo's; `CRANK_DEMO_API` the demo REST API (so `crank apply` of the demo
    catalog changes nothing); `crank` is the virtualenv's, and `examples.*` is importable;
  - `curl` fails on an HTTP error status (`--fail-with-body`), and no output may hold `"isError":true`;
  - `make X` runs in the repository (`make -C ROOT X`);
  - files a block names are there: `openapi.yaml` (the demo's OpenAPI document), `catalog.yaml` (the
    demo's catalog) and `service.openrpc.json` (tests/admin/specs/catalog.openrpc.json);
  - a command that starts a server (`make run`, `crank demo`, `crank serve`) runs alone, on a free port
    (`make run LISTEN=...`, `crank demo --listen ...`, `CRANK_LISTEN` for `crank serve`), with a home
    folder of its own; it must answer HTTP and print its banner (the demo's MCP endpoint, or the
    gateway's URLs on `http://HOST:PORT/`; an ASGI app prints none), then it is stopped.
- ```` ```json ````, ```` ```yaml ````, ```` ```toml ````: parsed; the ones that are Crank's own files
  are loaded by Crank: a client configuration (`mcpServers`) is checked against what `crank demo`
  prints, a structured error against `ToolError.to_payload`, a catalog file is applied to a fresh
  registry (`crank apply`'s loader), an `execution_config` is read by `tool_from_spec`, settings
  (keys of `crank.settings.Settings`) are read by `load_settings`.
- ```` ```text ````: prose in a fence (a diagram, a file tree): nothing to run.

A block that cannot run is fenced as ```` ```KIND notest (the reason) ````. A block of another kind, or a
`notest` without a reason, fails `test_every_block_runs_or_says_why_not`.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crank.admin.apply import apply_catalog, load_catalog_file
from crank.cli import main
from crank.demo import CATALOG, DemoServer, build_demo
from crank.exceptions import ExternalServiceError, ToolError
from crank.gateway.egress import LOOPBACK, EgressPolicy
from crank.registry import Registry, migrate, open_engine, tool_from_spec
from crank.settings import Settings, load_settings
from mcp import Client
from tests.services import free_port

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(?!`)([^\n]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SHELL = frozenset({"sh", "bash", "shell"})
DATA = frozenset({"json", "yaml", "yml", "toml"})
KINDS = frozenset({"python", "text"}) | SHELL | DATA
FILES = {
    "openapi.yaml": CATALOG.parent / "openapi.yaml",
    "catalog.yaml": CATALOG,
    "service.openrpc.json": ROOT / "tests" / "admin" / "specs" / "catalog.openrpc.json",
}
_SERVER = re.compile(r"^(make run|crank demo|crank serve)\b")
_DEMO_ADDRESS = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    kind: str
    notest: str | None
    """None: the block runs; else the reason it does not ("" when none is given)."""
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.kind or 'no kind'})"


def all_blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        kind, _, rest = match[1].strip().partition(" ")
        words = rest.strip()
        notest = words.removeprefix("notest").strip(" :—-") if words.startswith("notest") else None
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, kind, notest, match[2]))
    return found


def runnable(page: Path, kinds: frozenset[str]) -> list[Block]:
    return [block for block in all_blocks(page) if block.kind in kinds and block.notest is None]


def page_ids(pages: list[Path]) -> list[str]:
    return [page.relative_to(ROOT).as_posix() for page in pages]


def test_every_block_runs_or_says_why_not() -> None:
    problems = []
    for page in PAGES:
        for block in all_blocks(page):
            if block.notest == "":
                problems.append(f"{block}: notest without a reason")
            elif block.notest is None and block.kind not in KINDS:
                problems.append(f"{block}: no runner for this kind (known: {', '.join(sorted(KINDS))})")
    assert problems == []


# -- python ------------------------------------------------------------------------------------------


def blocks(page: Path) -> list[str]:
    """The page's runnable Python blocks."""
    return [block.code for block in runnable(page, frozenset({"python"}))]


def run(page: Path) -> list[dict[str, Any]]:
    """Run the page's blocks; the namespace after each one."""
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    after = []
    for block in runnable(page, frozenset({"python"})):
        exec(compile(block.code, f"{block.page.name}[python block at line {block.line}]", "exec"), namespace)
        after.append(dict(namespace))
    return after


@pytest.mark.parametrize("page", PAGES, ids=page_ids(PAGES))
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()  # docs/gateway.md keeps its registry in data/
    assert len(run(page)) == len(blocks(page))


@pytest.mark.anyio
async def test_readme_rpc_service_serves_json_rpc_and_mcp(serve: Callable[..., str]) -> None:
    readme = ROOT / "README.md"
    index = next(index for index, code in enumerate(blocks(readme)) if "RPCService(" in code)
    url = serve(run(readme)[index]["app"])
    async with httpx.AsyncClient() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "Catalog.search", "params": {"query": "kob"}}
        found = (await http.post(url + "/rpc", json=body)).json()
    async with Client(url + "/mcp") as client:
        result = await client.call_tool("Catalog.search", {"query": "song"})
    assert found["result"] == [{"id": 1, "name": "Kobzar"}]
    assert result.structured_content == {"result": [{"id": 2, "name": "Forest Song"}]}


# -- json, yaml, toml --------------------------------------------------------------------------------

DATA_PAGES = [page for page in PAGES if runnable(page, DATA)]


@pytest.mark.parametrize("page", DATA_PAGES, ids=page_ids(DATA_PAGES))
def test_data_blocks_load(page: Path, tmp_path: Path) -> None:
    for index, block in enumerate(runnable(page, DATA)):
        folder = tmp_path / str(index)
        folder.mkdir()
        try:
            value = parse(block)
            check(value, block, folder)
        except Exception as exc:
            raise AssertionError(f"{block}: {exc}") from exc


def parse(block: Block) -> Any:
    if block.kind == "json":
        return json.loads(block.code)
    if block.kind == "toml":
        return tomllib.loads(block.code)
    return yaml.safe_load(block.code)


def check(value: Any, block: Block, folder: Path) -> None:
    """Crank's own files are loaded by Crank; other data only has to parse."""
    if not isinstance(value, dict):
        return
    if "mcpServers" in value:
        check_client_config(value)
    elif "error_code" in value:
        check_structured_error(value)
    elif "workspace" in value and {"agents", "operations", "sources"} & set(value):
        check_catalog(block, folder)
    elif set(value) == {"execution_config"}:
        spec = {"tool_name": "t", "protocol": "http", "target": {"method": "POST", "url": "http://upstream.test/x"}}
        tool_from_spec({**spec, "execution_config": value["execution_config"]})
    elif value and set(value) <= set(Settings.model_fields):
        path = folder / ("crank.toml" if block.kind == "toml" else "crank.yaml")
        path.write_text(block.code)
        load_settings(path)


def check_client_config(value: dict[str, Any]) -> None:
    """The shape `crank demo` prints (DemoServer.client_config), with the key elided."""
    printed = json.loads(build_demo_config())["mcpServers"]["crank-demo"]
    for entry in value["mcpServers"].values():
        assert set(entry) == set(printed) and entry["type"] == printed["type"]
        assert re.fullmatch(r"https?://[^/]+/mcp/v1/[\w-]+/[\w-]+", entry["url"]), entry["url"]
        assert set(entry["headers"]) == {"Authorization"} and entry["headers"]["Authorization"].startswith("Bearer ")


def build_demo_config() -> str:
    """What `crank demo` prints (only the URL and the key go into it)."""
    demo = DemoServer(app=None, server=None, mcp_url="http://h/mcp/v1/demo/bookshop", api_key="k")  # type: ignore[arg-type]
    return demo.client_config()


def check_structured_error(value: dict[str, Any]) -> None:
    payload = ExternalServiceError("m", details={}).to_payload("r")
    assert set(payload) - {"details"} <= set(value) <= set(payload), sorted(value)
    classes = {cls.error_class for cls in _subclasses(ToolError)}
    assert value["error_class"] in classes and isinstance(value["recoverable"], bool)


def _subclasses(cls: type) -> Iterator[type[ToolError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def check_catalog(block: Block, folder: Path) -> None:
    for name, source in FILES.items():
        shutil.copy(source, folder / name)
    path = folder / f"catalog-{block.line}.yaml"
    path.write_text(block.code)
    engine = open_engine(f"sqlite:///{folder / 'registry.sqlite3'}", pooled=False)
    try:
        migrate(engine)
        # The demo's catalog targets the demo on 127.0.0.1:8000: allowed by name, as README.md tells the CLI to.
        demo = EgressPolicy([*LOOPBACK, "127.0.0.1:8000"])
        report = apply_catalog(Registry(engine), load_catalog_file(path), base_dir=folder, egress=demo)
    finally:
        engine.dispose()
    assert report.versions, "the catalog publishes no agent"


# -- sh ----------------------------------------------------------------------------------------------

SHELL_PAGES = [page for page in PAGES if runnable(page, SHELL)]


@pytest.mark.parametrize("page", SHELL_PAGES, ids=page_ids(SHELL_PAGES))
def test_shell_blocks_run(page: Path, tmp_path: Path, serve: Callable[..., str]) -> None:
    home = tmp_path / "home"
    folder = home / ".local" / "share" / "crank-demo"  # where `crank demo` keeps its data by default
    port = free_port()
    demo = build_demo(f"127.0.0.1:{port}", folder)
    base = serve(demo.app, port=port)
    work = tmp_path / "work"
    work.mkdir()
    for name, source in FILES.items():
        shutil.copy(source, work / name)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("CRANK_", "XDG_"))}
    env.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
        CRANK_DATA_DIR=str(folder),
        CRANK_EGRESS_ALLOW=f"127.0.0.1:{port}",  # as README.md says: the demo's address, for the CLI's publishes
        CRANK_DEMO_API=f"{base}/demo-api",
        KEY=demo.api_key,
    )
    for block in runnable(page, SHELL):
        commands = list(shell_commands(block.code))
        try:
            if any(_SERVER.match(command) for command in commands):
                for index, command in enumerate(commands):
                    if _SERVER.match(command):
                        alone = {name: value for name, value in env.items() if name != "CRANK_DATA_DIR"}
                        run_server(command, work, {**alone, "HOME": str(tmp_path / f"server-{block.line}-{index}")})
                    else:
                        run_shell(command, base, work, env)
            else:
                run_shell(block.code, base, work, env)
        except AssertionError as exc:
            raise AssertionError(f"{block}: {exc}") from exc


def shell_commands(code: str) -> Iterator[str]:
    """Each command of a block: continuation lines joined, comment lines and blank lines left out."""
    for command in re.sub(r"\\\n\s*", " ", code).splitlines():
        if command.strip() and not command.lstrip().startswith("#"):
            yield command.strip()


def run_shell(code: str, base: str, work: Path, env: dict[str, str]) -> None:
    script = 'curl() { command curl --fail-with-body "$@"; }\n' + _substituted(code).replace(_DEMO_ADDRESS, base)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert '"isError":true' not in done.stdout.replace(" ", ""), done.stdout[-2000:]


def _substituted(code: str) -> str:
    return re.sub(r"^make ", f"make -C {ROOT} ", code, flags=re.MULTILINE)


def run_server(command: str, work: Path, env: dict[str, str]) -> None:
    """Start a server command on a free port, wait until it answers HTTP, check its banner, stop it."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    command = re.sub(r"\s+#.*$", "", command)
    if command.startswith("make run"):
        command += f" LISTEN={address}"
    elif command.startswith("crank demo"):
        command += f" --listen {address}"
    log = work / f"server-{port}.log"
    with log.open("w") as output:
        process = subprocess.Popen(["bash", "-c", "exec " + _substituted(command)], cwd=work,
                                   env={**env, "CRANK_LISTEN": address, "PYTHONUNBUFFERED": "1"},
                                   stdout=output, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            answered = _wait_for_http(f"http://{address}/", process)
            # The console the banner names answers there (its sign-in page).
            console = httpx.get(f"http://{address}/console/login", timeout=10).status_code if answered else None
        finally:
            os.killpg(process.pid, signal.SIGTERM)  # the group this test started: make, scripts/run, crank
            process.wait(timeout=30)
    printed = log.read_text()
    assert answered, f"{command!r} never answered on {address}:\n{printed}"
    if command.startswith(("make run", "crank demo")):
        assert f"MCP endpoint:   http://{address}/mcp/v1/demo/bookshop" in printed, printed
        assert f"Console:        http://{address}/console (sign in with the admin token in " in printed, printed
        assert console == 200
    elif not re.match(r"crank serve\s+[\w.]+:\w+", command):
        assert f"http://{address}/" in printed, printed  # the gateway's banner names its URLs


def _wait_for_http(url: str, process: subprocess.Popen[Any]) -> bool:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(url, timeout=2)
            return True
        except httpx.TransportError:
            time.sleep(0.1)
    return False


# -- deployment files --------------------------------------------------------------------------------

DEPLOYMENT = ROOT / "docs" / "deployment.md"


def deployment_block(kind: str) -> str:
    """The one block of docs/deployment.md of this kind that shows a file of deploy/ (its notest reason says so)."""
    shown = [block.code for block in all_blocks(DEPLOYMENT) if block.kind == kind and "itself" in (block.notest or "")]
    assert len(shown) == 1, shown
    return shown[0]


def test_the_deployment_page_shows_the_nginx_file_the_tests_run() -> None:
    assert deployment_block("nginx") == (ROOT / "deploy" / "nginx" / "crank.conf").read_text()


def test_the_deployment_page_shows_a_valid_systemd_unit(tmp_path: Path) -> None:
    unit = ROOT / "deploy" / "systemd" / "crank.service"
    assert deployment_block("ini") == unit.read_text()
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(unit.read_text())
    program, *arguments = shlex.split(parser["Service"]["ExecStart"])
    assert program.endswith("/crank") and arguments[0] == "serve"
    serve_command = main.commands["serve"]
    serve_command.make_context("serve", arguments[1:])  # click refuses an option `crank serve` lacks
    assert parser["Service"]["Restart"] == "on-failure" and "EnvironmentFile" in parser["Service"]
    verify = shutil.which("systemd-analyze")
    if verify is not None:  # with the path of this checkout's crank, which exists
        local = tmp_path / "crank.service"
        local.write_text(unit.read_text().replace(program, str(Path(sys.executable).parent / "crank")))
        done = subprocess.run([verify, "verify", str(local)], capture_output=True, text=True, check=False)
        assert done.returncode == 0 and done.stderr == "", done.stderr
