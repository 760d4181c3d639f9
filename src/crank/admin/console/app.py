"""The console: an ASGI app at `/console`, beside the admin API, on the same actions (docs/console.md).

Pages are rendered on the server (Jinja2, autoescaped: operation descriptions come from untrusted documents)
with htmx, vendored, for the live search. Every page needs a session signed in with the admin token
(`crank.admin.console.session`); every form that changes something carries the session's CSRF token. Every
answer says `Content-Security-Policy` with no inline script or style, and is never cached.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from crank import __version__, _json
from crank.admin.actions import ImportFormat, publish_agent
from crank.admin.clients import client_config
from crank.admin.console.pages import (
    POLICY_FIELDS,
    ImportPage,
    access_page,
    agent_limits,
    agent_page,
    diff_page,
    import_document,
    keys_page,
    read_policy,
    try_page,
    workspace_page,
)
from crank.admin.console.session import COOKIE, DEFAULT_IDLE_TIMEOUT, LOGIN_COOKIE, ConsoleSession, Sessions
from crank.admin.console.sso import PENDING_COOKIE, PENDING_MAX_AGE, SignInRefusedError, SingleSignOn
from crank.admin.console.trying import MAX_ARGUMENTS_BYTES, read_arguments
from crank.admin.console.trying import call_tool as call_mcp_tool
from crank.admin.console.usage import Usage
from crank.admin.documents import is_url, parse_document
from crank.admin.guard import SIGN_IN_RETRY_AFTER, TOO_MANY_ATTEMPTS, SignInGuard
from crank.exceptions import ConfigurationError, RegistryConflictError, RegistryNotFoundError, SpecError
from crank.gateway.egress import EgressPolicy
from crank.gateway.safety import CONFIRMATION_ARGUMENT
from crank.ids import new_request_id
from crank.registry import DATABASE_ERRORS, Registry, describe_database_error
from crank.registry.vault import Vault
from crank.sources.access import AGENT_PATH
from crank.telemetry import Metrics
from crank.types import ASGIApp, JSONObject, Receive, Scope, Send
from crank.wire.asgi import serve_lifespan

__all__ = ["PREFIX", "Console"]

logger = logging.getLogger("crank.console")

PREFIX: Final = "/console"
_HERE = Path(__file__).parent
SECURITY_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
"""On every console answer: no inline script or style runs, nothing is framed, nothing is cached."""
MAX_FORM_BYTES: Final = 64 * 1024
"""The largest form a console page posts (the import page's: `MAX_IMPORT_FORM_BYTES`)."""
MAX_IMPORT_DOCUMENT: Final = 8 * 1024 * 1024
"""The longest description pasted into the import page (characters; a larger one: give its URL)."""
MAX_IMPORT_FORM_BYTES: Final = 3 * MAX_IMPORT_DOCUMENT
"""The import form's bound on the wire: a browser percent-encodes punctuation and line ends (3 bytes each)."""

Page = Callable[["Console", Request, ConsoleSession], Awaitable[Response]]


class Console:
    """The console for one registry, signed in with the admin token. `crank serve` mounts it for the admin role
    (`/console`); the `mcp` role never serves it."""

    def __init__(
        self,
        registry: Registry,
        *,
        token: str,
        egress: EgressPolicy | None = None,
        idle_timeout: int = DEFAULT_IDLE_TIMEOUT,
        mcp: ASGIApp | None = None,
        metrics: Metrics | None = None,
        sso: SingleSignOn | None = None,
        public_url: str | None = None,
        guard: SignInGuard | None = None,
    ) -> None:
        """`guard`: what bounds wrong admin tokens per address (shared with the admin API; its own if None)."""
        if len(token) < 16:
            raise ConfigurationError("the admin token must be at least 16 characters")
        self.registry = registry
        self.guard = guard if guard is not None else SignInGuard()
        self.mcp = mcp
        self.sso = sso
        self.public_url = public_url.rstrip("/") if public_url else None
        """Where the browser reaches this server (the sign-in's redirect URI); else the request's own base URL."""
        """The gateway app of this process, which "try it" calls (None: the MCP endpoints are served elsewhere)."""
        self.usage = Usage(metrics) if metrics is not None else None
        """The last hour's calls of the agents this process serves (None: it serves none); counted from `start`."""
        self.egress = egress if egress is not None else EgressPolicy.from_environment()
        self.sessions = Sessions(token, idle_timeout=idle_timeout)
        self._token = token.encode()
        self.templates = Environment(
            loader=FileSystemLoader(_HERE / "templates"),
            autoescape=select_autoescape(default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals.update(prefix=PREFIX, version=__version__, quote=quote)
        static = StaticFiles(directory=_HERE / "static")
        self._app = Starlette(
            routes=[
                Mount(PREFIX + "/static", static, name="static"),
                Route(PREFIX + "/login", self._login_form, methods=["GET"]),
                Route(PREFIX + "/login", self._login, methods=["POST"]),
                Route(PREFIX + "/login/sso", self._sso_start, methods=["GET"]),
                Route(PREFIX + "/login/callback", self._sso_callback, methods=["GET"]),
                Route(PREFIX + "/logout", _page(_logout), methods=["POST"]),
                Route(PREFIX, _page(_workspaces), methods=["GET"]),
                Route(PREFIX + "/", _page(_workspaces), methods=["GET"]),
                Route(PREFIX + "/workspaces/{workspace}", _page(_workspace), methods=["GET"]),
                Route(PREFIX + "/workspaces/{workspace}/import", _page(_import_form), methods=["GET"]),
                Route(
                    PREFIX + "/workspaces/{workspace}/import", _page(_import, MAX_IMPORT_FORM_BYTES), methods=["POST"]
                ),  # fmt: skip
                Route(PREFIX + "/workspaces/{workspace}/keys", _page(_keys), methods=["GET"]),
                Route(PREFIX + "/workspaces/{workspace}/usage", _page(_usage), methods=["GET"]),
                Route(PREFIX + "/workspaces/{workspace}/access", _page(_access), methods=["GET"]),
                Route(PREFIX + "/workspaces/{workspace}/access", _page(_set_access), methods=["POST"]),
                Route(PREFIX + "/workspaces/{workspace}/access/keys-only", _page(_keys_only), methods=["POST"]),
                Route(
                    PREFIX + "/workspaces/{workspace}/access/revoke-connection",
                    _page(_revoke_connection),
                    methods=["POST"],
                ),  # fmt: skip
                Route(PREFIX + "/workspaces/{workspace}/keys", _page(_create_key), methods=["POST"]),
                Route(PREFIX + "/workspaces/{workspace}/keys/{key}/revoke", _page(_revoke_key), methods=["POST"]),
                Route(PREFIX + "/workspaces/{workspace}/agents/{agent}", _page(_agent), methods=["GET"]),
                Route(PREFIX + "/workspaces/{workspace}/agents/{agent}/diff", _page(_diff), methods=["GET"]),
                Route(
                    PREFIX + "/workspaces/{workspace}/agents/{agent}/tools/{tool}", _page(_try_form), methods=["GET"]
                ),
                Route(PREFIX + "/workspaces/{workspace}/agents/{agent}/tools/{tool}", _page(_try), methods=["POST"]),
                Route(PREFIX + "/workspaces/{workspace}/agents/{agent}/publish", _page(_publish), methods=["POST"]),
                Route(PREFIX + "/workspaces/{workspace}/agents/{agent}/rollback", _page(_rollback), methods=["POST"]),
            ],
            exception_handlers={HTTPException: self._http_error},
        )
        self._app.state.console = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send, startup=self.start, shutdown=self.aclose)
            return

        async def secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    *((name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()),
                ]
            await send(message)

        await self._app(scope, receive, secured if scope["type"] == "http" else send)

    def signed_in(self, session: ConsoleSession) -> bool:
        """Whether a session is signed in now: with the admin token, or as someone who is still one of the
        single sign-on's administrators (taken off the list: signed out at the next request)."""
        if not session.signed_in:
            return False
        if session.via == "token":
            return True
        return session.via == "sso" and self.sso is not None and self.sso.still_admin(session.who)

    def start(self) -> None:
        """Start counting usage (at the server's start)."""
        if self.usage is not None:
            self.usage.start()

    async def aclose(self) -> None:
        """Stop counting usage and close the connections to the sign-in provider (at the server's shutdown)."""
        if self.usage is not None:
            self.usage.close()
        if self.sso is not None:
            await self.sso.verifier.client.aclose()

    # -- rendering ---------------------------------------------------------------------------------

    def render(
        self, request: Request, template: str, session: ConsoleSession | None, status: int = 200, **context: Any
    ) -> HTMLResponse:
        """A page, and the session's cookie stamped again (its idle timeout starts over)."""
        body = self.templates.get_template(template).render(session=session, request=request, **context)
        response = HTMLResponse(body, status)
        if session is not None:
            response.headers.append("set-cookie", self.sessions.cookie(session, secure=_secure(request)))
        return response

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = {404: "Nothing here.", 405: "This page does not take that method."}.get(status, "Refused.")
        return self.render(request, "error.html", None, status, title=str(status), message=message)

    # -- signing in --------------------------------------------------------------------------------

    async def _login_form(self, request: Request) -> Response:
        session = self.sessions.read(request.cookies.get(COOKIE))
        if session is not None and self.signed_in(session):
            return RedirectResponse(_next(request.query_params.get("next")), 303)
        session = self._sign_in_session(request)
        return self.render(request, "login.html", session, next=_next(request.query_params.get("next")), failed=False,
                           sso=self.sso, refused=None)  # fmt: skip

    def _sign_in_session(self, request: Request) -> ConsoleSession:
        """The sign-in page's own session (its own cookie: `LOGIN_COOKIE`), whose CSRF token guards its form."""
        return self.sessions.read(request.cookies.get(LOGIN_COOKIE)) or self.sessions.start()

    async def _login(self, request: Request) -> Response:
        session = self.sessions.read(request.cookies.get(LOGIN_COOKIE))
        form = await _form(request)
        if session is None or not session.checks(_field(form, "csrf")):
            stale = "The form was stale or not this browser's: open the sign-in page again."
            return self.render(request, "error.html", None, 403, title="Refused", message=stale)
        if self.guard.refused(request.scope):
            refused = self.render(request, "error.html", None, 429, title="Too many attempts",
                                  message=TOO_MANY_ATTEMPTS + ".")  # fmt: skip
            refused.headers["retry-after"] = str(SIGN_IN_RETRY_AFTER)
            return refused
        if not hmac.compare_digest(_field(form, "token").encode(), self._token):
            self.guard.failed(request.scope, "the console")
            return self.render(request, "login.html", session, 401, next=_next(_field(form, "next")), failed=True,
                               sso=self.sso, refused=None)  # fmt: skip
        fresh = self.sessions.start(via="token")  # a new id and CSRF token: nothing planted before survives
        response = RedirectResponse(_next(_field(form, "next")), 303)
        response.headers.append("set-cookie", self.sessions.cookie(fresh, secure=_secure(request)))
        response.headers.append("set-cookie", Sessions.cleared(secure=_secure(request), signed_in=False))
        return response

    async def _sso_start(self, request: Request) -> Response:
        """Send the browser to the provider, remembering the sign-in in a cookie of its own."""
        if self.sso is None:
            raise HTTPException(404)
        try:
            url, pending = await self.sso.start(self._callback_url(request))
        except SignInRefusedError as refused:
            return self._sso_refused(request, str(refused))
        response = RedirectResponse(url, 303)
        response.headers.append("set-cookie", _pending_cookie(pending, PENDING_MAX_AGE, _secure(request)))
        return response

    async def _sso_callback(self, request: Request) -> Response:
        """The provider's redirect back: a signed-in session for an administrator, else the sign-in page."""
        if self.sso is None:
            raise HTTPException(404)
        query = request.query_params
        try:
            if "error" in query:  # the provider's words are not shown: anyone can link here with any text
                raise SignInRefusedError(_PROVIDER_ERRORS.get(query["error"], "The provider refused the sign-in."))
            pending = self.sso.pending(request.cookies.get(PENDING_COOKIE), query.get("state"))
            who = await self.sso.finish(query.get("code", ""), self._callback_url(request), pending)
        except SignInRefusedError as refused:
            return self._sso_refused(request, str(refused))
        logger.info("console sign-in through %s: %s", self.sso.provider, who)
        session = self.sessions.start(via="sso", who=who)
        # A page, not a redirect: a navigation that came from another site does not carry a `SameSite=Strict`
        # cookie, and the next one, started by this page, does.
        response = self.render(request, "signed_in.html", session, who=who)
        response.headers.append("set-cookie", _pending_cookie("", 0, _secure(request)))
        return response

    def _sso_refused(self, request: Request, why: str) -> Response:
        session = self._sign_in_session(request)  # a link to the callback writes no signed-in session's cookie
        response = self.render(request, "login.html", session, 403, next=PREFIX + "/", failed=False, sso=self.sso,
                               refused=why)  # fmt: skip
        response.headers.append("set-cookie", _pending_cookie("", 0, _secure(request)))
        return response

    def _callback_url(self, request: Request) -> str:
        base = self.public_url or str(request.base_url).rstrip("/")
        return base + PREFIX + "/login/callback"


_PROVIDER_ERRORS: Final = {
    "access_denied": "The sign-in was declined at the provider.",
    "login_required": "The provider needs you to sign in there first.",
    "consent_required": "The provider needs your consent first.",
    "interaction_required": "The provider needs you to finish signing in there first.",
}
"""The OAuth error codes (RFC 6749 §4.1.2.1, OpenID Connect Core §3.1.2.6) said in the console's own words."""


def _pending_cookie(value: str, max_age: int, secure: bool) -> str:
    """The sign-in's own cookie: `Lax`, so that the provider's redirect back carries it; only for the callback."""
    cookie = f"{PENDING_COOKIE}={value}; Max-Age={max_age}; Path={PREFIX}/login; HttpOnly; SameSite=Lax"
    return cookie + ("; Secure" if secure else "")


def _page(handler: Page, max_form: int = MAX_FORM_BYTES) -> Callable[[Request], Awaitable[Response]]:
    """A page that needs a signed-in session, and a CSRF token for any POST; registry errors become pages."""

    async def page(request: Request) -> Response:
        console: Console = request.app.state.console
        session = console.sessions.read(request.cookies.get(COOKIE))
        if session is None or not console.signed_in(session):
            if request.method != "GET":
                return console.render(request, "error.html", None, 403, title="Signed out",
                                      message="Your session ended: sign in again, then repeat the change.")  # fmt: skip
            return RedirectResponse(f"{PREFIX}/login?next={quote(request.url.path)}", 303)
        try:
            if request.method == "POST":
                form = await _form(request, max_form)
                if not session.checks(_field(form, "csrf")):
                    return console.render(request, "error.html", session, 403, title="Refused",
                                          message="This form did not come from this session's page.")  # fmt: skip
                request.state.form = form
                logger.info("console change by %s: %s", session.who or "?", request.url.path)
            return await handler(console, request, session)
        except RegistryNotFoundError as missing:
            return console.render(request, "error.html", session, 404, title="Not found", message=str(missing))
        except DATABASE_ERRORS as exc:
            return console.render(request, "error.html", session, 503, title="Registry unavailable",
                                  message=f"{describe_database_error(exc)}; retry later.")  # fmt: skip
        except HTTPException:
            raise
        except Exception:  # the operator's log has the trace; the page says only that it failed
            request_id = new_request_id()
            logger.exception("console page %s failed (request_id=%s)", request.url.path, request_id)
            failed = f"The page could not be made; the log has request_id {request_id}."
            return console.render(request, "error.html", session, 500, title="Something failed", message=failed)

    return page


# -- pages ---------------------------------------------------------------------------------------------


async def _workspaces(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspaces = await run_in_threadpool(console.registry.workspaces)
    return console.render(request, "workspaces.html", session, workspaces=workspaces)


async def _workspace(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace = request.path_params["workspace"]
    page = await run_in_threadpool(workspace_page, console.registry, workspace, request.query_params.get("q", ""))
    template = "operations.html" if request.headers.get("hx-request") == "true" else "workspace.html"
    return console.render(request, template, session, page=page)


async def _agent(console: Console, request: Request, session: ConsoleSession, **context: Any) -> Response:
    workspace, agent = request.path_params["workspace"], request.path_params["agent"]
    language, mode = request.query_params.get("lang"), request.query_params.get("mode")
    page = await run_in_threadpool(agent_page, console.registry, workspace, agent, language=language, mode=mode)
    context.setdefault("notice", _notice(request))
    context.setdefault("problem", None)
    # Where clients reach it: the configured public URL, else the address this page was asked at.
    mcp_url = (console.public_url or str(request.base_url).rstrip("/")) + AGENT_PATH.format(
        workspace=quote(workspace), agent=quote(agent)
    )
    config = client_config(mcp_url, "<API key>", name=f"{workspace}-{agent}")
    return console.render(request, "agent.html", session, context.pop("status", 200), page=page, mcp_url=mcp_url,
                          client_config=config, **context)  # fmt: skip


async def _publish(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace, agent = request.path_params["workspace"], request.path_params["agent"]
    try:
        report = await run_in_threadpool(publish_agent, console.registry, workspace, agent, egress=console.egress)
    except (ConfigurationError, RegistryConflictError) as refused:
        return await _agent(console, request, session, status=422, problem=str(refused), notice=None)
    return RedirectResponse(_agent_url(workspace, agent) + f"?published={report.version}", 303)


async def _rollback(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace, agent = request.path_params["workspace"], request.path_params["agent"]
    version = _int(_field(request.state.form, "version"))
    if version is None:
        return await _agent(console, request, session, status=422, problem="Choose a version.", notice=None)
    await run_in_threadpool(console.registry.rollback, workspace, agent, version)
    return RedirectResponse(_agent_url(workspace, agent) + f"?rolled_back={version}", 303)


async def _diff(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace, agent = request.path_params["workspace"], request.path_params["agent"]
    old, new = _int(request.query_params.get("from")), _int(request.query_params.get("to"))
    if old is None or new is None:
        raise HTTPException(404)
    diff = await run_in_threadpool(diff_page, console.registry, workspace, agent, old, new)
    return console.render(request, "diff.html", session, workspace=workspace, agent=agent, old=old, new=new,
                          diff=diff)  # fmt: skip


async def _try_form(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace, agent, tool = (request.path_params[name] for name in ("workspace", "agent", "tool"))
    page = await run_in_threadpool(try_page, console.registry, workspace, agent, tool)
    return console.render(request, "try.html", session, page=page, serving=console.mcp is not None)


async def _try(console: Console, request: Request, session: ConsoleSession) -> Response:
    """Call the tool with the form's arguments, or, for "Run it", with the arguments already sent and the
    confirmation token the endpoint gave."""
    workspace, agent, tool = (request.path_params[name] for name in ("workspace", "agent", "tool"))
    form: FormData = request.state.form
    values = {name[2:]: _field(form, name) for name in form if name.startswith("a.")}
    page = await run_in_threadpool(try_page, console.registry, workspace, agent, tool, values)
    if console.mcp is None:
        return console.render(request, "try.html", session, 409, page=page, serving=False)
    if _field(form, "confirm"):
        arguments, problems = _confirmed(_field(form, "sent"), _field(form, "token"))
    else:
        arguments, problems = read_arguments(page.fields, values)
    if problems:
        page = replace(page, problems=problems)
        return console.render(request, "try.html", session, 422, page=page, serving=True)
    answer = await call_mcp_tool(console.mcp, workspace, agent, _field(form, "key"), tool, arguments)
    arguments.pop(CONFIRMATION_ARGUMENT, None)
    page = replace(page, answer=answer, sent=_json.dumps(arguments).decode())
    return console.render(request, "try.html", session, page=page, serving=True)


def _confirmed(sent: str, token: str) -> tuple[JSONObject, list[str]]:
    """The arguments of the call the page asked about, with the confirmation token the endpoint gave for them
    (the endpoint checks that the token is for exactly these arguments)."""
    try:
        arguments = _json.loads_bounded(sent.encode()) if len(sent) <= MAX_ARGUMENTS_BYTES else None
    except (_json.JSONDecodeError, _json.JSONDepthError):
        arguments = None
    if not isinstance(arguments, dict) or not token:
        return {}, ["the confirmation form was incomplete: call the tool again"]
    return {**arguments, CONFIRMATION_ARGUMENT: token}, []


async def _import_form(console: Console, request: Request, session: ConsoleSession) -> Response:
    page = ImportPage(request.path_params["workspace"])
    await run_in_threadpool(console.registry.workspace, page.workspace)  # a workspace that exists
    return console.render(request, "import.html", session, page=page)


async def _import(console: Console, request: Request, session: ConsoleSession) -> Response:
    """Preview (a dry run) or apply a newer description, given by URL or pasted (JSON or YAML)."""
    form: FormData = request.state.form
    kind: ImportFormat = "openrpc" if _field(form, "kind") == "openrpc" else "openapi"
    page = ImportPage(request.path_params["workspace"], kind, _field(form, "url").strip(), _field(form, "document"))
    source, problem = await run_in_threadpool(_import_source, page)  # parsing 8 MiB holds no event loop
    if problem is not None:
        return console.render(request, "import.html", session, 422, page=replace(page, problems=[problem]))
    apply = _field(form, "action") == "apply"
    try:
        report = await run_in_threadpool(import_document, console.registry, page.workspace, kind, source,
                                          apply=apply, egress=console.egress)  # fmt: skip
    except ConfigurationError as refused:
        return console.render(request, "import.html", session, 422, page=replace(page, problems=[str(refused)]))
    return console.render(request, "import.html", session, page=replace(page, report=report))


def _import_source(page: ImportPage) -> tuple[str | JSONObject, str | None]:
    """The URL or the parsed document of the import form, or why there is none."""
    if bool(page.url) == bool(page.document.strip()):
        return "", "Give the description's URL, or paste the description: one of the two."
    if page.url:
        return page.url, None if is_url(page.url) else "The URL must be http(s): the console reads no server files."
    if len(page.document) > MAX_IMPORT_DOCUMENT:
        return "", f"The pasted description is longer than {MAX_IMPORT_DOCUMENT} characters: give its URL instead."
    try:  # as a description fetched by URL is read
        return parse_document(page.document, source="the pasted description"), None
    except SpecError as wrong:
        return "", str(wrong)


async def _usage(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace = request.path_params["workspace"]
    limits = await run_in_threadpool(agent_limits, console.registry, workspace)  # 404 for a workspace that is not
    report = console.usage.last_hour(workspace) if console.usage is not None else None
    return console.render(request, "usage.html", session, workspace=workspace, report=report, limits=limits)


async def _access(console: Console, request: Request, session: ConsoleSession) -> Response:
    page = await run_in_threadpool(access_page, console.registry, request.path_params["workspace"])
    return console.render(request, "access.html", session, page=page, notice=_notice(request))


async def _set_access(console: Console, request: Request, session: ConsoleSession) -> Response:
    """Take OAuth access tokens as the form says; a policy that is refused is shown again with why."""
    workspace = request.path_params["workspace"]
    form = {name: _field(request.state.form, name) for name in POLICY_FIELDS}
    current = await run_in_threadpool(console.registry.workspace_oauth_policy, workspace)
    try:
        policy = read_policy(form, current)
    except ValueError as refused:
        page = await run_in_threadpool(access_page, console.registry, workspace, form=form, problems=[str(refused)])
        return console.render(request, "access.html", session, 422, page=page, notice=None)
    await run_in_threadpool(console.registry.set_workspace_oauth, workspace, policy)
    return RedirectResponse(f"{PREFIX}/workspaces/{quote(workspace)}/access?oauth_saved=1", 303)


async def _keys_only(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace = request.path_params["workspace"]
    await run_in_threadpool(console.registry.set_workspace_oauth, workspace, None)
    return RedirectResponse(f"{PREFIX}/workspaces/{quote(workspace)}/access?keys_only=1", 303)


async def _revoke_connection(console: Console, request: Request, session: ConsoleSession) -> Response:
    """Revoke one user's connection to a scheme: asked to connect again on their next call."""
    workspace = request.path_params["workspace"]
    scheme, subject = _field(request.state.form, "scheme"), _field(request.state.form, "subject")
    if not scheme or not subject:  # one user's connection to one scheme: never the whole workspace's by a slip
        return RedirectResponse(f"{PREFIX}/workspaces/{quote(workspace)}/access", 303)
    vault = Vault(console.registry.engine, None)
    removed = await run_in_threadpool(vault.delete, workspace, scheme=scheme or None, subject=subject or None)
    logger.info("console: %s revoked %d connection(s) of %s to %s", session.who or "admin", removed, subject, scheme,
                extra={"workspace": workspace})  # fmt: skip
    return RedirectResponse(f"{PREFIX}/workspaces/{quote(workspace)}/access?connection_revoked=1", 303)


async def _keys(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace = request.path_params["workspace"]
    page = await run_in_threadpool(keys_page, console.registry, workspace, request.query_params.get("prefix", ""))
    return console.render(request, "keys.html", session, page=page, notice=_notice(request))


async def _create_key(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace = request.path_params["workspace"]
    form: FormData = request.state.form
    agents = [str(value) for value in form.getlist("agents")]
    created = await run_in_threadpool(console.registry.issue_api_key, workspace, agents or None)
    page = await run_in_threadpool(keys_page, console.registry, workspace, "", created=created)
    # Answered here, not redirected: the key is shown this once and never stored.
    return console.render(request, "keys.html", session, 201, page=page, notice=None)


async def _revoke_key(console: Console, request: Request, session: ConsoleSession) -> Response:
    workspace, key = request.path_params["workspace"], request.path_params["key"]
    await run_in_threadpool(console.registry.delete_api_key, workspace, key)
    return RedirectResponse(f"{PREFIX}/workspaces/{quote(workspace)}/keys?revoked={quote(key)}", 303)


async def _logout(console: Console, request: Request, session: ConsoleSession) -> Response:
    response = RedirectResponse(PREFIX + "/login", 303)
    response.headers.append("set-cookie", Sessions.cleared(secure=_secure(request)))
    return response


# -- helpers -------------------------------------------------------------------------------------------


_NOTICES: Final = {
    "published": "Published version {}.",
    "rolled_back": "Now serving version {} again.",
    "revoked": "Revoked key {}.",
    "oauth_saved": "Saved the OAuth policy: every replica applies it when it reloads.",
    "keys_only": "The workspace takes API keys only now.",
    "connection_revoked": "Revoked the connection: its user is asked to connect again on their next call.",
}


def _notice(request: Request) -> str | None:
    """What a redirect after a change says, from known words only (a link cannot make the page say anything)."""
    for name, words in _NOTICES.items():
        value = request.query_params.get(name)
        if value is not None and value.isascii() and len(value) <= 64 and value.replace("-", "").isalnum():
            return words.format(value)
    return None


def _agent_url(workspace: str, agent: str) -> str:
    return f"{PREFIX}/workspaces/{quote(workspace)}/agents/{quote(agent)}"


def _next(target: str | None) -> str:
    """Where to go after signing in: a console path only, never another site (`//evil`, `/\\evil`)."""
    if not target or not target.startswith(PREFIX) or "\\" in target or urlsplit(target).netloc:
        return PREFIX + "/"
    return target


async def _form(request: Request, max_bytes: int = MAX_FORM_BYTES) -> FormData:
    """A URL-encoded form of at most `max_bytes` and 100 fields (read in bounded steps, however sent)."""
    kind = request.headers.get("content-type")
    if kind is None:
        return FormData()  # no form at all: no CSRF token either, so any change is refused
    if not kind.startswith("application/x-www-form-urlencoded"):
        raise HTTPException(415)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise HTTPException(413)
    try:
        fields: list[tuple[str, str | UploadFile]] = list(
            parse_qsl(body.decode("latin-1"), keep_blank_values=True, max_num_fields=100, errors="replace")
        )
    except ValueError:
        raise HTTPException(413) from None
    return FormData(fields)


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() and len(value) < 10 else None


def _secure(request: Request) -> bool:
    """Whether cookies are `Secure`: the request came over TLS (or a trusted proxy says so, `CRANK_TRUSTED_PROXIES`),
    or the server's public URL is https (a proxy in front ends TLS)."""
    public_url = request.app.state.console.public_url
    return request.url.scheme == "https" or (public_url is not None and public_url.startswith("https://"))
