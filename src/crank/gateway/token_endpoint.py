"""An authorization server's token endpoint, as Crank's own OAuth 2 client asks it: the client credentials grant
(`crank.gateway.credentials`), a token exchange (RFC 8693), a user connection's authorization code and refresh
(`crank.gateway.user_connections`). One owner of the request (the client authenticated with HTTP Basic, through
the operation's `UpstreamClient` so that the egress policy applies, within a timeout and
`MAX_TOKEN_RESPONSE_BYTES`), of what an answer must be to be used (a bearer access token of visible ASCII; for an
exchange, the `issued_token_type` asked for), and of the structured errors a failure becomes. The log line of a
failure names the token URL's origin and the cause, never a secret or a token."""

from __future__ import annotations

import base64
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote_plus, urlencode

from crank import _json
from crank.exceptions import (
    ConfigurationError,
    ExternalServiceError,
    ToolConfigurationError,
    ToolError,
    UpstreamBusyError,
    UpstreamConnectionError,
    UpstreamRefusedError,
    UpstreamRequestTooLargeError,
    UpstreamTimeoutError,
    UpstreamTooLargeError,
    UserCredentialsError,
)
from crank.gateway.client import UpstreamClient, parse_upstream_url
from crank.gateway.secrets import SecretValue
from crank.registry.runtime import AuthConfig
from crank.wire.notices import ThrottledLog

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "DEFAULT_TOKEN_LIFETIME",
    "MAX_TOKEN_LIFETIME",
    "MAX_TOKEN_RESPONSE_BYTES",
    "TOKEN_EXPIRY_MARGIN",
    "TOKEN_UNAVAILABLE_ACTION",
    "TokenAnswer",
    "TokenEndpoint",
    "TokenFailure",
    "lifetime",
    "sign_in_again",
]

logger = logging.getLogger("crank.gateway")
_notices = ThrottledLog(logger)

DEFAULT_TOKEN_LIFETIME: Final = 300.0
"""Seconds a client-credentials token is kept when its answer has no `expires_in`."""
TOKEN_EXPIRY_MARGIN: Final = 30.0
"""Seconds before its `expires_in` that a token stops being used: a call never sends one about to expire."""
MAX_TOKEN_RESPONSE_BYTES: Final = 64 * 1024
"""The largest token endpoint answer read (a token response is a few hundred bytes; a JWT a few KiB)."""
ACCESS_TOKEN_TYPE: Final = "urn:ietf:params:oauth:token-type:access_token"
_USER_REFUSALS: Final = frozenset({"access_denied", "consent_required", "interaction_required"})
"""A token endpoint's refusals of an exchange that say the user may not (no access, no consent); `invalid_grant`
says the user's token is no longer good (`USER_SIGN_IN_ACTION`). Any other is Crank's own configuration's."""
USER_SIGN_IN_ACTION: Final = (
    "Do not retry with other arguments: the user's sign-in is no longer accepted by the identity provider (it "
    "expired or was revoked). Tell the user to sign in again, then call the tool again."
)
USER_REFUSED_ACTION: Final = (
    "Do not retry with other arguments: tell the user that their account has no access to this API, or that they "
    "must consent to it at the identity provider, and ask the operator if it should."
)
_MAX_TOKEN_CHARS = 16 * 1024
TOKEN_UNAVAILABLE_ACTION: Final = (
    "Do not retry with other arguments: this server could not obtain its credentials for the API from the API's "
    "authorization server. Tell the user that the API's credentials need attention (the operator must check the "
    "tool's OAuth client and token endpoint)."
)
_VISIBLE = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: a token68 or a bearer token
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")  # an RFC 6749 5.2 `error`: a code, safe to log


@dataclass(frozen=True, slots=True)
class TokenAnswer:
    """A token endpoint's usable answer: the access token, the seconds it may be used (`lifetime`), the
    `expires_in` it said (None: it did not), and a refresh token and granted scope when it gave them."""

    access_token: str
    lifetime: float
    expires_in: float | None = None
    refresh_token: str | None = None
    scope: str | None = None


