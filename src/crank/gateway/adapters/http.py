"""The `http` adapter: one request to an upstream REST API through the shared, pooled `UpstreamClient`.

Path parameters are percent-encoded; header values with line breaks are refused (header injection);
retries only for idempotent operations, only on connection failures, timeouts and 502/503/504; TLS
verification is the client's (on by default). Credentials are the operation's `Credential`
(crank.gateway.credentials): an oauth2 token that meets a 401 is renewed once and an idempotent call sent again
once. Upstream failures become structured errors whose
messages a model can act on; raw upstream bodies are never passed through beyond a short excerpt.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from crank import _json
from crank.exceptions import (
    AdapterError,
    ConfigurationError,
    ExternalServiceError,
    MappingError,
    ToolConfigurationError,
    ToolError,
    UpstreamBusyError,
    UpstreamConnectionError,
    UpstreamRefusedError,
    UpstreamRequestTooLargeError,
    UpstreamTimeoutError,
    UpstreamTooLargeError,
)
from crank.gateway.adapters.base import Adapter
from crank.gateway.bodies import BodyWriter
from crank.gateway.client import MAX_REQUEST_HEAD_BYTES, UpstreamClient, UpstreamResponse, parse_upstream_url
from crank.gateway.credentials import Sent, TokenCache, compile_credential
from crank.gateway.mapping import RequestParts
from crank.registry.runtime import DEFAULT_ACCEPT, DEFAULT_HTTP_METHOD, ExecutionConfig, Target
from crank.wire.auth import Principal
from crank.wire.http import IDEMPOTENT_METHODS, is_token

__all__ = ["HTTPAdapter", "trimmed"]

logger = logging.getLogger("crank.gateway")
_RETRY_STATUSES = frozenset({502, 503, 504})
_EXCERPT = 300
_BUSY_RETRY_AFTER = 5  # seconds: what `upstream_busy` suggests waiting before a retry


class HTTPAdapter(Adapter):
    def __init__(
        self, client: UpstreamClient, target: Target, config: ExecutionConfig, *, where: str, workspace: str = "",
        tokens: TokenCache | None = None,
    ) -> None:  # fmt: skip
        """`workspace`: the operation's, whose secrets it may name (crank.gateway.secrets) and whose share of
        the upstream's connections its calls use. `tokens`: the process's OAuth client-credentials tokens (a
        fresh cache when None)."""
        self.client = client
        self.method = (target.method or DEFAULT_HTTP_METHOD).upper()
        if not is_token(self.method):
            raise ConfigurationError(f"{where}: {self.method!r} is not an HTTP method")
        self.url = _checked_url(target.url, where=where)
        # An address the egress policy refuses: a publish refuses it (crank.admin.actions); a replica whose
        # policy is stricter than the publisher's serves the tool, whose calls fail as configuration_error.
        self._refusal = client.egress.target_refusal(self.url)
        self.timeout = config.timeout
        idempotent = config.idempotent if config.idempotent is not None else self.method in IDEMPOTENT_METHODS
        self.idempotent = idempotent
        self.retries = config.retries if idempotent else 0
        self._workspace = workspace
        self._credential = compile_credential(config.auth, client, workspace=workspace, where=where,
                                              timeout=config.timeout, tokens=tokens)  # fmt: skip
        self._where = where
        # The client already sends `Accept: application/json`; another value goes as a header of its own.
        self._accept = {"Accept": config.accept} if config.accept != DEFAULT_ACCEPT else None
        self._body = BodyWriter(config.body)
        self._origin = _origin(self.url)
        # What every URL with its path parameters filled starts with: the target's own scheme and authority, as
        # written (`urlsplit` lower-cases the scheme), and the character that ends them (`/`, `?` or `#`).
        self._origin_prefix = self.url[: self.url.index("://") + 4 + len(parse_upstream_url(self.url).netloc)]

    def prepared(self, caller: Principal | None = None) -> bool:
        return self._credential.ready(caller) is not None

    async def prepare(self, caller: Principal | None = None) -> None:
        if self._credential.ready(caller) is None:
            await self._credential.obtain(caller)

    def check(self, parts: RequestParts) -> None:
        self._request(parts)

    async def call(self, parts: RequestParts, caller: Principal | None = None) -> Any:
        if self._refusal is not None:
            raise self._refused(self._refusal)
        url, mapped_headers, mapped_query, body = self._request(parts)
        credential = self._credential
        sent = credential.ready(caller)  # the common case: known at once, no coroutine
        if sent is None:
            sent = await credential.obtain(caller)  # a token to fetch (or to wait for another call's fetch)
        headers, query = _credentialed(mapped_headers, mapped_query, sent)
        # Whether an earlier attempt may have acted upstream (sent, then timed out, dropped or answered 5xx): a
        # later attempt that was never sent does not undo it, so the error says so and the key stays claimed.
        maybe_applied = False
        renewed = False  # an oauth2 token renewed after a 401: at most once per call
        attempt = 0
        while True:
            last = attempt == self.retries
            attempt += 1
            try:
                response = await self.client.request(self.method, url, params=query, headers=headers, body=body,
                                                     timeout=self.timeout, tenant=self._workspace)  # fmt: skip
            except UpstreamBusyError as exc:  # not retried: the wait took the whole timeout already
                raise self._logged(self._busy(maybe_applied), exc.cause) from None
            except UpstreamTimeoutError as exc:
                maybe_applied = maybe_applied or exc.sent
                if last:
                    raise self._logged(_external(
                        f"The upstream did not answer within {self.timeout:g} s.", "upstream_timeout",
                        "Retry later, or narrow the request.", applied=maybe_applied,
                    ), exc.cause) from None  # fmt: skip
                continue
            except UpstreamConnectionError as exc:
                maybe_applied = maybe_applied or exc.sent
                if last:
                    unavailable = _external("The upstream service cannot be reached.", "upstream_unavailable",
                                            "Retry in a minute.", applied=maybe_applied)  # fmt: skip
                    raise self._logged(unavailable, exc.cause, str(exc)) from None
                continue
            except UpstreamRefusedError as exc:  # the operator's to fix, like a missing secret; never retried
                raise self._refused(str(exc)) from None
            except UpstreamRequestTooLargeError:  # nothing was sent, on this attempt or (same request) any other
                raise _arguments_too_large() from None
            except UpstreamTooLargeError:
                raise AdapterError("The upstream's answer is too large to pass on.", error_code="upstream_bad_response",
                                   suggested_action="Narrow the request (filters, a smaller page) and try again.",
                                   ) from None  # fmt: skip
            if response.status == 401 and credential.renewable and not renewed:
                if self.idempotent:  # a token revoked or rotated early: renewed once (for every call), sent again once
                    renewed = True
                    attempt -= 1  # not one of the operation's retries
                    try:
                        sent = await credential.renew(sent, caller)
                    except ToolError as exc:
                        exc.may_have_taken_effect = exc.may_have_taken_effect or maybe_applied
                        raise
                    headers, query = _credentialed(mapped_headers, mapped_query, sent)
                    continue
                credential.drop(sent, caller)  # not sent again; the next call fetches a fresh token
            if response.status in _RETRY_STATUSES and not last:
                maybe_applied = maybe_applied or response.status != 503  # a 503 says it did not act
                continue
            try:
                return _decode(response)
            except ExternalServiceError as exc:
                exc.may_have_taken_effect = exc.may_have_taken_effect or maybe_applied
                error = self._logged(exc, f"http_{response.status}")
                if response.status in (401, 403) and error.log_context is not None:  # whose credentials, never them
                    error.log_context["scheme"] = credential.scheme
                raise error from None

    def _busy(self, maybe_applied: bool) -> ExternalServiceError:
        """No connection within the timeout: this attempt was not sent, but an earlier one may have acted."""
        waited = f"the call waited {self.timeout:g} s for a connection"
        if maybe_applied:
            return _external(
                f"This workspace's calls to the upstream are all busy: {waited} to retry, after an attempt that "
                "the upstream may have acted on.", "upstream_busy",
                "Check whether the change happened (read it back) before retrying, with fewer calls at once.",
                applied=True, details={"retry_after": _BUSY_RETRY_AFTER},
            )  # fmt: skip
        return _external(
            f"This workspace's calls to the upstream are all busy: {waited} and was not sent.", "upstream_busy",
            "Nothing was sent or changed: retry in a few seconds, with fewer calls at once.", applied=False,
            details={"retry_after": _BUSY_RETRY_AFTER},
        )  # fmt: skip

    def _refused(
        self, reason: str, message: str = "this server's egress policy does not allow its address"
    ) -> ToolConfigurationError:
        """The upstream's address is refused (the egress policy, a URL off the operation's origin): one warning
        line for the operator, never a client."""
        logger.warning("%s: %s", self._where, reason, extra={"origin": self._origin})
        return ToolConfigurationError(f"The tool cannot call its upstream: {message}.")

    def _logged(self, error: ExternalServiceError, cause: str, detail: str | None = None) -> ExternalServiceError:
        """The error with what the operator's log line names: why, and which upstream (never sent to clients)."""
        error.log_context = {"cause": cause, "origin": self._origin}
        if detail:
            error.log_context["detail"] = detail
        return error

    def _request(self, parts: RequestParts) -> tuple[str, dict[str, str], list[tuple[str, str]], bytes | None]:
        url = self.url
        if parts.path:
            for name, value in parts.path.items():
                url = url.replace("{" + name + "}", _path_segment(name, value))
            # The credentials go to the origin they were bound to, or nowhere. Arguments fill path segments only
            # (`_path_segment` encodes `/`, `@` and `:`) and the target's origin has no placeholder (the build
            # refuses one), so this holds for every version built: one prefix test, never a parse.
            if not url.startswith(self._origin_prefix):
                raise self._refused("the resolved URL left the operation's origin", "its URL left its origin")
        if "{" in url:
            missing = url[url.index("{") + 1 : url.index("}")] if "}" in url else url
            raise MappingError(f"no value for path parameter {missing!r}", recoverable=True,
                               suggested_action=f"Pass {missing!r}.")  # fmt: skip
        headers = parts.headers
        if self._accept is not None and not any(name.lower() == "accept" for name in headers):
            headers = {**self._accept, **headers}  # a mapping's own Accept header wins
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise MappingError(f"header {name!r} may not contain line breaks", recoverable=True)
        body = None
        if parts.body is not None:
            body, content_type = self._body.write(parts.body)
            headers = {"Content-Type": content_type, **headers}
        return url, headers, _query_items(parts.query), body


