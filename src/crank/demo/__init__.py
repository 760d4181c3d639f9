"""`crank demo`: the gateway with a demo workspace fronting a small shipped REST API (`api.py`).

One process, one port: the demo API is served under `/demo-api` beside the gateway, the demo catalog
(`catalog.yaml`, importing `openapi.yaml`) is applied to the registry in the demo's data folder, and the
MCP URL, the API key and a ready-to-paste client configuration are printed. The folder
(`~/.local/share/crank-demo` unless `--data-dir` says otherwise) keeps the registry, the key and the
admin token between starts, so a client configured once keeps working, and the CLI reads the same
registry with `CRANK_DATA_DIR=<folder>`.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from crank.admin.actions import kept_api_key
from crank.admin.apply import apply_catalog, load_catalog_file
from crank.admin.clients import client_config
from crank.demo.api import create_app
from crank.gateway.egress import EgressPolicy
from crank.server import CrankServer
from crank.settings import given_settings
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


def build_demo(listen: str, data_dir: Path) -> DemoServer:
    """The demo app for `listen` (host:port), with its registry under `data_dir`."""
    # Only what is given here: a CRANK_DATABASE_URL (or any CRANK_*) of the environment must not make the
    # demo write into a real registry.
    settings = given_settings(listen=listen, data_dir=data_dir, log_format="text", poll_interval=0.2)
    # The demo's upstream is the API it serves itself: its own address and port, and nothing else besides
    # public addresses, may be called (crank.gateway.egress).
    server = CrankServer(settings, egress=EgressPolicy([settings.listen], listen=[settings.listen]))
    base = f"http://{settings.listen}"
    catalog = load_catalog_file(CATALOG, variables={"CRANK_DEMO_API": base + API_PATH})
    apply_catalog(server.registry, catalog, base_dir=CATALOG.parent, egress=server.egress)
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


def run_demo(listen: str, data_dir: Path | None = None) -> None:
    from crank.telemetry import configure_logging
    from crank.wire.listen import bind_listener, serve_on

    settings = given_settings(listen=listen)  # checks the address before anything is built or printed
    sock = bind_listener(settings.host, settings.port)
    folder = (data_dir or demo_data_dir()).resolve()
    demo = build_demo(listen, folder)
    configure_logging("text", "info")
    print(f"Demo REST API:  http://{listen}{API_PATH}/books")
    print(f"MCP endpoint:   {demo.mcp_url}")
    print(f"API key:        {demo.api_key}")
    print(f"Console:        http://{listen}/console (sign in with the admin token in {folder / 'admin-token'})")
    print(f"Admin API:      http://{listen}/admin/v1 (the same token)")
    print(f"Data folder:    {folder} (kept between starts; the key stays valid)")
    print("\nClient configuration (paste into your MCP client's settings):\n")
    print(demo.client_config())
    print(f"\nTry it:\n  curl -s {demo.mcp_url}/tools -H 'Authorization: Bearer {demo.api_key}'")
    cli = f"CRANK_DATA_DIR={folder} {crank_command()} agent list demo"
    print(f"\nThe CLI on the demo's registry (another terminal):\n  {cli}\n", flush=True)
    serve_on(demo.app, sock)