class TokenFailure(Exception):
    """A token request that gave no usable token: why (`cause`, for the log) and what the endpoint said (`detail`:
    an RFC 6749 error code at most). Each waiting call turns it into its own structured error."""

    def __init__(self, cause: str, detail: str | None = None, *, refused: bool = False) -> None:
        super().__init__(cause)
        self.cause = cause
        self.detail = detail
        self.refused = refused  # the egress policy refuses the token URL: the operator's, like a missing secret

    @property
    def endpoints(self) -> bool:
        """Whether the failure is the token endpoint's (down, slow, garbled, refused by the egress policy), which
        every request to it would meet, not this request's own refusal (4xx: this client, this user)."""
        return not self.cause.startswith("http_4")


class TokenEndpoint:
    """One authorization server's token endpoint as an operation's credential asks it: Crank's own client
    authenticated with HTTP Basic (RFC 6749 2.3.1), through the operation's `UpstreamClient` (the egress policy
    applies), within the operation's timeout and `MAX_TOKEN_RESPONSE_BYTES`. `request` gives the access token and
    how long it may be used (a `TokenAnswer`), or a `TokenFailure` with the operator's warning line."""

    def __init__(self, auth: AuthConfig, client: UpstreamClient, *, workspace: str, where: str, timeout: float) -> None:
        assert auth.client_id is not None and auth.token_url is not None  # AuthConfig requires both for these kinds
        try:
            parts = parse_upstream_url(auth.token_url)
        except ValueError as exc:
            raise ConfigurationError(f"{where}: token_url: {exc}") from None
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.url = auth.token_url
        self.client_id = auth.client_id
        self.workspace = workspace
        self.secret = SecretValue(auth.secret, workspace=workspace, where=where)
        self._client = client
        self._timeout = timeout
        self._where = where
        self._refusal = client.egress.target_refusal(auth.token_url)  # a stricter replica: checked on each call

    async def request(self, form: Mapping[str, str], *, issued: str | None = None) -> TokenAnswer:
        """One token request of `form`: the access token and how long it may be used; a `TokenFailure` saying why
        not. `issued`: the `issued_token_type` the answer must name (a token exchange's)."""
        if self._refusal is not None:
            raise self._failed("egress", refused=True)
        secret = self.secret.value()
        pair = f"{quote_plus(self.client_id)}:{quote_plus(secret)}"  # RFC 6749 2.3.1: form-urlencoded first
        headers = {
            "Authorization": f"Basic {base64.b64encode(pair.encode()).decode()}",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        try:
            answer = await self._client.request(
                "POST", self.url, params=None, headers=headers, body=urlencode(form).encode(), timeout=self._timeout,
                tenant=self.workspace,
            )  # fmt: skip
        except UpstreamRefusedError:
            raise self._failed("egress", refused=True) from None
        except UpstreamBusyError:
            raise self._failed("busy") from None
        except UpstreamTimeoutError:
            raise self._failed("timeout") from None
        except UpstreamConnectionError as exc:
            raise self._failed(exc.cause or "unreachable") from None
        except (UpstreamTooLargeError, UpstreamRequestTooLargeError):
            raise self._failed("too_large") from None
        if len(answer.body) > MAX_TOKEN_RESPONSE_BYTES:
            raise self._failed("too_large")
        try:
            payload = _json.loads(answer.body)
        except ValueError:
            payload = None
        if answer.status != 200:
            error = payload.get("error") if isinstance(payload, dict) else None
            code = error if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else None
            raise self._failed(f"http_{answer.status}", code)
        if not isinstance(payload, dict):
            raise self._failed("not_json")
        token = payload.get("access_token")
        if not isinstance(token, str) or not token:
            raise self._failed("no_access_token")
        if len(token) > _MAX_TOKEN_CHARS or not _VISIBLE.fullmatch(token):
            raise self._failed("bad_access_token")
        token_type = payload.get("token_type")
        if isinstance(token_type, str) and token_type.lower() != "bearer":  # `N_A` (RFC 8693 2.2.1) is no bearer
            raise self._failed("token_type", token_type if _ERROR_CODE.fullmatch(token_type) else None)
        if issued is not None and payload.get("issued_token_type") != issued:
            raise self._failed("issued_token_type")  # an ID token, say: never sent as an access token
        refresh = payload.get("refresh_token")
        if refresh is not None and (not isinstance(refresh, str) or len(refresh) > _MAX_TOKEN_CHARS
                                    or not _VISIBLE.fullmatch(refresh)):  # fmt: skip
            raise self._failed("bad_refresh_token")
        scope = payload.get("scope")
        expires_in = _seconds(payload.get("expires_in"))
        return TokenAnswer(token, lifetime(expires_in), expires_in, refresh, scope if isinstance(scope, str) else None)

    def _failed(self, cause: str, detail: str | None = None, *, refused: bool = False) -> TokenFailure:
        """The failure, with the operator's warning line (at most one per interval and token URL)."""
        if refused:
            logger.warning("%s: token_url %s is refused by this server's egress policy", self._where, self.origin,
                           extra={"origin": self.origin})  # fmt: skip
        else:
            _notices.warning(
                f"upstream_token:{self.origin}", "%s: no OAuth access token from %s (%s%s)", self._where,
                self.origin, cause, f", {detail}" if detail else "", origin=self.origin, cause=cause,
            )  # fmt: skip
        return TokenFailure(cause, detail, refused=refused)

    def unavailable(self, failure: TokenFailure, scheme: str, *, user: bool = False) -> ToolError:
        """What a call is told of a token request that failed (never a secret, nor the token endpoint's address).
        `user`: the request was a token exchange of the signed-in user's token, whose own refusals are the user's
        to know of (`_USER_REFUSALS`, and `invalid_grant`: sign in again)."""
        if failure.refused:
            return ToolConfigurationError(
                "The tool cannot obtain its upstream credentials: this server's egress policy does not allow the "
                "address of the API's authorization server."
            )
        error: ToolError
        if user and failure.detail in _USER_REFUSALS:
            error = UserCredentialsError(
                "The API's authorization server refused to give this server a token for the signed-in user: the "
                "user has no access to the API, or has not consented to it. Nothing was sent.",
                error_code="upstream_token_refused", suggested_action=USER_REFUSED_ACTION,
            )  # fmt: skip
        elif user and failure.detail == "invalid_grant":
            error = sign_in_again()
        else:
            error = ExternalServiceError(
                "The API's credentials could not be obtained: its authorization server gave this server no access "
                "token.", error_code="upstream_token_unavailable", recoverable=False,
                suggested_action=TOKEN_UNAVAILABLE_ACTION,
            )  # fmt: skip
        error.may_have_taken_effect = False  # nothing went to the API
        error.log_context = {"cause": failure.cause, "origin": self.origin, "scheme": scheme}
        if failure.detail:
            error.log_context["detail"] = failure.detail
        return error


def sign_in_again() -> UserCredentialsError:
    return UserCredentialsError(
        "The signed-in user's token is no longer accepted for the API (it expired or was revoked). Nothing was "
        "sent.", error_code="user_sign_in_expired", suggested_action=USER_SIGN_IN_ACTION,
    )  # fmt: skip


MAX_TOKEN_LIFETIME = 3600.0
"""Seconds a client-credentials token is used at most, whatever its `expires_in` says."""


def _seconds(expires_in: object) -> float | None:
    """An answer's `expires_in` as seconds, when it is a number (some servers send it as a string)."""
    if isinstance(expires_in, str) and expires_in.isascii() and expires_in.isdigit() and len(expires_in) <= 9:
        expires_in = int(expires_in)
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or not math.isfinite(expires_in):
        return None
    return float(expires_in)


def lifetime(expires_in: float | None) -> float:
    """Seconds a token may be used: its `expires_in` less the margin (none left: used by the calls that waited for
    it, then fetched again), or the default when the answer gives none that is a number."""
    if expires_in is None:
        return DEFAULT_TOKEN_LIFETIME
    seconds = min(expires_in, MAX_TOKEN_LIFETIME)  # a token kept at most an hour: the cache turns over
    # The margin, but never more than half the lifetime: a short-lived token still serves a few calls.
    return max(seconds - TOKEN_EXPIRY_MARGIN, seconds / 2)
