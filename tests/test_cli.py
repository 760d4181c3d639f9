"""`crank` on the command line: serving (gateway roles, or an app), the admin commands on a real registry,
and settings errors."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import click
import httpx
import pytest
from click.testing import CliRunner

from crank import __version__
from crank.cli import main
from tests.realapis import ASANA, LIBRETRANSLATE, require
from tests.services import free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO_SPEC = ROOT / "src" / "crank" / "demo" / "openapi.yaml"


@contextmanager
def crank_process(
    *args: str, env: dict[str, str] | None = None, stderr: IO[bytes] | None = None, inherit: bool = True
) -> Iterator[str]:
    """`crank ARGS` in a subprocess listening on a free port; yields its base URL once it answers. `inherit=False`:
    with `env` alone, none of this process's `CRANK_*` variables."""
    port = free_port()
    inherited = os.environ if inherit else {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    environment = {**inherited, **(env or {}), "CRANK_LISTEN": f"127.0.0.1:{port}"}
    server = subprocess.Popen([sys.executable, "-m", "crank.cli", *args], cwd=ROOT, env=environment,
                              stdout=subprocess.DEVNULL, stderr=stderr or subprocess.DEVNULL)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, "crank exited"
                assert time.monotonic() < deadline, "crank did not answer"
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("DATABASE_URL", "ADMIN_TOKEN", "LISTEN", "ROLE", "SETTINGS_FILE"):
        monkeypatch.delenv(f"CRANK_{name}", raising=False)
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    return CliRunner()


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_serve_runs_the_quickstart() -> None:
    with crank_process("serve", "examples.quickstart:app") as base:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "books.get", "arguments": {"id": 1}}}  # fmt: skip
        response = httpx.post(base + "/mcp", json=body, timeout=5)
    assert response.json()["result"]["structuredContent"]["title"] == "Kobzar"


@pytest.mark.parametrize(("role", "admin_status", "mcp_status"), [("mcp", 404, 401), ("admin", 200, 404)])
def test_serve_roles_split_admin_from_mcp(tmp_path: Path, role: str, admin_status: int, mcp_status: int) -> None:
    env = {"CRANK_DATA_DIR": str(tmp_path), "CRANK_ADMIN_TOKEN": "a-long-enough-admin-token"}
    with crank_process("serve", "--role", role, env=env) as base:
        assert httpx.get(base + "/healthz").json() == {"status": "ok", "role": role}
        admin = httpx.get(base + "/admin/v1/workspaces", headers={"Authorization": "Bearer a-long-enough-admin-token"})
        assert admin.status_code == admin_status
        assert httpx.get(base + "/mcp/v1/any/agent/tools").status_code == mcp_status
    assert (tmp_path / "registry.sqlite3").exists()  # the embedded registry, created on first start


def test_bad_settings_stop_the_start_with_a_message(runner: CliRunner) -> None:
    result = runner.invoke(main, ["serve"], env={"CRANK_LISTEN": "nowhere", "CRANK_POLL_INTERVAL": "0"})
    assert result.exit_code == 1
    assert "CRANK_LISTEN: expected host:port" in result.output and "CRANK_POLL_INTERVAL" in result.output
    assert "Traceback" not in result.output


def test_admin_commands_import_bind_publish_and_roll_back(runner: CliRunner) -> None:
    def run(*args: str) -> str:
        result = runner.invoke(main, list(args))
        assert result.exit_code == 0, result.output
        return result.output

    run("workspace", "create", "shop", "--name", "Shop")
    assert "imported 5 operations" in run("import", "openapi", str(DEMO_SPEC), "-w", "shop",
                                          "--base-url", "http://shop.test")  # fmt: skip
    assert "get_book\thttp\tGET http://shop.test/books/{book_id}" in run("operation", "list", "shop")
    run("agent", "bind", "shop", "desk", "get_book", "--title", "A book")
    run("agent", "bind", "shop", "desk", "search_books", "--tool-name", "find_books")
    assert "version 1" in run("publish", "shop", "desk")
    run("agent", "unbind", "shop", "desk", "find_books")
    assert "version 2" in run("publish", "shop", "desk")
    assert run("versions", "shop", "desk").splitlines()[1].startswith("* 2")
    assert "now serves version 1" in run("rollback", "shop", "desk", "1")
    assert run("versions", "shop", "desk").splitlines()[0].startswith("* 1")
    assert run("key", "create", "shop", "--agent", "desk").startswith("crk_")
    (listed,) = run("key", "list", "shop").splitlines()
    key_id, _, agents = listed.split()
    assert agents == "desk" and "crk_" not in listed
    assert run("key", "delete", "shop", key_id) == "revoked\n"
    assert run("key", "list", "shop") == ""
    gone = runner.invoke(main, ["key", "delete", "shop", key_id])
    assert gone.exit_code == 1 and key_id in gone.output and "Traceback" not in gone.output


