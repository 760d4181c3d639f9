"""A real OAuth authorization server for the tests, and a user who signs in at it.

`authorization_server()` runs src/crank/demo/oauth_server.mjs (npm `oidc-provider`, a pinned devDependency that
`scripts/install --node` installs, on the project's Node 22) on a free loopback port and yields its issuer.
`sign_in` plays the person in front of the browser: it follows the authorization URL a client would open,
posts the provider's development login and consent forms, and returns what the provider redirects back to the
client with. `SignIn` and `MemoryTokenStorage` plug that into the MCP SDK's `OAuthClientProvider`;
`obtain_tokens` runs the whole authorization code flow (dynamic registration, PKCE) without the SDK, for tests
that need a token of a particular kind.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx
import pytest
from examples.oauth_client import MemoryStorage
from mcp.shared.auth import AuthorizationCodeResult

from crank.demo import oauth as demo_oauth

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules" / ".bin" / "node"
PROVIDER = ROOT / "node_modules" / "oidc-provider"
REDIRECT_URI = "http://127.0.0.1/callback"
"""Where the provider sends the browser back: never contacted, `sign_in` stops at the redirect that names it."""
TIMEOUT = 10.0


@contextlib.contextmanager
def authorization_server(*, timeout: float = 30) -> Iterator[str]:
    """Run the local authorization server (crank.demo.oauth) until the block ends; yields its issuer
    (`http://127.0.0.1:<port>`). The test fails, not skips, when the install step did not fetch Node or the
    provider."""
    if not NODE.exists() or not PROVIDER.is_dir():
        pytest.fail("Node 22 or oidc-provider is missing: run scripts/install --node")
    with demo_oauth.authorization_server(timeout=timeout) as issuer:
        yield issuer


# -- the user at the browser ------------------------------------------------------------------------------------


class SignInError(AssertionError):
    """The provider did not send the browser back with a code (an `error=` redirect, or a page it cannot post)."""


async def sign_in(
    authorization_url: str, *, redirect_uri: str = REDIRECT_URI, user: str = "alice", max_steps: int = 20
) -> AuthorizationCodeResult:
    """Open `authorization_url` as a browser would (cookies kept, redirects followed one by one), sign in as
    `user` on the provider's login form, accept its consent form, and return the `code`, `state` and `iss` of the
    redirect to `redirect_uri`, which is never contacted."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=TIMEOUT) as browser:
        url = authorization_url
        for _ in range(max_steps):
            if url.split("?", 1)[0] == redirect_uri:
                return _redirected(url)
            response = await browser.get(url)
            if response.is_redirect:
                url = urljoin(str(response.url), response.headers["location"])
                continue
            if response.status_code != 200:
                raise SignInError(f"GET {url}: {response.status_code} {response.text[:2000]}")
            prompt, action = _form(response.text, str(response.url))
            fields = {"prompt": prompt}
            if prompt == "login":
                fields |= {"login": user, "password": "any password"}
            elif prompt != "consent":
                raise SignInError(f"{url}: a form for {prompt!r}, which this user does not know")
            posted = await browser.post(action, data=fields)
            if not posted.is_redirect:
                raise SignInError(f"POST {action} ({prompt}): {posted.status_code} {posted.text[:2000]}")
            url = urljoin(str(posted.url), posted.headers["location"])
        raise SignInError(f"no redirect to {redirect_uri} after {max_steps} steps (last: {url})")


def _form(page: str, url: str) -> tuple[str, str]:
    """The prompt and the absolute action URL of the provider's interaction form."""
    prompt = re.search(r'name="prompt"\s+value="([^"]*)"', page)
    action = re.search(r'<form[^>]*\baction="([^"]*)"', page)
    if prompt is None or action is None:
        raise SignInError(f"{url}: no interaction form in the page: {page[:2000]}")
    return prompt.group(1), urljoin(url, html.unescape(action.group(1)))


def _redirected(url: str) -> AuthorizationCodeResult:
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    if "code" not in query:
        raise SignInError(f"the provider sent the browser back without a code: {query}")
    return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


class SignIn:
    """The MCP SDK's `redirect_handler` and `callback_handler` for one user: `redirect` signs in at once at the
    URL the client would open, and `callback` hands the client what the provider redirected back with. `urls`
    keeps every authorization URL the client opened (a step-up opens a second one)."""

    def __init__(self, *, user: str = "alice", redirect_uri: str = REDIRECT_URI) -> None:
        self.user = user
        self.redirect_uri = redirect_uri
        self.urls: list[str] = []
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.urls.append(authorization_url)
        self._result = await sign_in(authorization_url, redirect_uri=self.redirect_uri, user=self.user)

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        if result is None:
            raise SignInError("the client asked for the callback before opening an authorization URL")
        return result

    def requested(self, index: int = -1) -> dict[str, str]:
        """The query parameters of an authorization URL the client opened (the last, by default)."""
        return {name: values[0] for name, values in parse_qs(urlsplit(self.urls[index]).query).items()}


MemoryTokenStorage = MemoryStorage
"""The SDK's `TokenStorage`, in memory: examples/oauth_client.py's, which the example tests run as written."""


# -- the flow without the SDK -----------------------------------------------------------------------------------


async def obtain_tokens(
    issuer: str,
    *,
    scope: str,
    resource: str | None = None,
    nonce: str | None = None,
    user: str = "alice",
) -> dict[str, Any]:
    """The token response of a whole authorization code flow at `issuer`: a public client registered for it
    (RFC 7591), PKCE (S256), `user` signing in, and the code exchanged for tokens, for `resource` when given
    (RFC 8707, at both endpoints)."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        metadata = (await http.get(issuer + "/.well-known/openid-configuration")).raise_for_status().json()
        registration = await http.post(metadata["registration_endpoint"], json={
            "redirect_uris": [REDIRECT_URI], "application_type": "native", "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        })  # fmt: skip
        assert registration.status_code == 201, registration.text
        client_id = registration.json()["client_id"]
        verifier = secrets.token_urlsafe(64)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        state = secrets.token_urlsafe(16)
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT_URI, "scope": scope,
                  "state": state, "code_challenge": challenge, "code_challenge_method": "S256"}  # fmt: skip
        if resource is not None:
            params["resource"] = resource
        if nonce is not None:
            params["nonce"] = nonce
        result = await sign_in(f"{metadata['authorization_endpoint']}?{urlencode(params)}", user=user)
        assert result.state == state and result.iss == issuer, result
        exchange = {"grant_type": "authorization_code", "code": result.code, "redirect_uri": REDIRECT_URI,
                    "client_id": client_id, "code_verifier": verifier}  # fmt: skip
        if resource is not None:
            exchange["resource"] = resource
        answer = await http.post(metadata["token_endpoint"], data=exchange)
        assert answer.status_code == 200, answer.text
        tokens: dict[str, Any] = answer.json()
        return tokens
