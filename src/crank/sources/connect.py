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
    GET  /connect/{workspace}/_/signed-in            the issuer's redirect: then to the API's authorization server
    GET  /connect/{workspace}/{scheme}/callback      the API's redirect: the code exchanged, the tokens in the vault
    GET  /connect/{workspace}                        the signed-in user's own connections, each removable
    POST /connect/{workspace}/remove                 remove one (CSRF token of the page)

Each step's `state`, nonce and PKCE verifier live in a signed cookie of the browser that started it (10 minutes;
nothing is stored before someone signed in, so a visitor cannot fill the state store), are marked used in the
state store once its code is exchanged (any replica finishes what another started), and name the workspace and
scheme the redirect came back to (one redirect URI per workspace and scheme: no mix-up of servers): a callback
carried to another browser, a replayed or forged one, is refused, and so is a link opened by someone else than
its user (the account-linking attack). The pages take no return URL and redirect only to the issuer's authorization
endpoint and the scheme's own: no open redirect. Tokens never reach the browser, the page or the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route, Router

from crank.exceptions import ConfigurationError, DependencyUnavailableError, ToolError, UserCredentialsError
from crank.gateway.client import UpstreamClient
from crank.gateway.secrets import resolve_secret
from crank.gateway.sign_in import OpenIDSignIn, PendingSignIn, SignInRefusedError, pkce_challenge
from crank.gateway.token_endpoint import TokenEndpoint, TokenFailure
from crank.gateway.tokens import TokenVerifier, issuer_key, same_issuer
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
from crank.types import Receive, Scope, Send
from crank.wire.auth import Principal
from crank.wire.budgets import client_address

__all__ = [
    "CONNECT_WAIT",
    "MAX_WAITING",
    "STATE_MAX_AGE",
    "ConnectPages",
    "ask_to_connect",
]

logger = logging.getLogger("crank.gateway")

CONNECT_WAIT: Final = 180.0
"""Seconds a call waits, once its user accepted to open the connect page, for the connection (2026-07-28: the
client's retry waits): time to sign in and consent."""
MAX_WAITING: Final = 4
"""Calls of one user that may wait for their connection at once in a process; more get the link at once."""
STATE_MAX_AGE: Final = 600
"""Seconds a step of the connect flow may take (a sign-in, a consent) before its state is gone."""
SESSION_MAX_AGE: Final = 900
"""Seconds a user's own connections page stays signed in."""
_POLL: Final = 0.25
_PENDING_COOKIE: Final = "crank_connect_step"
_SESSION_COOKIE: Final = "crank_connect_session"
_MAX_CODE: Final = 2048
EXCHANGE_TIMEOUT: Final = 30.0
"""Seconds the code's exchange at the scheme's token endpoint may take."""
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
    user = context.caller if isinstance(context.caller, Principal) else None
    if user is None or user.issuer is None or user.subject is None:
        raise needed
    issuer, subject = issuer_key(user.issuer), user.subject
    waiting = (workspace, issuer, subject)
    if _WAITING.get(waiting, 0) >= MAX_WAITING:
        raise needed
    message = (f"{context.tool_name} acts as you at its API, and needs you to connect your account ({needed.scheme}) "
               "first. Open the page to sign in and allow it.")  # fmt: skip
    _WAITING[waiting] = _WAITING.get(waiting, 0) + 1  # from the question on: a user's unanswered asks count too
    try:
        answer = await context.elicit_url(message, needed.url, needed.elicitation, timeout=CONNECT_WAIT)
        if answer.get("action") != "accept":
            raise _declined(needed)
        await _until_connected(connections, workspace, needed, issuer, subject)
    finally:
        _WAITING[waiting] -= 1
        if not _WAITING[waiting]:
            del _WAITING[waiting]
    await context.notify("notifications/elicitation/complete", {"elicitationId": needed.elicitation})