def test_import_gives_the_operations_it_is_told_human_confirmation(runner: CliRunner) -> None:
    """`--human-confirmation GLOB`: the matching imported operations are published as `confirmation: human`
    (each call asked of the user; no token in the schema), the others as they were; a glob that matches nothing is
    an error naming it."""
    from crank.registry.runtime import load_runtime
    from crank.settings import load_settings

    assert runner.invoke(main, ["workspace", "create", "shop"]).exit_code == 0
    command = ["import", "openapi", str(DEMO_SPEC), "-w", "shop", "--base-url", "http://shop.test"]
    imported = runner.invoke(main, [*command, "--human-confirmation", "cancel_*"])
    assert imported.exit_code == 0, imported.output
    assert "confirmed by their user on each call: cancel_order" in imported.output
    for name in ("cancel_order", "create_order"):
        assert runner.invoke(main, ["agent", "bind", "shop", "desk", name]).exit_code == 0
    assert runner.invoke(main, ["publish", "shop", "desk"]).exit_code == 0
    from crank.registry import Registry, open_engine

    engine = open_engine(load_settings().registry_url, pooled=False)
    try:
        runtime = load_runtime(Registry(engine).published()[0].stored, where="test")
    finally:
        engine.dispose()
    tools = {tool.tool_name: tool for tool in runtime.tools}
    assert tools["cancel_order"].execution_config.confirmation.human
    assert not tools["create_order"].execution_config.confirmation.human
    nothing = runner.invoke(main, [*command, "--human-confirmation", "drop_*"])
    assert nothing.exit_code == 2 and "no imported operation matches drop_*" in nothing.output


