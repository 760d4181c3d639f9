"""The `jsonrpc` adapter: one JSON-RPC 2.0 call to a remote method over HTTP.

Target: `{"url": "https://svc/rpc", "method": "Catalog.search"}`. The mapped body (by default every
argument) becomes `params`. A JSON-RPC error from the upstream becomes `upstream_rejected` carrying
its code and (trimmed) message; transport failures are those of the `http` adapter.
"""

from __future__ import annotations

import itertools
from typing import Any

from crank.exceptions import AdapterError, ConfigurationError, ExternalServiceError
from crank.gateway.adapters.http import HTTPAdapter, trimmed
from crank.gateway.client import UpstreamClient
from crank.gateway.credentials import TokenCache
from crank.gateway.mapping import RequestParts
from crank.registry.runtime import ExecutionConfig, Target
from crank.wire.auth import Principal
from crank.wire.jsonrpc import is_response, request_message

__all__ = ["JSONRPCAdapter"]

_ids = itertools.count(1)


class JSONRPCAdapter(HTTPAdapter):
    def __init__(
        self, client: UpstreamClient, target: Target, config: ExecutionConfig, *, where: str, workspace: str = "",
        tokens: TokenCache | None = None,
    ) -> None:  # fmt: skip
        if target.method is None:
            raise ConfigurationError(f"{where}: a jsonrpc target needs a 'url' and the remote 'method' name")
        super().__init__(client, Target(url=target.url, method="POST"), config, where=where, workspace=workspace,
                         tokens=tokens)  # fmt: skip
        # A POST: the http adapter retries it only when the operation says `"idempotent": true`.
        self.remote_method = target.method

    async def call(self, parts: RequestParts, caller: Principal | None = None) -> Any:
        params = parts.body if parts.body is not None else {}
        body = request_message(next(_ids), self.remote_method, params)
        request = RequestParts(path=parts.path, query=parts.query, headers=parts.headers, body=body)
        answer = await super().call(request, caller)
        if not is_response(answer):
            raise AdapterError(
                "The upstream did not answer with a JSON-RPC response.", error_code="upstream_bad_response"
            )
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            code, message = error.get("code"), trimmed(str(error.get("message", "")))
            raise ExternalServiceError(
                f"The upstream refused the call ({code}): {message}",
                error_code="upstream_rejected",
                recoverable=True,
                suggested_action="Check the arguments against the tool's description and try again.",
                details={"code": code},
            )
        return answer.get("result")