def _query_items(query: dict[str, Any]) -> list[tuple[str, str]]:
    """Query parameters as pairs: a list repeats its key (`tag=a&tag=b`), None leaves the key out."""
    items = []
    for key, value in query.items():
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                items.append((key, _json.as_text(item)))
    return items


def _credentialed(
    headers: dict[str, str], query: list[tuple[str, str]], sent: Sent
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The mapped request's headers and query with the credentials': theirs replace the mapping's of the same name
    (a header whatever its case), so no argument can stand in for the operation's credentials."""
    if sent.headers:
        names = sent.header_names
        headers = {name: value for name, value in headers.items() if name.lower() not in names}
        headers.update(sent.headers)
    if sent.query:
        names = sent.query_names
        query = [item for item in query if item[0] not in names]
        query.extend(sent.query)
    return headers, query


def _checked_url(url: str, *, where: str) -> str:
    """The client's rules for an upstream URL, checked when the version is built rather than on the first call."""
    try:
        parse_upstream_url(url)
    except ValueError as exc:
        raise ConfigurationError(f"{where}: target url: {exc}") from None
    return url


def _arguments_too_large() -> MappingError:
    return MappingError(
        f"The arguments make an upstream request head (URL and headers) of more than {MAX_REQUEST_HEAD_BYTES} "
        "bytes, which is not sent.", error_code="arguments_too_large", recoverable=True,
        suggested_action="Pass shorter values for the arguments that go into the URL's query or path, or into headers.",
    )  # fmt: skip


def _path_segment(name: str, value: Any) -> str:
    """One percent-encoded path segment. `.` and `..` are refused: a server would resolve them and reach
    another endpoint with this operation's credentials. One too long for any request head is refused before
    it is encoded (the client checks the whole head again)."""
    text = _json.as_text(value)
    if len(text) > MAX_REQUEST_HEAD_BYTES:
        raise _arguments_too_large()
    if text in ("", ".", ".."):
        raise MappingError(f"path parameter {name!r} may not be {text!r}", recoverable=True,
                           suggested_action=f"Pass the real value of {name!r}.")  # fmt: skip
    return quote(text, safe="")


def _origin(url: str) -> str:
    """scheme://host[:port] of a target URL (checked: it carries no credentials)."""
    parts = parse_upstream_url(url)
    return f"{parts.scheme}://{parts.netloc}"


def _external(message: str, code: str, action: str, *, applied: bool, **extra: Any) -> ExternalServiceError:
    error = ExternalServiceError(message, error_code=code, recoverable=True, suggested_action=action, **extra)
    error.may_have_taken_effect = applied
    return error


def _decode(response: UpstreamResponse) -> Any:
    """The JSON answer, or the structured error of a failure. Whether the upstream may have acted: not
    on 429, 503 and other 4xx (it says it did not), perhaps on other 5xx and on 3xx (a 303 after a POST)."""
    status = response.status
    if status == 429:
        retry_after = response.headers.get("retry-after", "")
        known = retry_after.isascii() and retry_after.isdigit()
        raise _external(
            "The upstream is rate limiting calls.", "upstream_rate_limited",
            f"Wait {retry_after} s, then retry." if known else "Wait a little, then retry.", applied=False,
            details={"retry_after": int(retry_after)} if known else None,
        )  # fmt: skip
    if status >= 500:
        raise _external(f"The upstream failed (HTTP {status}).", "upstream_unavailable", "Retry later.",
                        applied=status != 503)  # fmt: skip
    if status in (401, 403):
        raise _credentials_refused(status)
    if status >= 400:
        raise _external(
            f"The upstream refused the request (HTTP {status}): {_excerpt(response)}", "upstream_rejected",
            "Check the arguments against the tool's description and try again.", applied=False,
        )  # fmt: skip
    if status >= 300:  # redirects are not followed: a tool's request goes only where the operation says
        raise _external(f"The upstream answered with a redirect (HTTP {status}).", "upstream_rejected",
                        "Tell the operator: the operation's URL may be out of date.", applied=True,
                        details={"status": status})  # fmt: skip
    if status == 204 or not response.body:
        return None
    try:
        return response.json()
    except ValueError:
        kind = trimmed(response.headers.get("content-type", "")) or "none"
        raise AdapterError(
            f"The upstream did not answer with JSON (Content-Type: {kind}).",
            error_code="upstream_bad_response",
            suggested_action="Retry later; if it keeps failing, report the request_id to the operator (the "
            "operation's execution_config.accept may need to name the upstream's JSON type).",
        ) from None


UPSTREAM_CREDENTIALS_ACTION = (
    "Do not retry with other arguments: the API refused this server's credentials for it. Tell the user that the "
    "API's credentials need attention (the operator must check the tool's upstream credentials)."
)


def _credentials_refused(status: int) -> ExternalServiceError:
    """An upstream 401 or 403: the credentials Crank sent (or none) do not open the API, which no other arguments
    will change; not recoverable by the model (seed 004's structured error, for the person behind it)."""
    unauthorized = status == 401
    error = ExternalServiceError(
        "The API refused this server's credentials (HTTP 401): they are missing, wrong or expired."
        if unauthorized
        else "The API refused this call with this server's credentials (HTTP 403): they do not allow it.",
        error_code="upstream_unauthorized" if unauthorized else "upstream_forbidden",
        recoverable=False,
        suggested_action=UPSTREAM_CREDENTIALS_ACTION,
    )
    error.may_have_taken_effect = False
    return error


def _excerpt(response: UpstreamResponse) -> str:
    try:
        payload = response.json()
        text = (
            payload.get("message") or payload.get("error") or payload.get("detail")
            if isinstance(payload, dict)
            else None
        )
        text = str(text) if text else response.text
    except ValueError:
        text = response.text
    return trimmed(text)


def trimmed(text: str) -> str:
    """One line, at most 300 characters: enough for a model to act on, too short to leak a page."""
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"
