"""`crank serve --openapi SPEC` end to end (issue 11, item 6): Mailchimp's pinned document served at once,
with Prism mocking Mailchimp as the upstream; the printed URL and key used by the official SDK client,
the printed Python snippet run as printed, a busy port reported before any banner, and the key kept
between starts."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client

from crank.instant import client_setups, workspace_slug
from crank.server import CrankServer
from crank.sources.discovery import CALL_TOOL, SCHEMA_TOOL, SEARCH_TOOL
from mcp import Client
from tests.realapis import MAILCHIMP, prism, require
from tests.services import free_port, wait_until_answers

ROOT = Path(__file__).resolve().parent.parent
PING = {"result": {"health_status": '"Everything\'s Chimpy!"'}}  # Prism's answer: the document's example
SECRET_ENV = {"MAILCHIMP_AUTH": "Basic YW55OmtleQ=="}  # Prism checks that Mailchimp's basic auth is sent


MAILCHIMP_AUTH = ("--auth-header", "Authorization=env:MAILCHIMP_AUTH")


def command(
    port: int, data_dir: Path, upstream: str, document: Path = MAILCHIMP, options: tuple[str, ...] = MAILCHIMP_AUTH
) -> list[str]:
    return [
        sys.executable, "-m", "crank.cli", "serve", "--openapi", str(require(document)), "--base-url", upstream,
        "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir), *options,
    ]  # fmt: skip


@contextmanager
def crank_serving(
    port: int, data_dir: Path, upstream: str, document: Path = MAILCHIMP, options: tuple[str, ...] = MAILCHIMP_AUTH,
    variables: dict[str, str] = SECRET_ENV, log: Path | None = None,
) -> Iterator[str]:  # fmt: skip
    """The command in a subprocess, with these variables besides the environment's (no `CRANK_*` or `OTEL_*` of its
    own) and its log lines in `log`, if given; yields what it printed up to and with the Inspector line, once it
    answers."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("CRANK_", "OTEL_"))}
    with log.open("w") if log is not None else contextlib.nullcontext() as errors:
        process = subprocess.Popen(command(port, data_dir, upstream, document, options), cwd=ROOT,
                                   env={**environment, **variables}, stdout=subprocess.PIPE,
                                   stderr=errors if errors is not None else subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        printed = []
        for line in process.stdout:
            printed.append(line)
            if line.startswith("npx "):
                break
        banner = "".join(printed)
        assert banner.rstrip().endswith("--method tools/list"), banner
        wait_until_answers(f"http://127.0.0.1:{port}/healthz", process, note=banner)
        yield banner
    finally:
        process.terminate()
        process.wait(timeout=20)
        if process.stdout is not None:
            process.stdout.close()


def test_serve_openapi_serves_a_real_document_at_once_and_prints_working_client_setups(tmp_path: Path) -> None:
    port = free_port()
    with prism(MAILCHIMP) as upstream:
        with crank_serving(port, tmp_path / "data", upstream) as banner:
            url = re.search(r"^MCP endpoint: +(\S+)$", banner, re.MULTILINE)
            key = re.search(r"^API key: +(crk_\S+)$", banner, re.MULTILINE)
            assert url is not None and key is not None, banner
            assert url[1] == f"http://127.0.0.1:{port}/mcp/v1/mailchimp-marketing-api/api"
            # 272 operations do not fit the budget as direct tools: the agent is served in discovery mode.
            assert "discovery mode" in banner and "272 operations" in banner, banner
            assert client_setups(url[1], key[1], name="mailchimp-marketing-api") in banner
            inspector = banner.rstrip().splitlines()[-1]
            assert inspector.startswith(f"npx @modelcontextprotocol/inspector --cli {url[1]} --transport http ")
            assert f'--header "Authorization: Bearer {key[1]}"' in inspector

            async def call() -> None:
                async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key[1]}"}) as http:
                    for mode in ("auto", "legacy"):
                        async with Client(streamable_http_client(url[1], http_client=http), mode=mode) as client:
                            names = [tool.name for tool in (await client.list_tools()).tools]
                            found = await client.call_tool(SEARCH_TOOL, {"query": "ping health check"})
                            ping = await client.call_tool(CALL_TOOL, {"name": "get_ping", "arguments": {}})
                        assert names == [SEARCH_TOOL, SCHEMA_TOOL, CALL_TOOL]
                        assert found.structured_content is not None
                        assert "get_ping" in [op["name"] for op in found.structured_content["operations"]]
                        assert not ping.is_error, ping
                        assert ping.structured_content == PING

            import anyio

            anyio.run(call)

            # The Python snippet, exactly as printed.
            snippet = banner[banner.index("import asyncio") : banner.index("asyncio.run(main())") + 19]
            ran = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
            assert ran.returncode == 0, ran.stderr
            assert re.match(rf"3 tools: {SEARCH_TOOL}, {SCHEMA_TOOL}, {CALL_TOOL}", ran.stdout), ran.stdout

            # A second server on the same port says so before printing anything else.
            busy = subprocess.run(command(port, tmp_path / "other", upstream), cwd=ROOT, capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
            assert busy.returncode == 1 and busy.stdout == ""
            assert f"cannot listen on 127.0.0.1:{port}: the port is already in use" in busy.stderr

        # Started again on the same data folder: the same key, and nothing new to publish.
        with crank_serving(port, tmp_path / "data", upstream) as again:
            assert f"API key:        {key[1]}" in again and "/api, version 1:" in again
            response = httpx.post(url[1] + "/call", headers={"Authorization": f"Bearer {key[1]}"},
                                  json={"name": CALL_TOOL, "arguments": {"name": "get_ping", "arguments": {}}},
                                  timeout=30)  # fmt: skip
            assert response.json()["structuredContent"] == PING


def test_workspace_slugs_come_from_the_title() -> None:
    assert workspace_slug("Mailchimp Marketing API") == "mailchimp-marketing-api"
    assert workspace_slug("GitHub v3 REST API") == "github-v3-rest-api"
    assert workspace_slug("***") == "api"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--auth-bearer", "env:A", "--auth-header", "X=env:B"], "give --auth-bearer or --auth-header, not both"),
        (["--auth-header", "env:B"], "expected NAME=REF"),
    ],
)
def test_serve_openapi_refuses_unclear_upstream_credentials(tmp_path: Path, options: list[str], message: str) -> None:
    from click.testing import CliRunner

    from crank.cli import main

    port = free_port()
    args = ["serve", "--openapi", str(MAILCHIMP), "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, *options])
    assert result.exit_code == 2 and message in result.output


def test_upstream_options_need_openapi(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from crank.cli import main

    result = CliRunner().invoke(main, ["serve", "--base-url", "https://api.test", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "go with --openapi" in result.output


def test_a_bearer_reference_reaches_every_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from crank.instant import build_instant
    from crank.settings import given_settings

    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "")  # build_instant gives SHOP_TOKEN to the workspace: undone after

    spec = ROOT / "src" / "crank" / "demo" / "openapi.yaml"
    settings = given_settings(listen="127.0.0.1:9", data_dir=tmp_path)
    auth = {"type": "bearer", "secret": "env:SHOP_TOKEN"}
    built = build_instant(settings, str(spec), base_url="http://shop.test", auth=auth, include=["*book*"])
    assert built.workspace == "demo-bookshop" and built.mode == "direct" and built.version == 1
    assert "2 tools, about " in built.banner() and "(within the budget of 4096)" in built.banner()
    tools = built.server.registry.published()[0].runtime.tools
    assert [tool.tool_name for tool in tools] == ["search_books", "get_book"]
    assert all(
        tool.execution_config.auth is not None and tool.execution_config.auth.secret == "env:SHOP_TOKEN"
        for tool in tools
    )
    monkeypatch.setenv("CRANK_SECRET_ENV_ALLOW", "")  # a new process: the allowance of the run before is gone
    monkeypatch.setenv("SHOP_TOKEN", "set")
    caplog.clear()  # the first run warned rightly: the variable was not set
    with caplog.at_level("WARNING", logger="crank.gateway"):
        again = build_instant(settings, str(spec), base_url="http://shop.test", auth=auth, include=["*book*"])
    assert again.version == 1 and again.api_key == built.api_key  # nothing new to publish; the key is kept
    assert "does not resolve" not in caplog.text  # the variable is given before the published version loads


def test_serve_openapi_needs_the_mcp_role(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from crank.cli import main

    args = ["serve", "--openapi", str(MAILCHIMP), "--role", "admin", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "not with role admin" in result.output


def test_serve_openapi_never_writes_into_a_workspace_it_did_not_create(tmp_path: Path) -> None:
    # A third-party document titled "Shop", served on a registry that holds the tenant `shop`: refused with one
    # line, and `shop`'s operations, agents and keys are as they were; with --workspace it gets its own.
    from click.testing import CliRunner

    from crank.cli import main
    from crank.instant import build_instant
    from crank.settings import given_settings

    settings = given_settings(listen="127.0.0.1:9", data_dir=tmp_path)
    registry = CrankServer(settings).registry
    registry.create_workspace("shop", "Shop")
    registry.put_operation("shop", "get_item", {"protocol": "http", "target": {"url": "http://shop.test/items"},
                                                "description": "One item."})  # fmt: skip
    registry.put_agent("shop", "desk", {"bindings": [{"operation": "get_item"}]})
    registry.publish("shop", "desk")
    registry.create_api_key("shop")
    before = (registry.operations("shop"), registry.agents("shop"), registry.api_keys(), registry.published())
    document = (ROOT / "src" / "crank" / "demo" / "openapi.yaml").read_text()
    shop = tmp_path / "shop.yaml"
    shop.write_text(re.sub(r"(?m)^  title: .*$", "  title: Shop", document, count=1))
    port = free_port()
    args = ["serve", "--openapi", str(shop), "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, "--base-url", "http://other.test"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: workspace 'shop' (the name made from the document's title 'Shop') already exists and was not made "
        "by crank serve --openapi, which never writes into a workspace it did not create: choose another name with "
        "--workspace NAME"
    )
    assert (registry.operations("shop"), registry.agents("shop"), registry.api_keys(),
            registry.published()) == before  # fmt: skip
    built = build_instant(settings, str(shop), base_url="http://other.test", workspace="other-shop")
    assert built.workspace == "other-shop" and registry.workspace("other-shop")["created_by"] == "crank serve --openapi"
    again = build_instant(settings, str(shop), base_url="http://other.test", workspace="other-shop")
    assert again.version == built.version  # its own workspace: re-imported, nothing changed to publish


def test_serve_openapi_serves_a_description_without_the_operation_it_cannot_call_and_says_which(
    tmp_path: Path,
) -> None:
    """LibreTranslate's file translation describes its multipart body as a string, which Crank cannot send as
    fields: the other operations are served, the banner names the skipped one, and `strict` keeps the refusal."""
    from crank.exceptions import SpecError
    from crank.instant import build_instant
    from crank.settings import given_settings
    from tests.realapis import LIBRETRANSLATE, require

    settings = given_settings(listen="127.0.0.1:9", data_dir=tmp_path)
    with pytest.raises(SpecError, match="include pattern '!post_translate_file'"):
        build_instant(settings, str(require(LIBRETRANSLATE)), strict=True)
    built = build_instant(settings, str(LIBRETRANSLATE))
    assert len(built.changes.names) == 5 and built.mode == "direct"
    banner = built.banner()
    assert "Skipped:        1 operation(s) Crank cannot call (--strict refuses them):" in banner
    assert (
        "  skipped post_translate_file (POST /translate_file): its multipart/form-data body is described as string, "
        "not as the object of fields Crank sends; --include '!post_translate_file' leaves it out quietly"
    ) in banner


PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

# A document served with no --include or --strict, its options (upstream credentials), the secrets they name, the
# calls a model makes (tool, arguments), and a request Prism must refuse, sent past Crank: (method, path, headers,
# body, status).
BODIES = {
    "asana-multipart": (
        "ASANA", ("--auth-scheme", "personalAccessToken=env:ASANA_TOKEN"), {"ASANA_TOKEN": "0/pat"},
        [("create_attachment_for_object",
          {"parent": "12345", "file": "data:text/plain;name=notes.txt;base64,aGVsbG8gQXNhbmE="})],
        # A JSON body where multipart is due: the 400 the description declares.
        ("POST", "/attachments", {"Content-Type": "application/json", "Authorization": "Bearer 0/pat"}, b"{}", 400),
    ),
    "twilio-form": (
        "TWILIO_ACCOUNTS", ("--auth-scheme", "accountSid_authToken=env:TWILIO_AUTH"), {"TWILIO_AUTH": "AC1:secret"},
        [("create_safelist", {"PhoneNumber": "+15005550006"})],
        ("POST", "/v1/SafeList/Numbers", {"Content-Type": "application/x-www-form-urlencoded",
                                          "Authorization": "Basic QUMxOnNlY3JldA=="}, b"Other=1", 422),
    ),
    "readme-files": (
        "FILE_UPLOADS", (), {},
        [("post_anything_multipart_formdata",
          {"orderId": 7, "userId": 8, "documentFile": f"data:image/png;name=dot.png;base64,{PNG_BASE64}"}),
         ("post_anything_image_png", {"body": PNG_BASE64})],
        # Not `put_anything_multipart_formdata` (an array of files, one part each, as RFC 7578 writes them): Prism
        # 5.16 keeps only the last part of a name (stoplightio/prism pull request 2654, open). tests/gateway/
        # test_bodies.py reads such parts back with Starlette's parser instead.
        ("POST", "/anything/multipart-formdata", {"Content-Type": "multipart/form-data; boundary=b"},
         b'--b\r\nContent-Disposition: form-data; name="orderId"\r\n\r\nseven\r\n--b--\r\n', 422),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BODIES))
def test_serve_openapi_calls_forms_and_uploads_through_the_gateway_and_prism_takes_them(
    case: str, tmp_path: Path
) -> None:
    """Real descriptions with form, multipart and file bodies, served by `crank serve --openapi` with no
    --include or --strict: nothing is skipped, and each call, made with the official client as a model would
    (files as base64 or data: URLs), reaches Prism, which validates every request against the description. That
    Prism checks such bodies is shown too: a wrong one, sent to it directly, is refused."""
    import anyio

    from tests import realapis

    name, options, secrets, calls, wrong = BODIES[case]
    document = getattr(realapis, name)
    port = free_port()
    with prism(document) as upstream, crank_serving(port, tmp_path, upstream, document, options, secrets) as banner:
        assert "Skipped:" not in banner, banner
        url = re.search(r"^MCP endpoint: +(\S+)$", banner, re.MULTILINE)
        key = re.search(r"^API key: +(crk_\S+)$", banner, re.MULTILINE)
        assert url is not None and key is not None, banner
        discovery = "discovery mode" in banner

        async def call() -> list[Any]:
            results = []
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key[1]}"}) as http:
                async with Client(streamable_http_client(url[1], http_client=http)) as client:
                    for tool, arguments in calls:
                        if discovery:
                            results.append(await client.call_tool(CALL_TOOL, {"name": tool, "arguments": arguments}))
                        else:
                            results.append(await client.call_tool(tool, arguments))
            return results

        for result in anyio.run(call):
            assert not result.is_error, result.content
        method, path, headers, body, status = wrong
        refused = httpx.request(method, upstream + path, headers=headers, content=body, timeout=30)
        assert refused.status_code == status, refused.text
