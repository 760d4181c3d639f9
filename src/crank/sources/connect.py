"""Users connect their own accounts to APIs (the OAuth 2 authorization code flow with PKCE), on Crank's connect
pages under the server's public URL, and a call asks them to when they have not (URL-mode elicitation).

**Asking** (`ask_to_connect`). A tool whose scheme acts through users' connections, called by a user without one,
gets `UpstreamConnectionRequiredError` from its credential (`crank.gateway.user_connections`), carrying the user's
connect link. A client that declared URL-mode elicitation is asked to open it:

- 2025-11-25: `elicitation/create` with `mode: "url"` and an `elicitationId`; once the user accepted, the call
  waits (`CONNECT_WAIT` at most) for the connection to be in the vault (made on whichever replica served the page),
  sends `notifications/elicitation/complete` naming the id, and runs.
- 2026-07-28: an `input_required` round with the same elicitation; the client's retry runs once the connection
  is there (`CONNECT_WAIT_AGAIN` at most for a user still on the page).

A client that cannot open URLs, a user who has not finished in time, gets the error itself: its
`details.connect_url` and `suggested_action` carry the link. A user who declines gets `upstream_connection_declined`.
Nothing is sent upstream before the user's own token is there.

**The pages** (`ConnectPages`, at `/connect`):

    GET  /connect/{workspace}/{scheme}?request=...   a connect link: signs the browser's user in at the workspace's
                                                     issuer (its `sign_in_client`), and goes on only for the user
                                                     the link names (the same issuer and `sub`)
    GET  /connect/_/signed-in                        the issuer's redirect: then to the API's authorization server
    GET  /connect/_/callback                         the API's redirect: the code exchanged, the tokens in the vault
    GET  /connect/{workspace}                        the signed-in user's own connections, each removable
    POST /connect/{workspace}/remove                 remove one (CSRF token of the page)

Each step's `state` is single use and short lived (the state store: any replica finishes what another started),
and bound to the browser that started it (a random cookie, whose hash the state keeps): a callback carried to
another browser, a replayed or forged one, is refused, and so is a link opened by someone else than its user
(the account-linking attack). The pages take no return URL and redirect only to the issuer's authorization
endpoint and the scheme's own: no open redirect. Tokens never reach the browser, the page or the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

from itsdangerous import BadSignature, URLSafeTimedSerializer
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route, Router

from crank.exceptions import ConfigurationError, ToolError, UserCredentialsError
from crank.gateway.client import UpstreamClient
from crank.gateway.secrets import resolve_secret
from crank.gateway.sign_in import OpenIDSignIn, PendingSignIn, SignInRefusedError, pkce_challenge
from crank.gateway.token_endpoint import TokenEndpoint, TokenFailure
from crank.gateway.tokens import TokenVerifier, same_issuer
from crank.gateway.user_connections import (
    CONNECT_PATH,
    Connected,
    ConnectLinkError,
    ConnectLinks,
    ConnectRequest,
    UpstreamConnectionRequiredError,
    UserConnections,
)
from crank.mcp.tools import CallContext
from crank.registry.runtime import AuthConfig, OAuthPolicy
from crank.registry.vault import VaultKeys
from crank.state.store import StateStore

__all__ = [
    "CONNECT_WAIT",
    "CONNECT_WAIT_AGAIN",
    "STATE_MAX_AGE",
    "ConnectPages",
    "ask_to_connect",
]

logger = logging.getLogger("crank.gateway")

CONNECT_WAIT: Final = 300.0
"""2025-11-25: seconds a call waits, once its user accepted to open the connect page, for the connection."""
CONNECT_WAIT_AGAIN: Final = 10.0
"""2026-07-28: seconds the retry of a call waits for a user still on the connect page."""
STATE_MAX_AGE: Final = 600
"""Seconds a step of the connect flow may take (a sign-in, a consent) before its state is gone."""
SESSION_MAX_AGE: Final = 900
"""Seconds a user's own connections page stays signed in."""
_POLL: Final = 0.25
_BROWSER_COOKIE: Final = "crank_connect"
_SESSION_COOKIE: Final = "crank_connect_session"
SIGNED_IN_PATH: Final = CONNECT_PATH + "/_/signed-in"
CALLBACK_PATH: Final = CONNECT_PATH + "/_/callback"
_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "referrer-policy": "no-referrer",  # a link's request, a code: never in another site's Referer
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
_PROVIDER_ERRORS: Final = {
    "access_denied": "You did not allow access, so nothing was connected.",
    "login_required": "You are not signed in at the provider.",
    "consent_required": "The provider needs your consent, which was not given: nothing was connected.",
}
_TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(default=True),
    undefined=StrictUndefined,
)

