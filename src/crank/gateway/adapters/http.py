"""The `http` adapter: one request to an upstream REST API through the shared, pooled `UpstreamClient`.

Path parameters are percent-encoded; header values with line breaks are refused (header injection);
retries only for idempotent operations, only on connection failures, timeouts and 502/503/504; TLS
verification is the client's (on by default). Upstream failures become structured errors whose
messages a model can act on; raw upstream bodies are never passed through beyond a short excerpt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from crank import _json
from crank.exceptions import AdapterError, ConfigurationError, ExternalServiceError, MappingError
from crank.gateway.adapters.base import Adapter
from crank.gateway.client import UpstreamClient, UpstreamConnectionError, UpstreamResponse, UpstreamTimeoutError
from crank.gateway.mapping import RequestParts

__all__ = ["HTTPAdapter", "resolve_secret", "trimmed"]

_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_RETRY_STATUSES = frozenset({502, 503, 504})
_EXCERPT = 300


def resolve_secret(reference: str, *, where: str) -> str:
    """`env:NAME` or `file:/path`: secrets are referenced, never stored in the registry."""
    kind, _, name = reference.partition(":")
    if kind == "env" and name:
        value = os.environ.get(name)
        if value is None:
            raise ConfigurationError(f"{where}: environment variable {name!r} is not set")
        return value
    if kind == "file" and name:
        try:
            return Path(name).read_text().strip()
        except OSError as exc:
            raise ConfigurationError(f"{where}: cannot read secret file {name!r}: {exc.strerror}") from None
    raise ConfigurationError(f"{where}: a secret is 'env:NAME' or 'file:/path', got {reference!r}")


_JSON_HEADERS = {"Content-Type": "application/json"}


class HTTPAdapter(Adapter):
    def __init__(self, client: UpstreamClient, target: dict[str, Any], config: dict[str, Any], *, where: str) -> None:
        if not isinstance(target, dict) or not isinstance(target.get("url"), str):
            raise ConfigurationError(f"{where}: an http target needs a 'url' (and a 'method', GET by default)")
        self.client = client
        self.method = str(target.get("method", "GET")).upper()
        self.url = target["url"]
        self.timeout = float(config.get("timeout", 10))
        idempotent = config.get("idempotent", self.method in _IDEMPOTENT)
        self.retries = int(config.get("retries", 0)) if idempotent else 0
        self.auth_headers = _auth_headers(config.get("auth"), where=where)

    async def call(self, parts: RequestParts) -> Any:
        url, headers, query, body = self._request(parts)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = await self.client.request(
                    self.method, url, params=query, headers=headers, body=body, timeout=self.timeout
                )
            except UpstreamTimeoutError:
                if last:
                    raise ExternalServiceError(
                        f"The upstream did not answer within {self.timeout:g} s.", error_code="upstream_timeout",
                        recoverable=True, suggested_action="Retry later, or narrow the request.",
                    ) from None  # fmt: skip
                continue
            except UpstreamConnectionError:
                if last:
                    raise ExternalServiceError(
                        "The upstream service cannot be reached.", error_code="upstream_unavailable",
                        recoverable=True, suggested_action="Retry in a minute.",
                    ) from None  # fmt: skip
                continue
            if response.status in _RETRY_STATUSES and not last:
                continue
            return _decode(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, parts: RequestParts) -> tuple[str, dict[str, str], list[tuple[str, str]], bytes | None]:
        url = self.url
        for name, value in parts.path.items():
            url = url.replace("{" + name + "}", quote(str(value), safe=""))
        if "{" in url:
            missing = url[url.index("{") + 1 : url.index("}")] if "}" in url else url
            raise MappingError(f"no value for path parameter {missing!r}", recoverable=True,
                               suggested_action=f"Pass {missing!r}.")  # fmt: skip
        headers = {**parts.headers, **self.auth_headers}
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise MappingError(f"header {name!r} may not contain line breaks", recoverable=True)
        body = None
        if parts.body is not None:
            body = _json.dumps(parts.body)
            headers = {**_JSON_HEADERS, **headers}
        return url, headers, _query_items(parts.query), body


def _query_items(query: dict[str, Any]) -> list[tuple[str, str]]:
    """Query parameters as pairs: a list repeats its key (`tag=a&tag=b`), None leaves the key out."""
    items = []
    for key, value in query.items():
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                items.append((key, _query_value(item)))
    return items


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return _json.dumps(value).decode()
    return str(value)


def _auth_headers(auth: Any, *, where: str) -> dict[str, str]:
    if not auth:
        return {}
    if not isinstance(auth, dict) or auth.get("type") not in ("bearer", "header"):
        raise ConfigurationError(f"{where}: auth is {{'type': 'bearer'|'header', 'secret': 'env:NAME', ...}}")
    secret = resolve_secret(str(auth.get("secret", "")), where=where)
    if auth["type"] == "bearer":
        return {"Authorization": f"Bearer {secret}"}
    return {str(auth.get("name", "X-Api-Key")): secret}


def _decode(response: UpstreamResponse) -> Any:
    status = response.status
    if status == 429:
        retry_after = response.headers.get("retry-after", "")
        known = retry_after.isdigit()
        raise ExternalServiceError(
            "The upstream is rate limiting calls.",
            error_code="upstream_rate_limited",
            recoverable=True,
            suggested_action=f"Wait {retry_after} s, then retry." if known else "Wait a little, then retry.",
            details={"retry_after": int(retry_after)} if known else None,
        )
    if status >= 500:
        raise ExternalServiceError(f"The upstream failed (HTTP {status}).", error_code="upstream_unavailable",
                                   recoverable=True, suggested_action="Retry later.")  # fmt: skip
    if status >= 400:
        raise ExternalServiceError(
            f"The upstream refused the request (HTTP {status}): {_excerpt(response)}", error_code="upstream_rejected",
            recoverable=True, suggested_action="Check the arguments against the tool's description and try again.",
        )  # fmt: skip
    if status == 204 or not response.body:
        return None
    try:
        return response.json()
    except ValueError:
        raise AdapterError("The upstream did not answer with JSON.", error_code="upstream_bad_response") from None


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
