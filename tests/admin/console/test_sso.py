"""Single sign-on to the console through a real OpenID provider (oidc-provider, src/crank/demo/oauth_server.mjs), in
Debian's Chromium: an administrator signs in, anyone else is refused, and a sign-in that was not started in
this browser is refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from crank.admin.console import Console
from crank.admin.console.sso import SingleSignOn
from crank.gateway.client import UpstreamClient
from crank.gateway.tokens import MAX_DOCUMENT_BYTES, TokenVerifier
from crank.registry import Registry
from crank.wire.asgi import serve_lifespan
from tests.admin.console.browsing import look
from tests.admin.console.conftest import TOKEN, fill
from tests.oauth import authorization_server


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with authorization_server() as url:
        yield url


def registered(issuer: str, redirect_uri: str) -> tuple[str, str]:
    """A confidential client of the provider for the console (dynamic registration, RFC 7591)."""
    metadata = httpx.get(issuer + "/.well-known/openid-configuration").json()
    answer = httpx.post(metadata["registration_endpoint"], json={
        "redirect_uris": [redirect_uri], "application_type": "native", "grant_types": ["authorization_code"],
        "token_endpoint_auth_method": "client_secret_basic", "response_types": ["code"],
    })  # fmt: skip
    assert answer.status_code == 201, answer.text
    return answer.json()["client_id"], answer.json()["client_secret"]


@pytest.fixture
def sso_console(issuer: str, sqlite_registry: Registry, serve: Callable[..., str]) -> str:
    fill(sqlite_registry)
    holder: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:  # the console, made once its URL is known
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, shutdown=lambda: holder["console"].aclose())
        else:
            await holder["console"](scope, receive, send)

    base = serve(app)
    client_id, secret = registered(issuer, base + "/console/login/callback")
    verifier = TokenVerifier(UpstreamClient(max_response_bytes=MAX_DOCUMENT_BYTES))
    sso = SingleSignOn(issuer=issuer, client_id=client_id, client_secret=secret, admins=frozenset({"alice"}),
                       verifier=verifier, admin_token=TOKEN)  # fmt: skip
    holder["console"] = Console(sqlite_registry, token=TOKEN, sso=sso)
    SSO_OF[base + "/console"] = sso
    return base + "/console"


SSO_OF: dict[str, SingleSignOn] = {}


def at_the_provider(page: Page, user: str) -> None:
    """Sign in as `user` on the provider's own pages (its login form, then its consent form)."""
    page.locator('input[name="login"]').fill(user)
    page.locator('input[name="password"]').fill("any password")
    page.locator('button[type="submit"]').click()
    page.locator('button[type="submit"]').click()  # consent


def test_an_administrator_signs_in_through_the_provider(page: Page, sso_console: str) -> None:
    page.goto(sso_console + "/")
    page.get_by_role("link", name="Sign in with").click()
    at_the_provider(page, "alice")
    expect(page.get_by_role("heading", name="Workspaces")).to_be_visible()  # the signed-in page moved on
    expect(page.get_by_text("Signed in: alice")).to_be_visible()
    page.goto(sso_console + "/login/callback?error=%3Cb%3Eanything%3C/b%3E")  # a link anyone can send
    expect(page.get_by_role("alert")).to_have_text("The provider refused the sign-in.")
    page.goto(sso_console + "/workspaces/shop")
    expect(page.get_by_role("heading", name="Agents")).to_be_visible()  # still signed in
    SSO_OF[sso_console].admins = frozenset({"bob"})  # alice is no longer an administrator
    page.goto(sso_console + "/workspaces/shop")
    expect(page).to_have_url(sso_console + "/login?next=/console/workspaces/shop")


def test_someone_else_is_refused_and_a_forged_callback_too(page: Page, sso_console: str) -> None:
    page.goto(sso_console + "/login")
    page.get_by_role("link", name="Sign in with").click()
    at_the_provider(page, "mallory")
    expect(page.get_by_role("alert")).to_have_text("mallory signed in, but is not an administrator of this Crank.")
    page.goto(sso_console + "/")
    expect(page).to_have_url(sso_console + "/login?next=/console/")  # no session
    page.goto(sso_console + "/login/callback?code=stolen&state=guessed")
    expect(page.get_by_role("alert")).to_contain_text("was not started here")
    look(page, "login-refused")


def test_an_admin_entry_is_a_subject_or_a_verified_address_never_both() -> None:
    from crank.admin.console.sso import SignInRefusedError

    sso = SingleSignOn(issuer="https://id.example", client_id="c", client_secret="s", admin_token=TOKEN,
                       admins=frozenset({"alice@corp.example", "bob"}),
                       verifier=TokenVerifier(UpstreamClient()))  # fmt: skip
    assert (
        sso._administrator({"sub": "x1", "email": "alice@corp.example", "email_verified": True}) == "alice@corp.example"
    )
    assert sso._administrator({"sub": "bob"}) == "bob"
    for claims in ({"sub": "alice@corp.example"}, {"sub": "x2", "email": "alice@corp.example"},
                   {"sub": "x3", "email": "bob", "email_verified": True}):  # fmt: skip
        with pytest.raises(SignInRefusedError, match="is not an administrator"):
            sso._administrator(claims)
    with pytest.raises(ValueError, match="must be an https URL"):
        SingleSignOn(issuer="http://id.example", client_id="c", client_secret="s", admins=frozenset({"bob"}),
                     verifier=TokenVerifier(UpstreamClient()), admin_token=TOKEN)  # fmt: skip
