"""`crank demo`: the gateway with a demo workspace fronting a small shipped REST API (`api.py`).

One process, one port: the demo API is served under `/demo-api` beside the gateway, the demo catalog
(`catalog.yaml`, importing `openapi.yaml`) is applied to the registry in the demo's data folder, and the
MCP URL, the API key and a ready-to-paste client configuration are printed. The folder
(`~/.local/share/crank-demo` unless `--data-dir` says otherwise) keeps the registry, the key and the
admin token between starts, so a client configured once keeps working, and the CLI reads the same
registry with `CRANK_DATA_DIR=<folder>`.

The demo honours the `CRANK_*` settings a user gives it (the environment, `CRANK_SETTINGS_FILE`, the demo
folder's `crank.toml`: `CRANK_PUBLIC_URL`, `CRANK_EGRESS_ALLOW`, `CRANK_ADMIN_TOKEN`, request and tool limits,
logging...), except where it keeps its state and what makes it the demo: its registry is always the SQLite file
in its own folder and its state store is in-process, so a deployment's `CRANK_DATABASE_URL` or `CRANK_REDIS_URL`
never makes the demo write into a real registry; it serves every role in one process; and with `--oauth` its
resources are named from its own address. The listening socket's connection limits are uvicorn's defaults.

`--oauth` (`crank.demo.oauth`) also runs a local authorization server and makes the demo workspace take its
access tokens beside the API key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from crank.admin.actions import kept_api_key
from crank.admin.apply import apply_catalog, load_catalog_file
from crank.admin.clients import client_config
from crank.demo.api import create_app
from crank.gateway.egress import EgressPolicy
from crank.registry.runtime import OAuthPolicy
from crank.server import CrankServer
from crank.settings import Settings, given_settings, load_settings
from crank.types import ASGIApp, Receive, Scope, Send

__all__ = ["CATALOG", "DemoServer", "build_demo", "demo_data_dir", "run_demo"]

CATALOG = Path(__file__).parent / "catalog.yaml"
API_PATH = "/demo-api"
KEY_FILE = "demo-api-key"


@dataclass
class DemoServer:
    app: ASGIApp
    server: CrankServer
    mcp_url: str
    api_key: str

    def client_config(self) -> str:
        """The `mcpServers` entry most MCP clients accept (Claude Code's .mcp.json, Cursor, VS Code...)."""
        return client_config(self.mcp_url, self.api_key, name="crank-demo")


def demo_settings(listen: str, data_dir: Path, *, public_url: str | None = None) -> Settings:
    """The user's `CRANK_*` settings with the demo's address and folder, its registry in that folder, its state
    in-process and every role in one process (the banner names the console and the admin API). `public_url`: what
    the OAuth demo names its resources from, whatever the user set, since its client connects to the demo itself."""
    settings = load_settings(listen=listen, data_dir=data_dir)
    kept: dict[str, object] = {"database_url": None, "redis_url": None, "role": "all"}
    if public_url is not None:
        kept["public_url"] = public_url
    for name, value in _DEMO_DEFAULTS.items():
        if name not in settings.model_fields_set:  # neither the environment nor a settings file gave it
            kept[name] = value
    return settings.model_copy(update=kept)


# Log lines a person reads in the terminal, and a catalog change served within a fifth of a second.
_DEMO_DEFAULTS = {"log_format": "text", "poll_interval": 0.2}


def build_demo(listen: str, data_dir: Path, *, issuer: str | None = None) -> DemoServer:
    """The demo app for `listen` (host:port), with its registry under `data_dir`. `issuer`: an authorization server
    whose access tokens the demo workspace takes too (`crank demo --oauth`)."""
    base = f"http://{listen}"
    settings = demo_settings(listen, data_dir, public_url=base if issuer is not None else None)
    # The demo's upstream is the API it serves itself: its own address and port, the issuer it signs users in at,
    # what the user allows, and nothing else besides public addresses, may be called (crank.gateway.egress).
    allowed = [settings.listen, *settings.egress_allow.split(","), *([_host_port(issuer)] if issuer else [])]
    server = CrankServer(settings, egress=EgressPolicy(allowed, listen=[settings.listen]))
    catalog = load_catalog_file(CATALOG, variables={"CRANK_DEMO_API": base + API_PATH})
    apply_catalog(server.registry, catalog, base_dir=CATALOG.parent, egress=server.egress)
    if issuer is not None:
        server.registry.set_workspace_oauth("demo", demo_oauth_policy(issuer))
    key = kept_api_key(server.registry, "demo", data_dir / KEY_FILE)
    api = create_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and (path == API_PATH or path.startswith(API_PATH + "/")):
            scope = {**scope, "path": path[len(API_PATH) :] or "/", "root_path": scope.get("root_path", "") + API_PATH}
            await api(scope, receive, send)
        else:
            await server(scope, receive, send)

    return DemoServer(app, server, f"{base}/mcp/v1/demo/bookshop", key)


def demo_oauth_policy(issuer: str) -> OAuthPolicy:
    """Tokens of `issuer` open the demo's agents with `tools:read`; its tools that write need `tools:write` too, and
    the one that destroys `tools:delete`: the scopes the local authorization server grants. API keys keep working."""
    return OAuthPolicy(
        issuers=(issuer,), agent_scopes={"*": ("tools:read",)},
        tool_scopes={"write": ("tools:write",), "destructive": ("tools:delete",)},
    )  # fmt: skip


def _host_port(url: str) -> str:
    split = urlsplit(url)
    return f"{split.hostname}:{split.port}"


def crank_command() -> str:
    """How to run this very `crank` from another terminal: `crank` when that name finds it on the PATH, else its
    path (`make run` runs the project virtualenv's `.venv/bin/crank`, which a new terminal does not find)."""
    running = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("crank")
    if running is None or running.name != "crank" or (found is not None and Path(found).resolve() == running):
        return "crank"
    try:
        return str(running.relative_to(Path.cwd()))
    except ValueError:
        return str(running)


def demo_data_dir() -> Path:
    """The demo's own folder, beside (never inside) the one `crank serve` uses by default."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "crank-demo"


def run_demo(listen: str, data_dir: Path | None = None, *, oauth: bool = False) -> None:
    from crank.demo.oauth import authorization_server
    from crank.telemetry import configure_logging
    from crank.wire.listen import bind_listener, serve_on

    settings = given_settings(listen=listen)  # checks the address before anything is built or printed
    sock = bind_listener(settings.host, settings.port)
    folder = (data_dir or demo_data_dir()).resolve()
    with contextlib.ExitStack() as stack:
        issuer = stack.enter_context(authorization_server()) if oauth else None
        demo = build_demo(listen, folder, issuer=issuer)
        configure_logging(demo.server.settings.log_format, demo.server.settings.log_level)
        _banner(demo, listen, folder, issuer)
        serve_on(demo.app, sock)


def _banner(demo: DemoServer, listen: str, folder: Path, issuer: str | None) -> None:
    print(f"Demo REST API:  http://{listen}{API_PATH}/books")
    print(f"MCP endpoint:   {demo.mcp_url}")
    print(f"API key:        {demo.api_key}")
    if issuer is not None:
        print(f"Sign-in:        {issuer} (a local authorization server: any name and password sign in)")
    token = "CRANK_ADMIN_TOKEN" if demo.server.settings.admin_token is not None else f"{folder / 'admin-token'}"
    print(f"Console:        http://{listen}/console (sign in with the admin token in {token})")
    print(f"Admin API:      http://{listen}/admin/v1 (the same token)")
    print(f"Data folder:    {folder} (kept between starts; the key stays valid)")
    print("\nClient configuration (paste into your MCP client's settings):\n")
    print(demo.client_config())
    print(f"\nTry it:\n  curl -s {demo.mcp_url}/tools -H 'Authorization: Bearer {demo.api_key}'")
    if issuer is not None:
        print(f"\nSign in with OAuth instead of the key (your browser opens):\n  python examples/oauth_client.py "
              f"{demo.mcp_url} search_books '{{\"query\": \"kobzar\"}}'")  # fmt: skip
    cli = f"CRANK_DATA_DIR={folder} {crank_command()} agent list demo"
    print(f"\nThe CLI on the demo's registry (another terminal):\n  {cli}\n", flush=True)