def _declined(needed: UpstreamConnectionRequiredError) -> UserCredentialsError:
    """The error of a user who did not connect: nothing was sent, unless an earlier attempt of the call was."""
    outcome = " An earlier attempt of this call may have taken effect." if needed.may_have_taken_effect else (
        " Nothing was sent.")  # fmt: skip
    declined = UserCredentialsError(
        f"The user did not connect their account ({needed.scheme}).{outcome}",
        error_code="upstream_connection_declined",
        suggested_action="Do not call this tool again unless the user asks to connect their account.",
    )
    declined.may_have_taken_effect = needed.may_have_taken_effect
    return declined


_WAITING: dict[tuple[str, str, str], int] = {}
"""The calls waiting for their user's connection in this process, by workspace and user (`MAX_WAITING`)."""


async def _until_connected(connections: UserConnections, workspace: str, needed: UpstreamConnectionRequiredError,
                           issuer: str, subject: str) -> None:  # fmt: skip
    """Poll the state store's mark of a new connection (cheap), more slowly as time goes, until `CONNECT_WAIT`."""
    deadline, pause = time.monotonic() + CONNECT_WAIT, _POLL
    while not await connections.connected(workspace, needed.scheme, issuer, subject):
        if time.monotonic() >= deadline:
            raise needed
        await asyncio.sleep(pause)
        pause = min(pause * 1.5, 2.0)


# -- the pages -------------------------------------------------------------------------------------------------


