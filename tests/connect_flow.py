"""The connect flow of users' own connections, as tests play it (tests/sources/test_connect.py, and the replicas of
tests/deploy/test_connections.py): an API that checks its own authorization server's tokens, a person in front of
Debian's chromium (Playwright) signing in and consenting at the providers, and a client without capabilities."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import jwt
from playwright.sync_api import Page, sync_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from crank.registry.runtime import origin_of

API_RESOURCE = "https://api.people.example"


def register(issuer: str, redirect_uri: str, grants: list[str]) -> tuple[str, str]:
    """A confidential client of the provider (dynamic registration, RFC 7591)."""
    metadata = httpx.get(issuer + "/.well-known/openid-configuration").json()
    answer = httpx.post(metadata["registration_endpoint"], json={
        "redirect_uris": [redirect_uri], "application_type": "native", "grant_types": grants,
        "token_endpoint_auth_method": "client_secret_basic", "response_types": ["code"],
    })  # fmt: skip
    assert answer.status_code == 201, answer.text
    return answer.json()["client_id"], answer.json()["client_secret"]


@dataclass
class PeopleAPI:
    """An API that takes its authorization server's tokens for its resource: it checks each one (signature,
    issuer, audience) and answers who the user is (and who acts for them, after a token exchange). `seen` keeps
    every bearer token it received."""

    issuer: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)
    """Tokens it answers 401 (revoked at the API, say)."""
    _keys: jwt.PyJWKClient | None = None

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/me", self.me, methods=["GET", "DELETE"])])

    async def me(self, request: Request) -> Response:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self._keys is None:
            self._keys = jwt.PyJWKClient(self.issuer + "/jwks")
        try:
            key = await anyio.to_thread.run_sync(self._keys.get_signing_key_from_jwt, token)
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=API_RESOURCE, issuer=self.issuer)
        except jwt.PyJWTError as exc:
            self.seen.append({"token": token, "refused": str(exc)})
            return JSONResponse({"error": "invalid_token"}, 401)
        self.seen.append({"token": token, "claims": claims, "method": request.method})
        if token in self.refused:
            return JSONResponse({"error": "invalid_token"}, 401)
        acting = claims.get("act", {}).get("sub")  # a token exchange's actor (RFC 8693 4.1)
        return JSONResponse({"user": claims["sub"], **({"acting": acting} if acting else {})})


@dataclass
class Visit:
    """What a browser saw following a link: the heading of the page it ended on, and every URL it went through."""

    heading: str
    text: str
    urls: list[str]
    cookies: dict[str, str] = field(default_factory=dict)
    """The browser's cookies when it stopped, by name."""


def browse(url: str, users: dict[str, str], *, stop_at: str | None = None) -> Visit:
    """Open `url` in chromium, sign in at each provider as `users[its origin]` and consent, until a page of
    neither provider (or, with `stop_at`, a page of that origin, where it does nothing). `urls`: every request the
    page made, each hop of a redirect included."""
    chromium = shutil.which("chromium")
    assert chromium is not None, "Debian's chromium is missing: scripts/install-services installs it"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_context().new_page()
            urls: list[str] = []
            page.on("request", lambda request: urls.append(request.url))
            page.goto(url)
            through_providers(page, users, stop_at)
            heading = page.locator("h1").first.inner_text() if page.locator("h1").count() else ""
            cookies = {str(cookie.get("name")): str(cookie.get("value")) for cookie in page.context.cookies()}
            return Visit(heading, page.locator("body").inner_text(), urls, cookies)
        finally:
            browser.close()


def through_providers(page: Page, users: dict[str, str], stop_at: str | None) -> None:
    for _ in range(8):
        page.wait_for_load_state()
        origin = origin_of(page.url)
        if origin not in users or origin == stop_at:
            return
        if page.locator('input[name="login"]').count():
            page.locator('input[name="login"]').fill(users[origin])
            page.locator('input[name="password"]').fill("any password")
        with page.expect_navigation():  # the provider's next page, or the redirect onwards
            page.locator('button[type="submit"]').first.click()


def call_tool(url: str, token: str) -> dict[str, Any]:
    """One `tools/call` of `whoami` by a client that declares no capability (no URL elicitation)."""
    headers = {"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
    result: dict[str, Any] = httpx.post(url, json=body, headers=headers, timeout=30).json()["result"]
    return result
