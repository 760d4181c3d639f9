"""The console's sign-in steps against the loopback test issuer (tests/gateway/issuer.py): the ID token's checks,
the pending sign-in's cookie, and each way a token endpoint can fail."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from crank.admin.console.sso import SignInRefusedError, SingleSignOn
from crank.exceptions import AuthChallengeError
from crank.gateway.client import UpstreamClient
from crank.gateway.tokens import TokenVerifier
from tests.admin.console.conftest import TOKEN
from tests.gateway.issuer import Issuer

pytestmark = pytest.mark.anyio
CLIENT, SECRET = "crank console", "s3cret:+%"  # characters that must be form-encoded in Basic credentials
REDIRECT = "http://127.0.0.1/console/login/callback"


class Provider(Issuer):
    """The test issuer with a token endpoint that answers what the test sets (`answer`)."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: Callable[[dict[str, str]], Response] = self.id_token_answer
        self.nonce = ""
        self.app.router.routes.append(Route("/token", self.token_endpoint, methods=["POST"]))

    async def metadata(self, request: Request) -> Response:
        answer = await super().metadata(request)
        if not isinstance(answer, JSONResponse):
            return answer
        document = json.loads(bytes(answer.body))
        return JSONResponse({**document, "authorization_endpoint": self.url + "/authorize"})

    def id_token(self, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "sub": "alice", "aud": CLIENT, "iat": now, "exp": now + 300, "nonce": self.nonce,
                   **claims}  # fmt: skip
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})

    def id_token_answer(self, form: dict[str, str]) -> Response:
        return JSONResponse({"access_token": "a", "token_type": "Bearer", "id_token": self.id_token()})

    async def token_endpoint(self, request: Request) -> Response:
        expected = "Basic " + base64.b64encode(b"crank+console:s3cret%3A%2B%25").decode()
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": "invalid_client"}, 401)
        form = {name: str(value) for name, value in (await request.form()).items()}
        return self.answer(form)


@pytest.fixture
async def provider(serve: Callable[..., str]) -> Iterator[tuple[Provider, SingleSignOn]]:
    issuer = Provider()
    issuer.url = serve(issuer.app)
    client = UpstreamClient()
    sso = SingleSignOn(issuer=issuer.url, client_id=CLIENT, client_secret=SECRET, admins=frozenset({"alice"}),
                       verifier=TokenVerifier(client), admin_token=TOKEN)  # fmt: skip
    yield issuer, sso
    await client.aclose()


async def started(issuer: Provider, sso: SingleSignOn) -> tuple[str, Any]:
    url, cookie = await sso.start(REDIRECT)
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    issuer.nonce = query["nonce"]
    assert query["code_challenge_method"] == "S256" and query["redirect_uri"] == REDIRECT and "openid" in query["scope"]
    return cookie, sso.pending(cookie, query["state"])


async def test_a_sign_in_proves_an_administrator_and_its_pkce_verifier_reaches_the_provider(
    provider: tuple[Provider, SingleSignOn],
) -> None:
    issuer, sso = provider
    seen: list[dict[str, str]] = []

    def answer(form: dict[str, str]) -> Response:
        seen.append(form)
        return issuer.id_token_answer(form)

    issuer.answer = answer
    _, pending = await started(issuer, sso)
    assert await sso.finish("the-code", REDIRECT, pending) == "alice"
    assert seen[0]["code_verifier"] == pending.verifier and seen[0]["grant_type"] == "authorization_code"


async def test_a_pending_sign_in_needs_its_own_cookie_and_state(provider: tuple[Provider, SingleSignOn]) -> None:
    issuer, sso = provider
    cookie, _ = await started(issuer, sso)
    for forged_cookie, state in ((cookie, "other-state"), ("garbage", "s"), (None, "s"), (cookie, None),
                                 (cookie, "état")):  # fmt: skip
        with pytest.raises(SignInRefusedError):
            sso.pending(forged_cookie, state)


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        (lambda issuer: PlainTextResponse("nope", 400), "refused the sign-in's code (HTTP 400)"),
        (lambda issuer: PlainTextResponse("<html>", 200), "did not answer JSON"),
        (lambda issuer: JSONResponse({"access_token": "a"}), "holds no ID token"),
        (lambda issuer: JSONResponse({"id_token": issuer.id_token(nonce="another")}), "not for this sign-in"),
        (lambda issuer: JSONResponse({"id_token": issuer.id_token(aud="someone-else")}), "not valid"),
        (lambda issuer: JSONResponse({"id_token": issuer.id_token(aud=[CLIENT, "x"])}), "several audiences"),
        (lambda issuer: JSONResponse({"id_token": issuer.id_token(exp=int(time.time()) - 600)}), "expired"),
        (lambda issuer: JSONResponse({"id_token": issuer.id_token(sub="mallory")}), "not an administrator"),
        (lambda issuer: JSONResponse({"id_token": issuer.unsigned(CLIENT)}), "algorithm 'none'"),
    ],
)
async def test_each_bad_answer_of_the_token_endpoint_is_a_refusal(
    provider: tuple[Provider, SingleSignOn], answer: Callable[[Provider], Response], refusal: str
) -> None:
    issuer, sso = provider
    issuer.answer = lambda form: answer(issuer)
    _, pending = await started(issuer, sso)
    with pytest.raises(SignInRefusedError, match=re.escape(refusal)):
        await sso.finish("the-code", REDIRECT, pending)


async def test_an_id_token_of_another_issuer_is_refused(provider: tuple[Provider, SingleSignOn]) -> None:
    issuer, sso = provider
    with pytest.raises(AuthChallengeError, match="another issuer"):
        await sso.verifier.verify_id_token(issuer.id_token(iss="https://evil.example"), issuer.url, CLIENT, "")
    with pytest.raises(AuthChallengeError, match="well-formed"):
        await sso.verifier.verify_id_token("not-a-jwt", issuer.url, CLIENT, "")


async def test_a_provider_that_is_away_is_a_refusal_not_a_failure(serve: Callable[..., str]) -> None:
    issuer = Provider()
    issuer.url = serve(issuer.app)
    issuer.broken = "error"
    client = UpstreamClient()
    sso = SingleSignOn(issuer=issuer.url, client_id=CLIENT, client_secret=SECRET, admins=frozenset({"alice"}),
                       verifier=TokenVerifier(client), admin_token=TOKEN)  # fmt: skip
    try:
        with pytest.raises(SignInRefusedError, match="right now"):
            await sso.start(REDIRECT)
    finally:
        await client.aclose()