class _Refused(Exception):
    """A step of the flow that cannot go on: the page says why (`status`, `message`); nothing was connected."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class ConnectPages:
    """The connect pages of one server (see the module). `policies(workspace)`: the workspace's OAuth policy as
    served; `connection_auth(workspace, scheme)`: the published `user_connection` credentials of the scheme."""

    def __init__(
        self,
        *,
        public_url: str,
        keys: VaultKeys,
        connections: UserConnections,
        state: StateStore,
        verifier: TokenVerifier,
        client: UpstreamClient,
        policies: Callable[[str, str], Awaitable[OAuthPolicy | None]],
        connection_auth: Callable[[str, str], Awaitable[AuthConfig | None]],
    ) -> None:
        self.public_url = public_url.rstrip("/")
        self.connections = connections
        self.state = state
        self.verifier = verifier
        self.client = client
        self._policies = policies
        self._connection_auth = connection_auth
        self._links = connections.links or ConnectLinks(public_url, keys)
        self._pending = URLSafeTimedSerializer(list(reversed(keys.derived("connect steps"))), salt="crank-connect-step")
        self._sessions = URLSafeTimedSerializer(list(reversed(keys.derived("connect sessions"))),
                                                salt="crank-connect-session")  # fmt: skip
        self._secure = self.public_url.startswith("https://")
        self._cookie_path = urlsplit(self.public_url).path + CONNECT_PATH  # behind a path prefix too
        self.app = Router(routes=[
            Route(CONNECT_PATH + "/{workspace}", self._own, methods=["GET"]),
            Route(CONNECT_PATH + "/{workspace}/remove", self._remove, methods=["POST"]),
            Route(CONNECT_PATH + "/{workspace}/{scheme}", self._start, methods=["GET"]),
            Route(CONNECT_PATH + "/{workspace}/_/signed-in", self._signed_in, methods=["GET"]),
            Route(CONNECT_PATH + "/{workspace}/{scheme}/callback", self._callback, methods=["GET"]),
        ])  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def signed_in_url(self, workspace: str) -> str:
        """Where the workspace's identity provider sends the browser back: its sign-in client's redirect URI."""
        return f"{self.public_url}{CONNECT_PATH}/{quote(workspace, safe='')}/_/signed-in"

    def callback_url(self, workspace: str, scheme: str) -> str:
        """Where the scheme's authorization server sends the browser back: Crank's client's redirect URI there, one
        per workspace and scheme (a server's code never comes back on another's way: no mix-up)."""
        return f"{self.public_url}{CONNECT_PATH}/{quote(workspace, safe='')}/{quote(scheme, safe='')}/callback"

    # -- a connect link ----------------------------------------------------------------------------------------

    async def _start(self, request: Request) -> Response:
        workspace, scheme = request.path_params["workspace"], request.path_params["scheme"]
        try:
            asked = self._links.read(request.query_params.get("request", ""), workspace, scheme)
            await self._auth(workspace, scheme)  # a scheme no published tool connects: said before any sign-in
            sign_in = await self._sign_in(request, workspace, asked.issuer)
            return await self._to_sign_in(sign_in, workspace, {"purpose": "connect", "request": _fields(asked)})
        except ConnectLinkError:
            return self._page("This connect link is not valid, or has expired",
                              "Call the tool again from your assistant for a new link.", status=400)  # fmt: skip
        except _Refused as refused:
            return self._page("Nothing was connected", refused.message, status=refused.status)

    async def _signed_in(self, request: Request) -> Response:
        workspace = request.path_params["workspace"]
        try:
            pending, kept = self._step(request, "login", workspace)
            claims = await self._finish_sign_in(request, workspace, kept, pending)
            await self._used(pending.state)
            if kept["purpose"] == "manage":
                return self._signed_in_session(workspace, kept["issuer"], str(claims["sub"]))
            asked = ConnectRequest(*kept["request"])
            if str(claims["sub"]) != asked.subject or not same_issuer(kept["issuer"], asked.issuer):
                logger.warning("connect: a link made for one user was opened by another; nothing was connected",
                               extra={"workspace": asked.workspace, "scheme": asked.scheme})  # fmt: skip
                raise _Refused("This link was made for another account than the one you signed in with. Nothing "
                               "was connected: ask for your own link by calling the tool yourself.", 403)  # fmt: skip
            return await self._to_api(asked)
        except _Refused as refused:
            return self._page("Nothing was connected", refused.message, status=refused.status)

    async def _callback(self, request: Request) -> Response:
        workspace, scheme = request.path_params["workspace"], request.path_params["scheme"]
        try:
            pending, kept = self._step(request, "api", workspace, scheme)
            error = request.query_params.get("error")
            if error is not None:
                raise _Refused(_PROVIDER_ERRORS.get(error, "The API's authorization server refused the connection."))
            asked = ConnectRequest(*kept["request"])
            connected = await self._exchange(request, asked, pending)
            await self._used(pending.state)
            await self.connections.save(asked.workspace, asked.scheme, asked.issuer, asked.subject, connected)
            logger.info(
                "connect: %s connected %s",
                asked.subject,
                asked.scheme,
                extra={"workspace": asked.workspace, "scheme": asked.scheme, "subject": asked.subject},
            )
            page = self._page("Connected", f"Your account is connected ({asked.scheme}). You can close this page "
                              "and return to your assistant.")  # fmt: skip
            page.delete_cookie(_PENDING_COOKIE, path=self._cookie_path)
            return page
        except _Refused as refused:
            return self._page("Nothing was connected", refused.message, status=refused.status)

    async def _exchange(self, request: Request, asked: ConnectRequest, pending: PendingSignIn) -> Connected:
        """The code exchanged at the scheme's token endpoint (PKCE verifier, Crank's client): the user's tokens."""
        auth = await self._auth(asked.workspace, asked.scheme)
        endpoint = TokenEndpoint(auth, self.client, workspace=asked.workspace, where=f"connection {asked.scheme}",
                                 timeout=EXCHANGE_TIMEOUT)  # fmt: skip
        form = {"grant_type": "authorization_code", "code": request.query_params.get("code", "")[:_MAX_CODE],
                "redirect_uri": self.callback_url(asked.workspace, asked.scheme), "code_verifier": pending.verifier,
                **({"resource": auth.resource} if auth.resource else {})}  # fmt: skip
        try:
            answer = await endpoint.request(form)
        except TokenFailure as failure:
            raise _Refused(f"The API's authorization server gave no token ({failure.cause}). Nothing was "
                           "connected: try again later.", 502) from None  # fmt: skip
        except ToolError as failed:  # the client's secret is not set on this server
            raise _Refused(failed.message, 503) from None
        return Connected.from_answer(answer, time.time())

    # -- a user's own connections --------------------------------------------------------------------------------

    async def _own(self, request: Request) -> Response:
        workspace = request.path_params["workspace"]
        session = self._session(request, workspace)
        try:
            if session is None:
                policy = await self._policy(workspace, client_address(request.scope))
                assert policy.sign_in_client is not None  # `_policy` refuses a workspace without one
                sign_in = await self._sign_in(request, workspace, policy.sign_in_client.issuer)
                return await self._to_sign_in(sign_in, workspace, {"purpose": "manage"})
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
        if session is None:
            return self._page("Your connections", "Sign in again to remove a connection.", status=403)
        try:
            form = await request.form(max_files=0, max_fields=4, max_part_size=4096)
        except (MultiPartException, ValueError):
            return self._page("Your connections", "This form is not one of this page's.", status=400)
        if not hmac.compare_digest(str(form.get("csrf", "")).encode(), session[2].encode()):
            return self._page("Your connections", "Sign in again to remove a connection.", status=403)
        scheme = str(form.get("scheme", ""))[:128]
        removed = await self.connections.remove(workspace, scheme=scheme, issuer=session[0], subject=session[1])
        logger.info("connect: %s removed %s (%d)", session[1], scheme, removed, extra={"workspace": workspace})
        return RedirectResponse(f"{self.public_url}{CONNECT_PATH}/{quote(workspace, safe='')}", 303,
                                headers=_HEADERS)  # fmt: skip

    # -- inside ------------------------------------------------------------------------------------------------

    async def _policy(self, workspace: str, client: str) -> OAuthPolicy:
        try:
            policy = await self._policies(workspace, client)
        except DependencyUnavailableError as unavailable:  # its policy cannot be read now
            raise _Refused(unavailable.message, 503) from None
        if policy is None or policy.sign_in_client is None:
            raise _Refused("This workspace does not sign users in for connections (it has no sign-in client).", 404)
        return policy

    async def _sign_in(self, request: Request, workspace: str, issuer: str) -> OpenIDSignIn:
        """The workspace's sign-in client, at `issuer` (the issuer of the user who asked)."""
        client = (await self._policy(workspace, client_address(request.scope))).sign_in_client
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

    async def _auth(self, workspace: str, scheme: str) -> AuthConfig:
        try:
            auth = await self._connection_auth(workspace, scheme)
        except DependencyUnavailableError as unavailable:  # the workspace's agents cannot be built now
            raise _Refused(unavailable.message, 503) from None
        if auth is None:
            raise _Refused("No published tool of this workspace connects accounts for this API.", 404)
        return auth

    async def _to_sign_in(self, sign_in: OpenIDSignIn, workspace: str, kept: dict[str, Any]) -> Response:
        """To the identity provider, the step remembered in this browser's cookie (nothing stored before anyone
        signed in: a visitor cannot fill the state store)."""
        try:
            url, pending = await sign_in.start(self.signed_in_url(workspace))
        except SignInRefusedError as refused:
            raise _Refused(str(refused), 502) from None
        return self._redirect(url, "login", pending, {**kept, "issuer": sign_in.issuer})

    async def _finish_sign_in(
        self, request: Request, workspace: str, kept: dict[str, Any], pending: PendingSignIn
    ) -> dict[str, Any]:
        error = request.query_params.get("error")
        if error is not None:
            raise _Refused(_PROVIDER_ERRORS.get(error, "The identity provider refused the sign-in."))
        said = request.query_params.get("iss")  # RFC 9207: the issuer that answers, when it says
        if said is not None and not same_issuer(said, kept["issuer"]):
            raise _Refused("This answer came from another identity provider than the one this sign-in went to.")
        sign_in = await self._sign_in(request, workspace, kept["issuer"])
        try:
            code = request.query_params.get("code", "")[:_MAX_CODE]
            return await sign_in.finish(code, self.signed_in_url(workspace), pending)
        except SignInRefusedError as refused:
            raise _Refused(str(refused), 403) from None

    async def _to_api(self, asked: ConnectRequest) -> Response:
        auth = await self._auth(asked.workspace, asked.scheme)
        assert auth.authorization_url is not None and auth.client_id is not None
        pending = PendingSignIn.new()
        query = {"response_type": "code", "client_id": auth.client_id,
                 "redirect_uri": self.callback_url(asked.workspace, asked.scheme), "state": pending.state,
                 "code_challenge": pkce_challenge(pending.verifier), "code_challenge_method": "S256",
                 **({"scope": " ".join(auth.scopes)} if auth.scopes else {}),
                 **({"resource": auth.resource} if auth.resource else {}),
                 # OpenID Connect keeps `offline_access` (a refresh token) only with the user's consent asked for
                 **({"prompt": "consent"} if "offline_access" in auth.scopes else {})}  # fmt: skip
        separator = "&" if "?" in auth.authorization_url else "?"
        url = f"{auth.authorization_url}{separator}{urlencode(query)}"
        return self._redirect(url, "api", pending, {"request": _fields(asked)})

    def _redirect(self, url: str, step: str, pending: PendingSignIn, kept: dict[str, Any]) -> Response:
        """To `url`, this browser's pending `step` in a signed cookie of its own (`SameSite=Lax`: the provider's
        redirect back brings it): a state carried to another browser comes back without it."""
        response = RedirectResponse(url, 303, headers=_HEADERS)
        value = self._pending.dumps([step, pending.state, pending.nonce, pending.verifier, kept])
        response.set_cookie(_PENDING_COOKIE, value, max_age=STATE_MAX_AGE, path=self._cookie_path,
                            secure=self._secure, httponly=True, samesite="lax")  # fmt: skip
        return response

    def _step(self, request: Request, step: str, workspace: str, scheme: str | None = None
              ) -> tuple[PendingSignIn, dict[str, Any]]:  # fmt: skip
        """The step this browser started with this `state`, for this workspace (and scheme), recent; or refused."""
        refused = _Refused("This step was not started in this browser, was used already, or took too long. Nothing "
                           "was connected: call the tool again for a new link.")  # fmt: skip
        cookie, state = request.cookies.get(_PENDING_COOKIE, ""), request.query_params.get("state", "")
        if not cookie or len(cookie) > 4096 or not 0 < len(state) <= 128:
            raise refused
        try:
            kept_step, kept_state, nonce, verifier, kept = self._pending.loads(cookie, max_age=STATE_MAX_AGE)
        except (BadSignature, ValueError, TypeError):
            raise refused from None
        if kept_step != step or not hmac.compare_digest(str(kept_state).encode(), state.encode()):
            raise refused
        asked = kept.get("request")
        where = (asked[0], asked[1]) if isinstance(asked, list) else (workspace, None)
        if where[0] != workspace or (scheme is not None and where[1] != scheme):
            raise refused
        return PendingSignIn(str(kept_state), str(nonce), str(verifier)), kept

    async def _used(self, state: str) -> None:
        """Each step's state works once (a replay with its cookie still there): marked used after its code was
        exchanged, so only a real sign-in writes to the state store."""
        if not await self.state.add(f"connect-used:{_digest(state)}", {"at": time.time()}, STATE_MAX_AGE):
            raise _Refused("This step was used already. Nothing was connected: call the tool again for a new link.")

    def _signed_in_session(self, workspace: str, issuer: str, subject: str) -> Response:
        url = f"{self.public_url}{CONNECT_PATH}/{quote(workspace, safe='')}"
        response = RedirectResponse(url, 303, headers=_HEADERS)
        value = self._sessions.dumps([workspace, issuer, subject, secrets.token_urlsafe(24)])
        response.set_cookie(_SESSION_COOKIE, value, max_age=SESSION_MAX_AGE, path=self._cookie_path,
                            secure=self._secure, httponly=True, samesite="strict")  # fmt: skip
        response.delete_cookie(_PENDING_COOKIE, path=self._cookie_path)
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


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()