# -- asking, from a call ---------------------------------------------------------------------------------------


async def ask_to_connect(needed: UpstreamConnectionRequiredError, context: CallContext,
                         connections: UserConnections, workspace: str) -> None:  # fmt: skip
    """Ask the caller's client to send its user to their connect link, and return once they connected (the call
    then runs again); raise `needed` itself when the client cannot ask, or the user has not connected in time."""
    if not context.can_open_url():
        raise needed
    user = context.caller
    issuer, subject = getattr(user, "issuer", None), getattr(user, "subject", None)
    if not isinstance(issuer, str) or not isinstance(subject, str):
        raise needed
    message = (f"{context.tool_name} acts as you at its API, and needs you to connect your account ({needed.scheme}) "
               "first. Open the page to sign in and allow it.")  # fmt: skip
    answer = await context.elicit_url(message, needed.url, needed.elicitation, timeout=CONNECT_WAIT)
    if answer.get("action") != "accept":
        raise UserCredentialsError(
            f"The user did not connect their account ({needed.scheme}). Nothing was sent.",
            error_code="upstream_connection_declined",
            suggested_action="Do not call this tool again unless the user asks to connect their account.",
        )  # fmt: skip
    wait = CONNECT_WAIT_AGAIN if context.modern else CONNECT_WAIT
    deadline = time.monotonic() + wait
    while not await connections.connected(workspace, needed.scheme, issuer, subject):
        if time.monotonic() >= deadline:
            raise needed
        await asyncio.sleep(_POLL)
    await context.notify("notifications/elicitation/complete", {"elicitationId": needed.elicitation})


# -- the pages -------------------------------------------------------------------------------------------------