def test_publish_uses_the_settings_files_egress_allowance(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRANK_EGRESS_ALLOW")  # the environment allows no loopback target; the settings file does
    settings = tmp_path / "crank.toml"
    settings.write_text('egress_allow = "127.0.0.0/8"\n')
    runner.invoke(main, ["workspace", "create", "shop"])
    imported = runner.invoke(
        main, ["import", "openapi", str(DEMO_SPEC), "-w", "shop", "--base-url", "http://127.0.0.1:9"]
    )
    assert imported.exit_code == 0, imported.output
    runner.invoke(main, ["agent", "bind", "shop", "desk", "get_book"])
    refused = runner.invoke(main, ["publish", "shop", "desk"])
    assert refused.exit_code == 1 and "127.0.0.1:9 is not a public address" in refused.output
    published = runner.invoke(main, ["--settings", str(settings), "publish", "shop", "desk"])
    assert published.exit_code == 0 and "version 1" in published.output, published.output


def test_a_real_description_with_an_operation_crank_cannot_call_is_imported_without_it_and_strict_refuses_it(
    runner: CliRunner,
) -> None:
    """LibreTranslate's description (6 operations): one describes its multipart body as a string, which Crank cannot
    send as fields. It is skipped with one line naming it, why and the pattern that leaves it out; the other 5 are
    imported. `--strict` refuses it all. Asana's upload, once skipped the same way, is imported."""
    document = str(require(LIBRETRANSLATE))
    runner.invoke(main, ["workspace", "create", "translate"])
    strict = runner.invoke(main, ["import", "openapi", document, "-w", "translate", "--strict"])
    assert strict.exit_code == 1 and "Traceback" not in strict.output
    assert (
        "paths./translate_file.post.requestBody: its multipart/form-data body is described as string" in strict.output
    )
    assert "leave the operation out with the include pattern '!post_translate_file'" in strict.output
    assert runner.invoke(main, ["operation", "list", "translate"]).output == ""  # nothing imported
    imported = runner.invoke(main, ["import", "openapi", document, "-w", "translate"])
    assert imported.exit_code == 0, imported.output
    assert (
        "skipped post_translate_file (POST /translate_file): its multipart/form-data body is described as string, "
        "not as the object of fields Crank sends; --include '!post_translate_file' leaves it out quietly"
    ) in imported.output
    assert "imported 5 operations into translate: 5 added, 0 removed, 0 changed, 1 skipped" in imported.output
    quiet = runner.invoke(main, ["import", "openapi", document, "-w", "translate", "--include", "!post_translate*"])
    assert quiet.exit_code == 0 and "skipped" not in quiet.output
    assert "'!' leaves out what it matches" in runner.invoke(main, ["import", "openapi", "--help"]).output
    runner.invoke(main, ["workspace", "create", "asana"])
    asana = runner.invoke(main, ["import", "openapi", str(require(ASANA)), "-w", "asana", "--strict"])
    assert asana.exit_code == 0 and "imported 167 operations into asana: 167 added" in asana.output, asana.output


def test_admin_commands_fail_clearly(runner: CliRunner, tmp_path: Path) -> None:
    runner.invoke(main, ["workspace", "create", "shop"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths: {/x: {get: {}}}\n")
    result = runner.invoke(main, ["import", "openapi", str(bad), "-w", "shop", "--base-url", "http://u"])
    assert result.exit_code == 1 and "responses" in result.output and "Traceback" not in result.output
    assert runner.invoke(main, ["operation", "list", "shop"]).output == ""  # nothing imported
    missing = runner.invoke(main, ["publish", "shop", "nobody"])
    assert missing.exit_code == 1 and "no agent 'nobody' in workspace 'shop'" in missing.output


def test_apply_command(runner: CliRunner, tmp_path: Path) -> None:
    from crank.demo import CATALOG

    result = runner.invoke(main, ["apply", str(CATALOG)], env={"CRANK_DEMO_API": "http://shop.test"})
    assert result.exit_code == 0, result.output
    assert "workspace demo: 6 operations" in result.output and "agent bookshop: version 1 (published)" in result.output
    again = runner.invoke(main, ["apply", str(CATALOG)], env={"CRANK_DEMO_API": "http://shop.test"})
    assert "agent bookshop: version 1 (unchanged)" in again.output


def test_lint_gates_ci_and_catalog_shows_the_budget(runner: CliRunner, tmp_path: Path) -> None:
    from crank.demo import CATALOG

    assert runner.invoke(main, ["apply", str(CATALOG)], env={"CRANK_DEMO_API": "http://shop.test"}).exit_code == 0
    clean = runner.invoke(main, ["lint", "demo"])
    assert clean.exit_code == 0 and "bookshop: 0 finding(s)" in clean.output
    report = runner.invoke(main, ["catalog", "demo"])
    lines = report.output.splitlines()
    assert report.exit_code == 0 and lines[0].startswith("bookshop: about ") and lines[0].endswith(" of 4096 tokens")
    weights = [int(line.split()[0]) for line in lines[1:]]
    assert len(weights) == 6 and weights == sorted(weights, reverse=True)  # heaviest first

    generic = tmp_path / "generic.yaml"
    generic.write_text("protocol: http\ntarget: {method: POST, url: 'http://u/run'}\n")
    runner.invoke(main, ["operation", "put", "demo", "call_api", str(generic)])
    runner.invoke(main, ["agent", "bind", "demo", "bookshop", "call_api"])
    failing = runner.invoke(main, ["lint", "demo", "bookshop"])
    assert failing.exit_code == 1 and "call_api  generic-name" in failing.output and "error(s)" in failing.output
    over = runner.invoke(main, ["lint", "demo", "bookshop", "--budget", "100"])
    assert "warning  (agent)  over-budget" in over.output  # seed 004: a warning, which alone never fails
    strict = runner.invoke(main, ["lint", "demo", "bookshop", "--budget", "100", "--strict"])
    assert strict.exit_code == 1 and "finding(s)" in strict.output
    published = runner.invoke(main, ["publish", "demo", "bookshop"])  # findings are shown, never blocking
    assert published.exit_code == 0 and "version 2" in published.output and "generic-name" in published.output


def test_lint_reads_in_process_apps() -> None:
    result = CliRunner().invoke(main, ["lint", "--app", "examples.rpc_app:app"])
    assert result.exit_code == 0 and "/mcp (v2):" in result.output
    assert "user.delete  param-description: parameters without a description: id" in result.output


def test_lint_and_catalog_report_a_broken_draft_and_go_on(runner: CliRunner, tmp_path: Path) -> None:
    from crank.demo import CATALOG

    assert runner.invoke(main, ["apply", str(CATALOG)], env={"CRANK_DEMO_API": "http://shop.test"}).exit_code == 0
    (tmp_path / "ghost.yaml").write_text("bindings: [{operation: ghost}]\n")  # no such operation
    (tmp_path / "slow.yaml").write_text(
        "protocol: http\ntarget: {url: 'http://u/x'}\nexecution_config: {timeout: soon}\n"
    )
    assert runner.invoke(main, ["agent", "put", "demo", "archive", str(tmp_path / "ghost.yaml")]).exit_code == 0
    assert runner.invoke(main, ["operation", "put", "demo", "slow", str(tmp_path / "slow.yaml")]).exit_code == 0
    assert runner.invoke(main, ["agent", "bind", "demo", "cache", "slow"]).exit_code == 0
    missing = "agent demo/archive, binding 0: no operation 'ghost' in workspace 'demo'"
    mistyped = "agent demo/cache, tool 'slow': execution_config.timeout: Input should be a valid number"

    linted = runner.invoke(main, ["lint", "demo"])
    assert linted.exit_code == 1 and linted.output.endswith("Error: 2 error(s)\n")
    assert linted.output.splitlines()[:2] == ["archive: 1 finding(s)", f"  error  (agent)  compile-error: {missing} "
                                              "Fix: fix what it names; a publish refuses it too."]  # fmt: skip
    assert "bookshop: 0 finding(s)" in linted.output and f"compile-error: {mistyped}" in linted.output

    report = runner.invoke(main, ["catalog", "demo"])
    lines = report.output.splitlines()
    assert report.exit_code == 1 and lines[-1] == "Error: 2 agent(s) cannot be built"
    assert lines[:2] == ["archive: cannot be built", f"  error  (agent)  compile-error: {missing} "
                         "Fix: fix what it names; a publish refuses it too."]  # fmt: skip
    assert lines[2].startswith("bookshop: about ") and len([line for line in lines if line.startswith("    ")]) == 6
    assert "cache: cannot be built" in lines and any(mistyped in line for line in lines)


def _commands(group: click.Group, prefix: str = "crank") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix} {name}")


def test_every_command_has_a_help_line() -> None:
    commands = dict(_commands(main))
    assert len(commands) > 25  # the walk reached the subgroups
    missing = [name for name, command in commands.items() if not command.get_short_help_str(limit=100).strip()]
    assert missing == []


@pytest.mark.parametrize("command", [["demo"], ["serve", "--role", "mcp"]])
def test_a_busy_port_is_reported_before_any_banner(runner: CliRunner, command: list[str], tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        result = runner.invoke(main, [*command, "--listen", address, "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot listen on {address}: the port is already in use.")
    assert "--listen HOST:PORT" in result.output and "make run LISTEN=" in result.output
    assert not (tmp_path / "d").exists()  # nothing was built before the port was checked


def test_serve_takes_a_data_dir(tmp_path: Path) -> None:
    with crank_process("serve", "--data-dir", str(tmp_path / "here")) as base:
        assert httpx.get(base + "/healthz").json()["status"] == "ok"
    assert (tmp_path / "here" / "registry.sqlite3").exists() and (tmp_path / "here" / "admin-token").exists()


def test_json_log_lines_carry_no_colour_codes(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    env = {"CRANK_DATA_DIR": str(tmp_path), "CRANK_LOG_FORMAT": "json"}
    with log.open("wb") as stderr, crank_process("serve", env=env, stderr=stderr):
        pass  # started: uvicorn has logged its startup lines
    lines = log.read_text().splitlines()
    assert any("Started server process" in line for line in lines)
    assert all(isinstance(json.loads(line), dict) for line in lines)
    assert not [line for line in lines if "\x1b" in line or "\\u001b" in line]


@pytest.mark.parametrize(
    "command",
    [
        ["workspace", "list"],
        ["key", "list", "shop"],
        ["agent", "list", "shop"],
        ["serve", "--role", "mcp"],
        ["serve", "--role", "mcp", "--workers", "2"],  # checked once, before any worker starts
    ],
)
def test_an_unreachable_registry_is_one_line_and_a_failed_exit(command: list[str], tmp_path: Path) -> None:
    nobody = free_port()  # nothing listens there: every connection is refused
    database = f"postgresql+psycopg://crank:secret-password@127.0.0.1:{nobody}/crank"
    environment = {**os.environ, "CRANK_DATA_DIR": str(tmp_path), "CRANK_LISTEN": f"127.0.0.1:{free_port()}",
                   "CRANK_DATABASE_URL": database}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "crank.cli", *command], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: the registry database cannot be used: ")
    assert str(nobody) in lines[0] and "secret-password" not in done.stderr + done.stdout


def test_a_reference_chain_over_the_limit_is_one_line(runner: CliRunner, tmp_path: Path) -> None:
    from tests.admin.test_openapi import reference_chain

    spec = tmp_path / "chain.json"
    spec.write_text(json.dumps(reference_chain(500)))
    assert runner.invoke(main, ["workspace", "create", "chain"]).exit_code == 0
    result = runner.invoke(main, ["import", "openapi", str(spec), "-w", "chain"])
    assert result.exit_code == 1
    assert "nest more than 400 levels deep" in result.output and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_key_commands_set_a_keys_rate_limit_and_quota(runner: CliRunner) -> None:
    assert runner.invoke(main, ["workspace", "create", "shop", "--name", "Shop"]).exit_code == 0
    created = runner.invoke(main, ["key", "create", "shop", "--rate", "100/60", "--quota", "10000/day"])
    assert created.exit_code == 0, created.output
    key_id, _, agents, limits = runner.invoke(main, ["key", "list", "shop"]).output.split()
    assert agents == "*"
    assert json.loads(limits) == {"rate": {"calls": 100, "window": 60.0}, "quota": {"calls": 10000, "period": "day"}}
    changed = runner.invoke(main, ["key", "limits", "shop", key_id, "--quota", "5/hour"])
    assert changed.exit_code == 0, changed.output
    assert json.loads(runner.invoke(main, ["key", "list", "shop"]).output.split()[3]) == {
        "quota": {"calls": 5, "period": "hour"}
    }
    wrong = runner.invoke(main, ["key", "limits", "shop", key_id, "--quota", "5/week"])
    assert wrong.exit_code == 2 and "quota.period" in wrong.output


def test_workspace_oauth_sets_shows_and_turns_off_a_policy(runner: CliRunner) -> None:
    assert runner.invoke(main, ["workspace", "create", "acme"]).exit_code == 0
    result = runner.invoke(main, [
        "workspace", "oauth", "acme", "--issuer", "https://id.example", "--audience", "https://mcp.example",
        "--sign-in", "calls", "--agent-scope", "*=tools:read", "--tool-scope", "destructive=tools:delete,admin",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    shown = json.loads(runner.invoke(main, ["workspace", "oauth", "acme", "--show"]).output)
    scopes = {"agent_scopes": {"*": ["tools:read"]}, "tool_scopes": {"destructive": ["tools:delete", "admin"]}}
    assert shown == {"issuers": ["https://id.example"], "audience": "https://mcp.example", "sign_in": "calls", **scopes}
    refused = runner.invoke(main, ["workspace", "oauth", "acme", "--issuer", "ftp://id.example"])
    assert refused.exit_code != 0 and "is not an http(s) URL" in refused.output
    assert runner.invoke(main, ["workspace", "oauth", "acme", "--off"]).exit_code == 0
    assert runner.invoke(main, ["workspace", "oauth", "acme", "--show"]).output.strip() == "null"


def test_the_vault_commands_make_a_key_check_rotate_and_connections_are_listed_and_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crank.registry import migrate, open_engine
    from crank.registry.vault import Vault, VaultKeys

    for name in ("DATABASE_URL", "ADMIN_TOKEN", "LISTEN", "ROLE", "SETTINGS_FILE", "VAULT_KEYS"):
        monkeypatch.delenv(f"CRANK_{name}", raising=False)
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "data"))
    runner = CliRunner()
    assert "CRANK_VAULT_KEYS is not set" in runner.invoke(main, ["vault", "check"]).output
    old, new = (runner.invoke(main, ["vault", "key"]).output.strip() for _ in range(2))
    assert old != new and len(base64.urlsafe_b64decode(old)) == 32
    assert runner.invoke(main, ["workspace", "create", "acme"]).exit_code == 0
    engine = open_engine(f"sqlite:///{tmp_path / 'data' / 'registry.sqlite3'}", pooled=False)
    migrate(engine)
    Vault(engine, VaultKeys([base64.urlsafe_b64decode(old)])).put("acme", "people", "https://id", "alice",
                                                                  {"access_token": "alice-token"})  # fmt: skip
    monkeypatch.setenv("OLD_KEY", old)
    monkeypatch.setenv("NEW_KEY", new)
    monkeypatch.setenv("CRANK_VAULT_KEYS", "env:NEW_KEY")  # the old key forgotten: said, naming the key id
    missing = runner.invoke(main, ["vault", "check"])
    assert missing.exit_code != 0 and "CRANK_VAULT_KEYS does not hold" in missing.output
    monkeypatch.setenv("CRANK_VAULT_KEYS", "env:NEW_KEY, env:OLD_KEY")
    assert "1 entries re-encrypted" in runner.invoke(main, ["vault", "rotate"]).output
    monkeypatch.setenv("CRANK_VAULT_KEYS", "env:NEW_KEY")
    checked = runner.invoke(main, ["vault", "check"])
    assert checked.exit_code == 0 and "every one readable" in checked.output
    monkeypatch.setenv("CRANK_VAULT_KEYS", "env:NO_SUCH_KEY")  # a wrong setting: said before anything runs
    wrong = runner.invoke(main, ["vault", "check"])
    assert wrong.exit_code != 0 and "NO_SUCH_KEY" in wrong.output and new not in wrong.output
    monkeypatch.delenv("CRANK_VAULT_KEYS")
    listed = json.loads(runner.invoke(main, ["connection", "list", "acme"]).output)
    assert [(entry["scheme"], entry["subject"]) for entry in listed] == [("people", "alice")]
    assert "alice-token" not in json.dumps(listed)
    assert runner.invoke(main, ["connection", "remove", "acme"]).exit_code != 0  # say which
    assert (
        "1 connection(s) removed" in runner.invoke(main, ["connection", "remove", "acme", "--subject", "alice"]).output
    )
    assert json.loads(runner.invoke(main, ["connection", "list"]).output) == []
    engine.dispose()


READ_ONLY_COMMANDS = [
    ["workspace", "list"],
    ["agent", "list", "shop"],
    ["key", "list", "shop"],
    ["operation", "list", "shop"],
]
"""Commands that only read the registry: they start in a fraction of what a publish or `crank serve` imports."""
NOT_FOR_READING = (
    *("alembic", "redis", "psycopg", "httpx", "uvicorn", "jinja2", "yaml"),
    *("crank.mcp", "crank.admin", "crank.gateway.adapters", "crank.gateway.operation", "crank.sources.agents"),
    "crank.server",
)


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=" ".join)
def test_a_command_that_only_reads_the_registry_imports_neither_the_server_nor_alembic(
    command: list[str], tmp_path: Path
) -> None:
    """The CLI's imports stay lazy: a read-only command on a registry already at the newest migration imports no
    migration tool, no client of Redis, PostgreSQL or HTTP, and none of the server's layers (docs/architecture.md,
    "Imports"); its start time is in docs/benchmarks.md."""
    environment = {**os.environ, "CRANK_DATA_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-m", "crank.cli", "workspace", "create", "shop"], cwd=ROOT, env=environment,
                   capture_output=True, check=True, timeout=120)  # fmt: skip
    code = (
        "import runpy, sys\n"
        "sys.argv = ['crank', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('crank.cli', run_name='__main__')\n"
        "except SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *command], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    imported = done.stderr.split()
    assert "crank.registry.service" in imported  # it did read the registry
    assert [name for name in imported if name.startswith(NOT_FOR_READING)] == []


BEARER_SPEC = """
openapi: 3.1.0
info: {title: Shop, version: "1"}
components:
  securitySchemes:
    token: {type: http, scheme: bearer}
security: [{token: []}]
paths:
  /books:
    get:
      operationId: list_books
      summary: Every book.
      responses:
        "200":
          description: The books.
          content: {application/json: {schema: {type: array, items: {type: string}}}}
"""


def crank_run(environment: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crank.cli", *args], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def curated_shop(tmp_path: Path, upstream: str, environment: dict[str, str]) -> str:
    """Workspace `shop`, agent `desk` of `list_books` (BEARER_SPEC at `upstream`, its token `env:SHOP_TOKEN`),
    published by the CLI with `environment`; its API key."""
    spec = tmp_path / "openapi.yaml"
    spec.write_text(BEARER_SPEC)
    steps = [
        ["workspace", "create", "shop"],
        ["import", "openapi", str(spec), "-w", "shop", "--base-url", upstream, "--auth-scheme", "token=env:SHOP_TOKEN"],
        ["agent", "bind", "shop", "desk", "list_books"],
        ["publish", "shop", "desk"],
        ["key", "create", "shop"],
    ]
    for step in steps:
        done = crank_run(environment, *step)
        assert done.returncode == 0, (step, done.stderr[-1500:])
    return done.stdout.strip().splitlines()[-1]


def test_the_data_folders_settings_file_lets_a_publish_with_a_secret_be_served_without_new_errors(
    tmp_path: Path, serve: Callable[..., str]
) -> None:
    """The curated path with an upstream credential, on a fresh data folder whose `crank.toml` gives the egress and
    secret allowances once: the CLI's publish is checked against them, and `crank serve`, started with only the
    secret itself in its environment, serves the same tool's call (issue 40: one place for settings)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def books(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != "Bearer s3cret":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return JSONResponse(["Kobzar", "Lisova pisnia"])

    upstream = serve(Starlette(routes=[Route("/books", books)]))
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "crank.toml").write_text(f'egress_allow = "{upstream.removeprefix("http://")}"\n'
                                       f'secret_env_allow = "shop:SHOP_TOKEN"\n')  # fmt: skip
    environment = {name: value for name, value in os.environ.items() if not name.startswith("CRANK_")}
    environment["CRANK_DATA_DIR"] = str(folder)
    key = curated_shop(tmp_path, upstream, environment)
    with crank_process("serve", "--role", "mcp", env={**environment, "SHOP_TOKEN": "s3cret"}, inherit=False) as base:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_books", "arguments": {}}}
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
        answer = httpx.post(f"{base}/mcp/v1/shop/desk", json=call, headers=headers, timeout=30).json()
    assert answer["result"].get("isError") is not True, answer
    assert "Kobzar" in json.dumps(answer["result"])


def test_doctor_and_serve_name_what_would_fail_every_call_here_with_its_fix(tmp_path: Path) -> None:
    """Published where the upstream and the secret were allowed, then checked with another environment: `crank
    doctor` names the refused address and the unset secret with their fixes and exits 1, `crank serve` warns of
    the same at its start, and with the settings fixed doctor finds nothing."""
    upstream = f"http://127.0.0.1:{free_port()}"  # nothing needs to answer: nothing is called
    environment = {name: value for name, value in os.environ.items() if not name.startswith("CRANK_")}
    environment["CRANK_DATA_DIR"] = str(tmp_path / "data")
    allowed = {**environment, "CRANK_EGRESS_ALLOW": upstream.removeprefix("http://"),
               "CRANK_SECRET_ENV_ALLOW": "shop:SHOP_TOKEN"}  # fmt: skip
    curated_shop(tmp_path, upstream, allowed)
    checked = crank_run(environment, "doctor")
    assert checked.returncode == 1, checked.stderr
    lines = [line for line in checked.stdout.splitlines() if line.startswith("agent shop/desk:")]
    assert len(lines) == 2, checked.stdout
    refused = next(line for line in lines if "may not connect to" in line)
    assert upstream in refused and "(tools: list_books)" in refused and "fix: allow it in egress_allow" in refused
    secret = next(line for line in lines if "secret env:SHOP_TOKEN" in line)
    assert 'fix: give it to the workspace: secret_env_allow = "shop:SHOP_TOKEN"' in secret
    assert "2 problems" in checked.stderr
    log = tmp_path / "serve.log"
    with log.open("wb") as output, crank_process("serve", "--role", "mcp", env=environment, stderr=output,
                                                  inherit=False):  # fmt: skip
        pass
    warned = log.read_text()
    assert "may not connect to" in warned and "secret env:SHOP_TOKEN does not resolve" in warned, warned
    fixed = crank_run({**allowed, "SHOP_TOKEN": "s3cret"}, "doctor")
    assert fixed.returncode == 0 and "no problems: 1 agent checked" in fixed.stdout, fixed.stdout + fixed.stderr
