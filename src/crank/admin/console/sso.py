"""Single sign-on to the console through an OpenID Connect provider (the authorization code flow with PKCE).

The console is the provider's confidential client. "Sign in with ..." sends the browser to the provider's
authorization endpoint with a fresh `state`, `nonce` and PKCE verifier, kept in a short-lived signed cookie of
their own (`SameSite=Lax`: the browser sends it back on the provider's redirect, which the session's `Strict`
cookie is not). The callback checks the state, exchanges the code at the token endpoint (client secret, PKCE
verifier), and checks the ID token (`TokenVerifier.verify_id_token`: the issuer's keys, the audience, the
nonce, the expiry). Only a subject, or a verified e-mail address, of `admins` signs in: the provider proves who
someone is; Crank's own setting says who administers it.

The provider's metadata, keys and token endpoint are reached through the upstream client, so the egress policy
applies as for every other outbound call.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote_plus, urlencode, urlsplit

from itsdangerous import BadSignature

from crank import _json
from crank.admin.console.session import signer
from crank.exceptions import AuthChallengeError, DependencyUnavailableError, UpstreamError
from crank.gateway.tokens import FETCH_TIMEOUT, MAX_DOCUMENT_BYTES, TokenVerifier
from crank.registry.runtime import is_secure_url

__all__ = [
    "PENDING_COOKIE",
    "PENDING_MAX_AGE",
    "PendingSignIn",
    "SignInRefusedError",
    "SingleSignOn",
]

PENDING_COOKIE: Final = "crank_console_sso"
PENDING_MAX_AGE: Final = 600
"""Seconds a sign-in started at the provider may take to come back."""


class SignInRefusedError(Exception):
    """The sign-in did not prove an administrator; the message says why, for the sign-in page."""


@dataclass(frozen=True)
class PendingSignIn:
    state: str
    nonce: str
    verifier: str
    """The PKCE code verifier; the provider saw only its SHA-256."""


class SingleSignOn:
    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: str,
        admins: frozenset[str],
        verifier: TokenVerifier,
        admin_token: str,
    ) -> None:
        if not admins:
            raise ValueError("single sign-on needs the subjects or e-mail addresses of its administrators")
        if not is_secure_url(issuer):
            raise ValueError(f"the sign-in provider {issuer!r} must be an https URL (http only on this machine)")
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._secret = client_secret
        self.admins = admins
        self.verifier = verifier
        self._pending = signer(admin_token, "sign-in")

    @property
    def provider(self) -> str:
        """The provider's host, for the sign-in button."""
        return urlsplit(self.issuer).netloc

    async def start(self, redirect_uri: str) -> tuple[str, str]:
        """The provider's authorization URL for a new sign-in, and the cookie value that remembers it."""
        endpoint = await self._endpoint("authorization_endpoint")
        pending = PendingSignIn(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))
        challenge = base64.urlsafe_b64encode(hashlib.sha256(pending.verifier.encode()).digest()).rstrip(b"=").decode()
        query = urlencode({
            "response_type": "code", "client_id": self.client_id, "redirect_uri": redirect_uri,
            "scope": "openid email", "state": pending.state, "nonce": pending.nonce,
            "code_challenge": challenge, "code_challenge_method": "S256",
        })  # fmt: skip
        cookie = self._pending.dumps([pending.state, pending.nonce, pending.verifier])
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", cookie

    def pending(self, cookie: str | None, state: str | None) -> PendingSignIn:
        """The sign-in this browser started, if `state` is its own and it is recent."""
        if not cookie or not state or len(cookie) > 1024:
            raise SignInRefusedError("This sign-in was not started here, or took too long: start it again.")
        try:
            kept_state, nonce, verifier = self._pending.loads(cookie, max_age=PENDING_MAX_AGE)
        except (BadSignature, ValueError, TypeError):
            raise SignInRefusedError("This sign-in was not started here, or took too long: start it again.") from None
        if not secrets.compare_digest(str(kept_state).encode(), state.encode()):
            raise SignInRefusedError("This sign-in's state does not match: start it again.")
        return PendingSignIn(str(kept_state), str(nonce), str(verifier))

    async def finish(self, code: str, redirect_uri: str, pending: PendingSignIn) -> str:
        """Exchange the code and check the ID token: the administrator's subject (or e-mail address)."""
        endpoint = await self._endpoint("token_endpoint")
        body = urlencode({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                          "code_verifier": pending.verifier}).encode()  # fmt: skip
        # RFC 6749 §2.3.1: each part form-encoded before they are joined
        basic = base64.b64encode(f"{quote_plus(self.client_id)}:{quote_plus(self._secret)}".encode()).decode()
        headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json",
                   "authorization": f"Basic {basic}"}  # fmt: skip
        try:
            answer = await self.verifier.client.request(
                "POST", endpoint, params=None, headers=headers, body=body, timeout=FETCH_TIMEOUT, tenant="oauth"
            )
        except (UpstreamError, ValueError) as failed:
            raise SignInRefusedError(f"The provider's token endpoint did not answer: {failed}") from None
        tokens = _token_answer(answer.status, answer.body)
        try:
            claims = await self.verifier.verify_id_token(tokens, self.issuer, self.client_id, pending.nonce)
        except AuthChallengeError as invalid:
            raise SignInRefusedError(invalid.description) from None
        except DependencyUnavailableError as away:
            raise SignInRefusedError(away.message) from None
        return self._administrator(claims)

    def _administrator(self, claims: dict[str, Any]) -> str:
        """The name `admins` knows the signed-in person by: an entry with `@` is an e-mail address, compared with
        the token's verified `email` only; any other entry is a subject, compared with `sub` only (a provider
        that lets people choose their subject cannot make one look like someone's address)."""
        subject = str(claims["sub"])
        email = claims.get("email") if claims.get("email_verified") is True else None
        if isinstance(email, str) and "@" in email and email in self.admins:
            return email
        if "@" not in subject and subject in self.admins:
            return subject
        raise SignInRefusedError(f"{email or subject} signed in, but is not an administrator of this Crank.")

    def still_admin(self, who: str) -> bool:
        """Whether a session's signed-in name is still one of `admins` (taken off the list: signed out)."""
        return who in self.admins

    async def _endpoint(self, name: str) -> str:
        try:
            metadata = await self.verifier.metadata(self.issuer)
        except DependencyUnavailableError as away:
            raise SignInRefusedError(away.message) from None
        endpoint = metadata.get(name)
        if not isinstance(endpoint, str) or not is_secure_url(endpoint):
            raise SignInRefusedError(f"The provider's metadata names no {name} (an https URL).")
        return endpoint


def _token_answer(status: int, body: bytes) -> str:
    """The ID token of the token endpoint's answer."""
    if status != 200 or len(body) > MAX_DOCUMENT_BYTES:
        raise SignInRefusedError(f"The provider refused the sign-in's code (HTTP {status}).")
    try:
        answer = _json.loads(body)
    except _json.JSONDecodeError:
        raise SignInRefusedError("The provider's token endpoint did not answer JSON.") from None
    token = answer.get("id_token") if isinstance(answer, dict) else None
    if not isinstance(token, str):
        raise SignInRefusedError("The provider's answer holds no ID token (is `openid` among the client's scopes?).")
    return token
