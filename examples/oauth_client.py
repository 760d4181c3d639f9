"""Sign in with OAuth and call a tool through Crank, with the official MCP SDK's OAuth client.

    python examples/oauth_client.py URL [TOOL [ARGUMENTS_JSON]]

URL is an MCP endpoint that takes access tokens (a gateway agent whose workspace has an OAuth policy, or an
in-process endpoint with `MCPConfig(oauth=...)`). The SDK reads the endpoint's 401 challenge and its protected
resource metadata (RFC 9728), finds the authorization server, registers itself there (dynamic client
registration), and asks you to sign in: the sign-in page opens in your browser (the URL is printed too), and the
authorization server sends the browser back to a one-shot listener on 127.0.0.1 (`CALLBACK_PORT`, 8765 by
default). It then lists the tools and, given TOOL, calls it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from mcp import Client


class MemoryStorage:
    """Where the SDK keeps the client's registration and tokens (a real client would keep them on disk)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Callback:
    """A one-shot HTTP listener on loopback for the redirect that carries the authorization code."""

    def __init__(self, port: int) -> None:
        self.query: dict[str, str] = {}
        self.done = threading.Event()
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
                where = urlsplit(self.path)
                if where.path != "/callback":  # a browser also asks for /favicon.ico: not the redirect
                    self.send_error(404)
                    return
                callback.query = {name: values[0] for name, values in parse_qs(where.query).items()}
                self.send_response(200)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.end_headers()
                self.wfile.write(b"Signed in: you may close this window.")
                callback.done.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", port), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_port}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    async def wait(self, timeout: float = 300) -> AuthorizationCodeResult:
        if not await asyncio.to_thread(self.done.wait, timeout):
            raise TimeoutError("nobody signed in")
        self.done.clear()
        if "code" not in self.query:
            raise RuntimeError(f"the sign-in failed: {self.query.get('error_description') or self.query}")
        return AuthorizationCodeResult(
            code=self.query["code"], state=self.query.get("state"), iss=self.query.get("iss")
        )


async def main(url: str, tool: str | None, arguments: dict[str, Any]) -> None:
    callback = Callback(int(os.environ.get("CALLBACK_PORT", "8765")))

    async def open_browser(authorization_url: str) -> None:
        print(f"Sign in at: {authorization_url}", flush=True)
        if not os.environ.get("NO_BROWSER"):
            webbrowser.open(authorization_url)

    metadata = OAuthClientMetadata(client_name="Crank example", redirect_uris=[AnyUrl(callback.uri)])
    auth = OAuthClientProvider(url, metadata, MemoryStorage(), redirect_handler=open_browser,
                               callback_handler=callback.wait)  # fmt: skip
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            listed = await client.list_tools()
            print("tools:", ", ".join(tool.name for tool in listed.tools), flush=True)
            if tool is not None:
                result = await client.call_tool(tool, arguments)
                print(json.dumps(result.structured_content), flush=True)
    callback.server.shutdown()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None,
                     json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}))  # fmt: skip
