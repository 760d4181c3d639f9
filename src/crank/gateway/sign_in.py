"""Signing a person in at an OpenID Connect provider, as its confidential client: the authorization code flow with
PKCE and a nonce (OpenID Connect Core 3.1, RFC 7636). One owner for the console's single sign-on
(`crank.admin.console.sso`) and the connect page (`crank.sources.connect`), which each keep their own pending
sign-ins and decide who may go on.

`OpenIDSignIn.start` gives the provider's authorization URL of a new sign-in and what to remember of it
(`PendingSignIn`); `finish` exchanges the code at the token endpoint (the client secret with HTTP Basic, the PKCE
verifier) and checks the ID token (`TokenVerifier.verify_id_token`: the issuer's keys, the audience, the nonce,
the expiry): its claims, or `SignInRefusedError` saying why not, for the page. The provider's metadata, keys and
token endpoint are reached through the verifier's upstream client, so the egress policy applies.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlencode

from crank import _json
from crank.exceptions import AuthChallengeError, DependencyUnavailableError, UpstreamError
from crank.gateway.tokens import FETCH_TIMEOUT, MAX_DOCUMENT_BYTES, TokenVerifier
from crank.registry.runtime import is_secure_url

__all__ = ["OpenIDSignIn", "PendingSignIn", "SignInRefusedError", "pkce_challenge"]


class SignInRefusedError(Exception):
    """The sign-in did not prove who it had to; the message says why, for the page."""


@dataclass(frozen=True)
class PendingSignIn:
    state: str
    nonce: str
    verifier: str
    """The PKCE code verifier; the provider saw only its SHA-256."""

    @classmethod
    def new(cls) -> PendingSignIn:
        return cls(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 S256: the base64url SHA-256 of the verifier, unpadded."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class OpenIDSignIn:
    """One client at one provider. `tenant`: whose share of the upstream client its requests count against."""

    def __init__(
        self, *, issuer: str, client_id: str, client_secret: str, verifier: TokenVerifier, tenant: str = "oauth"
    ) -> None:
        if not is_secure_url(issuer):
            raise ValueError(f"the sign-in provider {issuer!r} must be an https URL (http only on this machine)")
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._secret = client_secret
        self.verifier = verifier
        self._tenant = tenant

    async def start(self, redirect_uri: str, scope: str = "openid") -> tuple[str, PendingSignIn]:
        """The provider's authorization URL for a new sign-in, and what the caller keeps to finish it."""
        endpoint = await self._endpoint("authorization_endpoint")
        pending = PendingSignIn.new()
        query = urlencode({
            "response_type": "code", "client_id": self.client_id, "redirect_uri": redirect_uri, "scope": scope,
            "state": pending.state, "nonce": pending.nonce, "code_challenge": pkce_challenge(pending.verifier),
            "code_challenge_method": "S256",
        })  # fmt: skip
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", pending

    async def finish(self, code: str, redirect_uri: str, pending: PendingSignIn) -> dict[str, Any]:
        """Exchange the code and check the ID token: its claims (`sub` at least)."""
        endpoint = await self._endpoint("token_endpoint")
        body = urlencode({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                          "code_verifier": pending.verifier}).encode()  # fmt: skip
        # RFC 6749 §2.3.1: each part form-encoded before they are joined
        basic = base64.b64encode(f"{quote_plus(self.client_id)}:{quote_plus(self._secret)}".encode()).decode()
        headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json",
                   "authorization": f"Basic {basic}"}  # fmt: skip
        try:
            answer = await self.verifier.client.request(
                "POST", endpoint, params=None, headers=headers, body=body, timeout=FETCH_TIMEOUT, tenant=self._tenant
            )
        except (UpstreamError, ValueError) as failed:
            raise SignInRefusedError(f"The provider's token endpoint did not answer: {failed}") from None
        token = _id_token(answer.status, answer.body)
        try:
            return await self.verifier.verify_id_token(token, self.issuer, self.client_id, pending.nonce)
        except AuthChallengeError as invalid:
            raise SignInRefusedError(invalid.description) from None
        except DependencyUnavailableError as away:
            raise SignInRefusedError(away.message) from None

    async def _endpoint(self, name: str) -> str:
        try:
            metadata = await self.verifier.metadata(self.issuer)
        except DependencyUnavailableError as away:
            raise SignInRefusedError(away.message) from None
        endpoint = metadata.get(name)
        if not isinstance(endpoint, str) or not is_secure_url(endpoint):
            raise SignInRefusedError(f"The provider's metadata names no {name} (an https URL).")
        return endpoint


def _id_token(status: int, body: bytes) -> str:
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
