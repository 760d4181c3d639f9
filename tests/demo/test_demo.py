"""`crank demo` (the README's `make run`): the gateway fronting the shipped bookshop, driven by the official
MCP client with the printed configuration."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from crank.cli import main
from crank.demo import build_demo
from crank.exceptions import SettingsError
from mcp import Client
from tests.services import free_port

pytestmark = pytest.mark.anyio


async def test_the_demo_serves_the_bookshop_to_an_mcp_client(tmp_path: Path, serve: Callable[..., str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    demo = build_demo(f"127.0.0.1:{port}", tmp_path)
    serve(demo.app, port=port)
    config = json.loads(demo.client_config())["mcpServers"]["crank-demo"]
    assert config["url"] == f"http://127.0.0.1:{port}/mcp/v1/demo/bookshop"

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=config["headers"]) as http:
        async with Client(streamable_http_client(config["url"], http_client=http)) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            bestseller = await client.call_tool("get_bestseller", {})
            order = await client.call_tool("order_book", {"book_id": 2, "quantity": 2, "idempotency_key": "o-1"})
            retried = await client.call_tool("order_book", {"book_id": 2, "quantity": 2, "idempotency_key": "o-1"})
            everything = await client.call_tool("search_books", {"query": ""})
            cancel = await client.call_tool("cancel_order", {"order_id": 1001})
            too_many = await client.call_tool("order_book", {"book_id": 1, "quantity": 50})
            # A newcomer's first resources/list and prompts/list: the demo has both.
            documents = [resource.uri for resource in (await client.list_resources()).resources]
            templates = [template.uri_template for template in (await client.list_resource_templates())
                         .resource_templates]  # fmt: skip
            book = await client.read_resource("crank://demo/bookshop/get_book/1")
            prompts = [prompt.name for prompt in (await client.list_prompts()).prompts]
            recommend = await client.get_prompt("recommend", {"topic": "poetry", "tone": "warm"})
    assert documents == ["docs://demo/how-to-order"]
    assert templates == ["crank://demo/bookshop/get_book/{book_id}"]
    assert json.loads(book.contents[0].text)["title"] == "Kobzar"  # type: ignore[union-attr]
    assert prompts == ["recommend"]
    first = recommend.messages[0].content
    assert (
        first.text == "Recommend one book about poetry from the shop, in a warm tone. Check its price and stock first."
    )  # type: ignore[union-attr]
    assert names == ["search_books", "get_book", "get_bestseller", "order_book", "get_order", "cancel_order"]
    assert bestseller.structured_content == {"result": {"title": "Kobzar", "author": "Taras Shevchenko", "price": 12.5}}
    assert order.structured_content is not None and order.structured_content["result"]["total"] == 18.0
    assert retried.structured_content == order.structured_content  # one order: the key was seen before
    assert everything.structured_content is not None and len(everything.structured_content["result"]) == 3
    assert "2 more items were left out" in everything.content[1].text  # type: ignore[union-attr]
    assert cancel.is_error and "confirmation_required" in cancel.content[0].text  # type: ignore[union-attr]
    assert too_many.is_error and "only 4 copies" in too_many.content[0].text  # type: ignore[union-attr]


def test_the_demo_takes_the_users_settings_but_keeps_its_own_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CRANK_* settings apply to the demo as to every command, except where it keeps its state: a deployment's
    registry or Redis is never written by the demo."""
    monkeypatch.setenv("CRANK_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/production")
    monkeypatch.setenv("CRANK_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("CRANK_PUBLIC_URL", "https://mcp.example.com")
    monkeypatch.setenv("CRANK_EGRESS_ALLOW", "10.1.2.3:9000")
    monkeypatch.setenv("CRANK_MAX_BODY_BYTES", "2048")
    demo = build_demo("127.0.0.1:8123", tmp_path)
    settings = demo.server.settings
    assert settings.registry_url == f"sqlite:///{tmp_path / 'registry.sqlite3'}" and settings.redis_url is None
    assert (settings.public_url, settings.max_body_bytes, settings.log_format) == ("https://mcp.example.com", 2048,
                                                                                   "text")  # fmt: skip
    assert demo.server.egress.target_refusal("http://10.1.2.3:9000/x") is None
    assert demo.server.egress.target_refusal("http://10.1.2.4:9000/x") is not None
    monkeypatch.setenv("CRANK_SETTINGS_FILE", str(tmp_path / "missing.toml"))
    with pytest.raises(SettingsError, match="no such file"):
        build_demo("127.0.0.1:8123", tmp_path)


def start_demo(env: dict[str, str]) -> dict[str, str]:
    """`crank demo` in a subprocess until its banner is printed; the banner's `Name: value` lines, and `cli`."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "crank.cli", "demo", "--listen", f"127.0.0.1:{port}"],
                               env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)  # fmt: skip
    banner: dict[str, str] = {}
    try:
        assert process.stdout is not None
        for line in process.stdout:
            name, colon, value = line.partition(":")
            if colon and line[0] != " ":
                banner.setdefault(name.strip(), value.strip())
            if "crank agent list demo" in line:
                banner["cli"] = line.strip()
                break
    finally:
        process.terminate()
        process.communicate(timeout=10)
    return banner


def test_the_demo_keeps_its_folder_and_key_and_says_how_to_point_the_cli_at_it(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path), "CRANK_DATA_DIR": str(tmp_path / "elsewhere")}
    first, second = start_demo(env), start_demo(env)
    folder = tmp_path / "crank-demo"
    assert first["API key"] == second["API key"] and first["API key"].startswith("crk_")
    assert first["Data folder"].startswith(f"{folder} ") and (folder / "registry.sqlite3").exists()
    assert first["cli"] == f"CRANK_DATA_DIR={folder} crank agent list demo"
    result = CliRunner().invoke(main, ["agent", "list", "demo"], env={"CRANK_DATA_DIR": str(folder)})
    assert result.exit_code == 0 and '"bookshop"' in result.output


def test_a_demo_key_the_registry_no_longer_knows_is_replaced(tmp_path: Path) -> None:
    first = build_demo("127.0.0.1:8123", tmp_path)
    first.server.registry.revoke_api_key(first.api_key)
    second = build_demo("127.0.0.1:8123", tmp_path)
    assert second.api_key != first.api_key and (tmp_path / "demo-api-key").read_text().strip() == second.api_key
    assert oct((tmp_path / "demo-api-key").stat().st_mode & 0o777) == "0o600"


def test_the_banner_names_the_crank_command_a_new_terminal_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make run` runs the virtualenv's `.venv/bin/crank`, which a new terminal's PATH may not find."""
    from crank.demo import crank_command

    crank = Path(sys.executable).parent / "crank"
    root = crank.parent.parent.parent
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "argv", [str(crank), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert crank_command() == str(crank.relative_to(root))  # .venv/bin/crank
    monkeypatch.setenv("PATH", f"{crank.parent}:/usr/bin:/bin")
    assert crank_command() == "crank"


def test_the_oauth_demo_signs_the_readmes_client_in_through_a_browser(tmp_path: Path) -> None:
    """`crank demo --oauth` as the README runs it: the command its banner prints (the README's OAuth client
    example) signs in at the local authorization server through Debian's chromium, where a person types a name and
    consents, and calls the bookshop with the token. The demo takes the user's CRANK_* settings: its log lines
    follow CRANK_LOG_FORMAT."""
    import shlex

    from tests.connect_flow import browse, origin_of

    port, callback_port = free_port(), free_port()
    environment = {
        **os.environ,
        "CRANK_LOG_FORMAT": "json",
        "CRANK_DATABASE_URL": "postgresql+psycopg://x@127.0.0.1:1/x",
    }
    demo = subprocess.Popen(
        [sys.executable, "-m", "crank.cli", "demo", "--oauth", "--listen", f"127.0.0.1:{port}", "--data-dir",
         str(tmp_path)], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        banner = []
        for line in demo.stdout:
            banner.append(line)
            if "crank agent list demo" in line:
                break
        printed = "".join(banner)
        issuer = next(line.split()[1] for line in banner if line.startswith("Sign-in:"))
        command = next(line.strip() for line in banner if line.strip().startswith("python examples/oauth_client.py"))
        assert command == (
            f"python examples/oauth_client.py http://127.0.0.1:{port}/mcp/v1/demo/bookshop search_books "
            """'{"query": "kobzar"}'"""
        ), printed
        client = subprocess.Popen(
            [sys.executable, *shlex.split(command)[1:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "NO_BROWSER": "1", "CALLBACK_PORT": str(callback_port)},
        )  # fmt: skip
        try:
            assert client.stdout is not None
            line = client.stdout.readline()
            assert line.startswith("Sign in at: "), line
            landed = browse(line.removeprefix("Sign in at: ").strip(), {origin_of(issuer): "ada"})
            output, errors = client.communicate(timeout=60)
        finally:
            client.kill()
    finally:
        demo.terminate()
        _, logged = demo.communicate(timeout=20)
    assert landed.text == "Signed in: you may close this window."
    assert client.returncode == 0, errors
    # Signed in with `tools:read`, the scope of the first challenge: the tools that write need `tools:write` (a
    # step-up when one is called), so tools/list shows the others.
    assert "tools: search_books, get_book, get_bestseller, get_order" in output
    assert '"title": "Kobzar"' in output
    assert any(line.startswith("{") and json.loads(line).get("message") for line in logged.splitlines()), logged


ROOT = Path(__file__).resolve().parent.parent.parent
