"""Single sign-on to the console through an OpenID Connect provider (the authorization code flow with PKCE).

The console is the provider's confidential client (`crank.gateway.sign_in.OpenIDSignIn`). "Sign in with ..."
sends the browser to the provider's authorization endpoint with a fresh `state`, `nonce` and PKCE verifier, kept
in a short-lived signed cookie of their own (`SameSite=Lax`: the browser sends it back on the provider's redirect,
which the session's `Strict` cookie is not). The callback checks the state, exchanges the code at the token
endpoint (client secret, PKCE verifier), and checks the ID token (`TokenVerifier.verify_id_token`: the issuer's
keys, the audience, the nonce, the expiry). Only a subject, or a verified e-mail address, of `admins` signs in:
the provider proves who someone is; Crank's own setting says who administers it.

The provider's metadata, keys and token endpoint are reached through the upstream client, so the egress policy
applies as for every other outbound call.
"""

from __future__ import annotations

import secrets
from typing import Any, Final
from urllib.parse import urlsplit

from itsdangerous import BadSignature

from crank.admin.console.session import signer
from crank.gateway.sign_in import OpenIDSignIn, PendingSignIn, SignInRefusedError
from crank.gateway.tokens import TokenVerifier

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
        self._provider = OpenIDSignIn(issuer=issuer, client_id=client_id, client_secret=client_secret,
                                      verifier=verifier)  # fmt: skip
        self.issuer = self._provider.issuer
        self.client_id = client_id
        self.admins = admins
        self.verifier = verifier
        self._pending = signer(admin_token, "sign-in")

    @property
    def provider(self) -> str:
        """The provider's host, for the sign-in button."""
        return urlsplit(self.issuer).netloc

    async def start(self, redirect_uri: str) -> tuple[str, str]:
        """The provider's authorization URL for a new sign-in, and the cookie value that remembers it."""
        url, pending = await self._provider.start(redirect_uri, "openid email")
        return url, self._pending.dumps([pending.state, pending.nonce, pending.verifier])

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
        return self._administrator(await self._provider.finish(code, redirect_uri, pending))

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
