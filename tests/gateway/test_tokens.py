"""`crank.gateway.tokens.TokenVerifier` on its own, against the test issuer on loopback (tests/gateway/issuer.py):
what no request through the gateway shows directly."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from crank.exceptions import DependencyUnavailableError
from crank.gateway.client import UpstreamClient
from crank.gateway.tokens import TokenVerifier
from tests.gateway.issuer import Issuer

pytestmark = pytest.mark.anyio
AUDIENCE = "https://mcp.example.com/mcp/v1/acme/support"


async def test_new_signatures_are_checked_within_a_budget_and_known_tokens_never_count(
    serve: Callable[..., str],
) -> None:
    issuer = Issuer()
    issuer.url = serve(issuer.app)
    client = UpstreamClient()
    verifier = TokenVerifier(client, checks_per_second=3)
    try:
        tokens = [issuer.token(AUDIENCE, subject=f"user-{n}") for n in range(4)]
        for token in tokens[:3]:
            assert (await verifier.verify(token, (issuer.url,))).audiences == (AUDIENCE,)
        with pytest.raises(DependencyUnavailableError) as refused:  # a flood of new tokens: 503, retry
            await verifier.verify(tokens[3], (issuer.url,))
        assert refused.value.retry_after == 1
        assert all(verifier.cached(token) is not None for token in tokens[:3])  # checked before: a look-up
    finally:
        await client.aclose()