class _Refused(Exception):
    """A step of the flow that cannot go on: the page says why (`status`, `message`); nothing was connected."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class ConnectPages:
    """The connect pages of one server (see the module). `policies(workspace)`: the workspace's OAuth policy;
    `connection_auth(workspace, scheme)`: the published `user_connection` credentials of the scheme."""

    def __init__(
        self,
        *,
        public_url: str,
        keys: VaultKeys,
        connections: UserConnections,
        state: StateStore,
        verifier: TokenVerifier,
        client: UpstreamClient,
        policies: Any,
        connection_auth: Any,
    ) -> None:
        self.public_url = public_url.rstrip("/")
        self.connections = connections
        self.state = state
        self.verifier = verifier
        self.client = client
        self._policies = policies
        self._connection_auth = connection_auth
        self._links = ConnectLinks(public_url, keys)
        self._sessions = URLSafeTimedSerializer(list(reversed(keys.derived("connect sessions"))),
                                                salt="crank-connect-session")  # fmt: skip
        self._secure = self.public_url.startswith("https://")
        self.app = Router(routes=[
            Route(SIGNED_IN_PATH, self._signed_in, methods=["GET"]),
            Route(CALLBACK_PATH, self._callback, methods=["GET"]),
            Route(CONNECT_PATH + "/{workspace}", self._own, methods=["GET"]),
            Route(CONNECT_PATH + "/{workspace}/remove", self._remove, methods=["POST"]),
            Route(CONNECT_PATH + "/{workspace}/{scheme}", self._start, methods=["GET"]),
        ])  # fmt: skip

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    # -- a connect link ----------------------------------------------------------------------------------------

    async def _start(self, request: Request) -> Response:
        workspace, scheme = request.path_params["workspace"], request.path_params["scheme"]
        try:
            asked = self._links.read(request.query_params.get("request", ""), workspace, scheme)
            self._auth(workspace, scheme)  # a scheme no published tool connects: said before any sign-in
            sign_in = self._sign_in(workspace, asked.issuer)
            return await self._to_sign_in(request, sign_in, {"purpose": "connect", "request": _fields(asked)})
        except ConnectLinkError:
            return self._page("This connect link is not valid, or has expired",
                              "Call the tool again from your assistant for a new link.", status=400)  # fmt: skip
        except _Refused as refused:
            return self._page("Nothing was connected", refused.message, status=refused.status)

    async def _signed_in(self, request: Request) -> Response:
        try:
            pending, kept = await self._take(request, "login")
            claims = await self._finish_sign_in(request, kept, pending)
            if kept["purpose"] == "manage":
                return self._signed_in_session(kept["workspace"], kept["issuer"], str(claims["sub"]))
            asked = ConnectRequest(*kept["request"])
            if str(claims["sub"]) != asked.subject or not same_issuer(kept["issuer"], asked.issuer):
                logger.warning("connect: a link made for one user was opened by another; nothing was connected",
                               extra={"workspace": asked.workspace, "scheme": asked.scheme})  # fmt: skip
                raise _Refused("This link was made for another account than the one you signed in with. Nothing "
                               "was connected: ask for your own link by calling the tool yourself.", 403)  # fmt: skip
            return await self._to_api(request, asked)
        except _Refused as refused:
            return self._page("Nothing was connected", refused.message, status=refused.status)

    async def _callback(self, request: Request) -> Response:
        try:
            pending, kept = await self._take(request, "api")
            error = request.query_params.get("error")
            if error is not None:
                raise _Refused(_PROVIDER_ERRORS.get(error, "The API's authorization server refused the connection."))
            asked = ConnectRequest(*kept["request"])
            auth = self._auth(asked.workspace, asked.scheme)
            endpoint = TokenEndpoint(auth, self.client, workspace=asked.workspace,
                                     where=f"connection {asked.scheme}", timeout=30.0)  # fmt: skip
            form = {"grant_type": "authorization_code", "code": request.query_params.get("code", ""),
                    "redirect_uri": self.public_url + CALLBACK_PATH, "code_verifier": pending.verifier,
                    **({"resource": auth.resource} if auth.resource else {})}  # fmt: skip
            try:
                answer = await endpoint.request(form)
            except TokenFailure as failure:
                raise _Refused(f"The API's authorization server gave no token ({failure.cause}). Nothing was "
                               "connected: try again later.", 502) from None  # fmt: skip
            except ToolError as failed:  # the client's secret is not set on this server
                raise _Refused(failed.message, 503) from None
            connected = Connected.from_answer(answer, time.time())
            await self.connections.save(asked.workspace, asked.scheme, asked.issuer, asked.subject, connected)
            logger.info(
                "connect: %s connected %s",
                asked.subject,
                asked.scheme,
                extra={"workspace": asked.workspace, "scheme": asked.scheme, "subject": asked.subject},
            )
            return self._page("Connected", f"Your account is connected ({asked.scheme}). You can close this page "
                              "and return to your assistant.")  # fmt: skip
        except _Refused as refused:
            return self._page("Nothing was connected", refused.message, status=refused.status)

    # -- a user's own connections --------------------------------------------------------------------------------

    async def _own(self, request: Request) -> Response:
        workspace = request.path_params["workspace"]
        session = self._session(request, workspace)
        try:
            if session is None:
                policy = self._policy(workspace)
                assert policy.sign_in_client is not None  # `_policy` refuses a workspace without one
                sign_in = self._sign_in(workspace, policy.sign_in_client.issuer)
                return await self._to_sign_in(request, sign_in, {"purpose": "manage", "workspace": workspace,
                                                                 "issuer": sign_in.issuer})  # fmt: skip
        except _Refused as refused:
            return self._page("Your connections", refused.message, status=refused.status)
        issuer, subject, csrf = session
        vault = self.connections.vault
        entries = [] if vault is None else await asyncio.to_thread(vault.entries, workspace, subject=subject)
        own = [entry for entry in entries if same_issuer(entry.issuer, issuer)]
        return self._page("Your connections", f"Signed in as {subject}.", connections=own, csrf=csrf,
                          action=f"{CONNECT_PATH}/{quote(workspace, safe='')}/remove")  # fmt: skip

    async def _remove(self, request: Request) -> Response:
        workspace = request.path_params["workspace"]
        session = self._session(request, workspace)
        form = await request.form(max_files=0, max_fields=4, max_part_size=4096)
        if session is None or not hmac.compare_digest(str(form.get("csrf", "")).encode(), session[2].encode()):
            return self._page("Your connections", "Sign in again to remove a connection.", status=403)
        scheme = str(form.get("scheme", ""))
        removed = await self.connections.remove(workspace, scheme=scheme, issuer=session[0], subject=session[1])
        logger.info("connect: %s removed %s (%d)", session[1], scheme, removed, extra={"workspace": workspace})
        return RedirectResponse(f"{CONNECT_PATH}/{quote(workspace, safe='')}", 303, headers=_HEADERS)

    # -- inside ------------------------------------------------------------------------------------------------

    def _policy(self, workspace: str) -> OAuthPolicy:
        policy: OAuthPolicy | None = self._policies(workspace)
        if policy is None or policy.sign_in_client is None:
            raise _Refused("This workspace does not sign users in for connections (it has no sign-in client).", 404)
        return policy

    def _sign_in(self, workspace: str, issuer: str) -> OpenIDSignIn:
        """The workspace's sign-in client, at `issuer` (the issuer of the user who asked)."""
        client = self._policy(workspace).sign_in_client
        assert client is not None
        if not same_issuer(client.issuer, issuer):
            raise _Refused("You signed in to your assistant with another identity provider than the one this "
                           "workspace connects accounts with.", 403)  # fmt: skip
        try:
            secret = resolve_secret(client.client_secret, workspace=workspace, where=f"workspace {workspace} sign-in")
        except ConfigurationError as missing:
            logger.warning("%s", missing)
            raise _Refused("This workspace's sign-in is not set up on this server.", 503) from None
        return OpenIDSignIn(issuer=client.issuer, client_id=client.client_id, client_secret=secret,
                            verifier=self.verifier, tenant=workspace)  # fmt: skip

    def _auth(self, workspace: str, scheme: str) -> AuthConfig:
        auth: AuthConfig | None = self._connection_auth(workspace, scheme)
        if auth is None:
            raise _Refused("No published tool of this workspace connects accounts for this API.", 404)
        return auth

    async def _to_sign_in(self, request: Request, sign_in: OpenIDSignIn, kept: dict[str, Any]) -> Response:
        try:
            url, pending = await sign_in.start(self.public_url + SIGNED_IN_PATH)
        except SignInRefusedError as refused:
            raise _Refused(str(refused), 502) from None
        browser = _browser(request)
        await self._keep("login", pending, browser, {**kept, "issuer": sign_in.issuer, "nonce": pending.nonce})
        return self._redirect(url, browser)

    async def _finish_sign_in(self, request: Request, kept: dict[str, Any], pending: PendingSignIn) -> dict[str, Any]:
        error = request.query_params.get("error")
        if error is not None:
            raise _Refused(_PROVIDER_ERRORS.get(error, "The identity provider refused the sign-in."))
        workspace = kept["request"][0] if kept["purpose"] == "connect" else kept["workspace"]
        sign_in = self._sign_in(workspace, kept["issuer"])
        try:
            return await sign_in.finish(request.query_params.get("code", ""), self.public_url + SIGNED_IN_PATH,
                                        PendingSignIn(pending.state, kept["nonce"], pending.verifier))  # fmt: skip
        except SignInRefusedError as refused:
            raise _Refused(str(refused), 403) from None

    async def _to_api(self, request: Request, asked: ConnectRequest) -> Response:
        auth = self._auth(asked.workspace, asked.scheme)
        assert auth.authorization_url is not None and auth.client_id is not None
        pending = PendingSignIn.new()
        browser = _browser(request)
        await self._keep("api", pending, browser, {"request": _fields(asked)})
        query = {"response_type": "code", "client_id": auth.client_id,
                 "redirect_uri": self.public_url + CALLBACK_PATH, "state": pending.state,
                 "code_challenge": pkce_challenge(pending.verifier), "code_challenge_method": "S256",
                 **({"scope": " ".join(auth.scopes)} if auth.scopes else {}),
                 **({"resource": auth.resource} if auth.resource else {}),
                 # OpenID Connect keeps `offline_access` (a refresh token) only with the user's consent asked for
                 **({"prompt": "consent"} if "offline_access" in auth.scopes else {})}  # fmt: skip
        separator = "&" if "?" in auth.authorization_url else "?"
        return self._redirect(f"{auth.authorization_url}{separator}{urlencode(query)}", browser)

    async def _keep(self, step: str, pending: PendingSignIn, browser: str, kept: dict[str, Any]) -> None:
        record = {**kept, "verifier": pending.verifier, "browser": _digest(browser)}
        await self.state.put(f"connect-{step}:{_digest(pending.state)}", record, STATE_MAX_AGE)

    async def _take(self, request: Request, step: str) -> tuple[PendingSignIn, dict[str, Any]]:
        """The step this browser started with this `state`: taken (single use), or refused."""
        state = request.query_params.get("state", "")
        kept = await self.state.take(f"connect-{step}:{_digest(state)}") if 0 < len(state) <= 128 else None
        browser = request.cookies.get(_BROWSER_COOKIE, "")
        if kept is None or not hmac.compare_digest(_digest(browser).encode(), str(kept.get("browser")).encode()):
            raise _Refused("This step was not started in this browser, was used already, or took too long. "
                           "Nothing was connected: call the tool again for a new link.")  # fmt: skip
        return PendingSignIn(state, "", str(kept["verifier"])), kept

    def _redirect(self, url: str, browser: str) -> Response:
        response = RedirectResponse(url, 303, headers=_HEADERS)
        response.set_cookie(_BROWSER_COOKIE, browser, max_age=STATE_MAX_AGE, path=CONNECT_PATH, secure=self._secure,
                            httponly=True, samesite="lax")  # fmt: skip
        return response

    def _signed_in_session(self, workspace: str, issuer: str, subject: str) -> Response:
        response = RedirectResponse(f"{CONNECT_PATH}/{quote(workspace, safe='')}", 303, headers=_HEADERS)
        value = self._sessions.dumps([workspace, issuer, subject, secrets.token_urlsafe(24)])
        response.set_cookie(_SESSION_COOKIE, value, max_age=SESSION_MAX_AGE, path=CONNECT_PATH, secure=self._secure,
                            httponly=True, samesite="strict")  # fmt: skip
        return response

    def _session(self, request: Request, workspace: str) -> tuple[str, str, str] | None:
        cookie = request.cookies.get(_SESSION_COOKIE, "")
        if not cookie or len(cookie) > 2048:
            return None
        try:
            kept = self._sessions.loads(cookie, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return None
        if not (isinstance(kept, list) and len(kept) == 4 and kept[0] == workspace):
            return None
        return str(kept[1]), str(kept[2]), str(kept[3])

    def _page(self, title: str, message: str, *, status: int = 200, **more: Any) -> HTMLResponse:
        values: Mapping[str, Any] = {"title": title, "message": message, "connections": [], "csrf": "", "action": "",
                                     **more}  # fmt: skip
        return HTMLResponse(_TEMPLATES.get_template("connect.html").render(**values), status, headers=_HEADERS)


def _fields(request: ConnectRequest) -> list[str]:
    return [request.workspace, request.scheme, request.issuer, request.subject, request.elicitation]


def _browser(request: Request) -> str:
    """This browser's binding: its cookie's value, else a new one (set on the redirect)."""
    kept = request.cookies.get(_BROWSER_COOKIE, "")
    return kept if 32 <= len(kept) <= 64 and kept.isascii() else secrets.token_urlsafe(32)


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()
