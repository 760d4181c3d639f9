"""`crank.gateway.tokens.TokenVerifier` on its own, against the test issuer on loopback (tests/gateway/issuer.py):
what no request through the gateway shows directly (tests/deploy/test_hostile_clients.py tries the same through
`crank serve`)."""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable

import pytest
from jwt import PyJWK

from crank.exceptions import AuthChallengeError, DependencyUnavailableError
from crank.gateway import tokens as tokens_module
from crank.gateway.client import UpstreamClient
from crank.gateway.tokens import RSA_MAX_EXPONENT, TokenLimits, TokenVerifier, usable_key
from tests.gateway.issuer import Issuer, rsa_jwk

pytestmark = pytest.mark.anyio
AUDIENCE = "https://mcp.example.com/mcp/v1/acme/support"


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream = UpstreamClient()
    yield upstream
    await upstream.aclose()


@pytest.fixture
def issuer(serve: Callable[..., str]) -> Issuer:
    issuer = Issuer()
    issuer.url = serve(issuer.app)
    return issuer


async def test_new_signatures_are_checked_within_a_budget_and_known_tokens_never_count(
    issuer: Issuer, client: UpstreamClient
) -> None:
    verifier = TokenVerifier(client, limits=TokenLimits(checks_per_second=3))
    tokens = [issuer.token(AUDIENCE, subject=f"user-{n}") for n in range(4)]
    for token in tokens[:3]:
        assert (await verifier.verify(token, (issuer.url,))).audiences == (AUDIENCE,)
    with pytest.raises(DependencyUnavailableError) as refused:  # a flood of new tokens: 503, retry
        await verifier.verify(tokens[3], (issuer.url,))
    assert refused.value.retry_after == 1
    assert all(verifier.cached(token) is not None for token in tokens[:3])  # checked before: a look-up


async def test_one_addresss_flood_spends_its_own_budget_and_one_workspaces_its_own(
    issuer: Issuer, client: UpstreamClient
) -> None:
    verifier = TokenVerifier(client, limits=TokenLimits(checks_per_second=8, checks_per_address=2))
    forged = [issuer.forged(AUDIENCE) for _ in range(3)]
    for token in forged[:2]:
        with pytest.raises(AuthChallengeError):
            await verifier.verify(token, (issuer.url,), workspace="mallory", client="10.0.0.66")
    with pytest.raises(DependencyUnavailableError, match="from your address"):
        await verifier.verify(forged[2], (issuer.url,), workspace="mallory", client="10.0.0.66")
    # Another address is checked, in that workspace or another, until that workspace's budget is down to the half
    # kept for addresses known to send valid tokens (these are new).
    good = [issuer.token(AUDIENCE, subject=f"u{n}") for n in range(4)]
    await verifier.verify(good[0], (issuer.url,), workspace="mallory", client="10.0.0.1")
    await verifier.verify(good[1], (issuer.url,), workspace="mallory", client="10.0.0.2")
    with pytest.raises(DependencyUnavailableError, match="for this workspace"):
        await verifier.verify(good[2], (issuer.url,), workspace="mallory", client="10.0.0.3")
    assert (await verifier.verify(good[3], (issuer.url,), workspace="victim", client="10.0.0.3")).subject == "u3"


async def test_a_flood_from_many_new_addresses_leaves_half_a_workspaces_budget_to_known_ones(
    issuer: Issuer, client: UpstreamClient
) -> None:
    verifier = TokenVerifier(client, limits=TokenLimits(checks_per_second=10, checks_per_address=5))
    known = issuer.token(AUDIENCE, subject="returning")
    await verifier.verify(known, (issuer.url,), workspace="victim", client="10.9.9.9")  # signed in from here before
    flooded = 0
    for address in range(20):  # made-up tokens from many new addresses, a few each
        for _ in range(2):
            try:
                await verifier.verify(issuer.forged(AUDIENCE), (issuer.url,), workspace="victim",
                                      client=f"10.1.0.{address}")  # fmt: skip
            except DependencyUnavailableError:
                flooded += 1
            except AuthChallengeError:
                pass
    assert flooded > 0  # the flood met the reserve: it may spend the upper half of the budget only
    for n in range(4):  # the known address's users get their new tokens checked
        token = issuer.token(AUDIENCE, subject=f"fine-{n}")
        assert (await verifier.verify(token, (issuer.url,), workspace="victim", client="10.9.9.9")).subject
    with pytest.raises(DependencyUnavailableError, match="for this workspace"):  # a new address waits its turn
        await verifier.verify(issuer.token(AUDIENCE, subject="new"), (issuer.url,), workspace="victim",
                              client="10.7.7.7")  # fmt: skip


async def test_a_refused_token_is_remembered_and_refused_again_without_a_check(
    issuer: Issuer, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    verifier = TokenVerifier(client, limits=TokenLimits(checks_per_address=1))
    forged = issuer.forged(AUDIENCE)
    with pytest.raises(AuthChallengeError, match="Signature verification failed"):
        await verifier.verify(forged, (issuer.url,), client="10.0.0.66")
    checks: list[str] = []
    monkeypatch.setattr(tokens_module.jwt, "decode", lambda *args, **kwargs: checks.append("decode"))
    for _ in range(5):  # the address's budget is spent, yet the same token is refused as invalid (401), not 503
        with pytest.raises(AuthChallengeError, match="not valid"):
            await verifier.verify(forged, (issuer.url,), client="10.0.0.66")
    assert checks == []
    expired = issuer.token(AUDIENCE, ttl=-3600)
    monkeypatch.undo()
    with pytest.raises(AuthChallengeError, match="expired"):
        await verifier.verify(expired, (issuer.url,), client="10.0.0.7")
    with pytest.raises(AuthChallengeError, match="not valid"):  # an expired token is never valid again
        await verifier.verify(expired, (issuer.url,), client="10.0.0.7")


async def test_an_inactive_opaque_token_is_introspected_once(issuer: Issuer, client: UpstreamClient,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from crank.registry.runtime import IntrospectionClient

    monkeypatch.setenv("TEST_INTROSPECTION", "introspection-secret")
    introspection = IntrospectionClient(client_id="crank", client_secret="env:TEST_INTROSPECTION")
    verifier = TokenVerifier(client)
    made_up = secrets.token_hex(16)
    for _ in range(10):
        with pytest.raises(AuthChallengeError, match="not"):
            await verifier.verify(made_up, (issuer.url,), introspection, client="10.0.0.66")
    assert issuer.requests.count("/introspect") == 1
    active = issuer.opaque_token(AUDIENCE)
    assert (await verifier.verify(active, (issuer.url,), introspection)).subject == "olga"


async def test_one_workspaces_tokens_never_push_out_anothers(issuer: Issuer, client: UpstreamClient) -> None:
    verifier = TokenVerifier(client, limits=TokenLimits(cache_bytes=8 * 1024, cache_total_bytes=10 * 1024,
                                                        checks_per_second=1000, checks_per_address=1000))  # fmt: skip
    kept = [issuer.token(AUDIENCE, subject=f"victim-{n}") for n in range(3)]
    for token in kept:
        await verifier.verify(token, (issuer.url,), workspace="victim")
    for n in range(40):  # 40 tokens of 1 KB and more: five times the hostile workspace's share, past the total
        await verifier.verify(issuer.token(AUDIENCE, subject=f"m{n}", pad="x" * 1000), (issuer.url,),
                              workspace="mallory")  # fmt: skip
    assert all(verifier.cached(token, workspace="victim") is not None for token in kept)
    assert verifier.cached(kept[0], workspace="mallory") is None  # a workspace's own cache: never another's
    assert verifier._valid.bytes() <= 10 * 1024 and verifier._valid.bytes("mallory") <= 10 * 1024 - 3 * 600


@pytest.mark.parametrize(
    ("jwk", "problem"),
    [
        (rsa_jwk(3072, secrets.randbits(3000) | (1 << 2999) | 1, "big"), "an RSA public exponent of 3000 bits"),
        (rsa_jwk(8192, 65537, "huge"), "an RSA modulus of 8192 bits"),
        (rsa_jwk(1024, 65537, "small"), "an RSA modulus of 1024 bits"),
        (rsa_jwk(2048, RSA_MAX_EXPONENT + 1, "e33"), "an RSA public exponent of 33 bits"),
        (rsa_jwk(4096, RSA_MAX_EXPONENT - 1, "worst"), None),  # the costliest key still used
        (rsa_jwk(2048, 65537, "usual"), None),
    ],
)
def test_a_key_is_used_only_within_bounds_of_cost(jwk: dict[str, object], problem: str | None) -> None:
    found = usable_key(PyJWK(jwk))
    assert found is None if problem is None else found is not None and found.startswith(problem)


def test_only_the_curves_of_es256_es384_and_es512_are_used() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec
    from jwt.algorithms import ECAlgorithm

    def jwk(curve: ec.EllipticCurve) -> PyJWK:
        return PyJWK(json.loads(ECAlgorithm.to_jwk(ec.generate_private_key(curve).public_key())))

    assert usable_key(jwk(ec.SECP256R1())) is None and usable_key(jwk(ec.SECP521R1())) is None
    assert usable_key(jwk(ec.SECP256K1())) == "the curve secp256k1"


async def test_an_issuers_metadata_is_read_again_after_its_max_age(
    issuer: Issuer, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    verifier = TokenVerifier(client)
    await verifier.verify(issuer.token(AUDIENCE), (issuer.url,))
    issuer.jwks_uri = "/jwks-moved"  # the issuer moves its keys, and says so in its metadata
    issuer.rotate()
    monkeypatch.setattr(tokens_module, "METADATA_MAX_AGE", 0.0)
    monkeypatch.setattr(tokens_module, "MIN_REFETCH", 0.0)
    await verifier.verify(issuer.token(AUDIENCE, subject="after"), (issuer.url,))  # an unknown kid: refetched
    assert issuer.requests[-2:] == ["/.well-known/oauth-authorization-server", "/jwks-moved"]


async def test_a_token_too_long_malformed_or_not_yet_valid_is_refused(issuer: Issuer, client: UpstreamClient) -> None:
    verifier = TokenVerifier(client)
    with pytest.raises(AuthChallengeError, match="too long"):
        await verifier.verify(issuer.token(AUDIENCE, pad="x" * 17_000), (issuer.url,))
    head = base64.urlsafe_b64encode(b'{"alg": "RS256"').rstrip(b"=").decode()  # a JWT's shape, not one
    with pytest.raises(AuthChallengeError, match="not a well-formed JWT"):
        await verifier.verify(f"{head}.e30.c2ln", (issuer.url,))
    later = issuer.token(AUDIENCE, nbf=int(time.time()) + 3600)
    with pytest.raises(AuthChallengeError, match="not valid yet"):
        await verifier.verify(later, (issuer.url,))
    assert issuer.requests.count("/jwks") == 1  # only the token with a good shape reached its key


async def test_keys_an_issuer_publishes_that_cannot_sign_are_passed_over_and_the_others_serve(
    issuer: Issuer, client: UpstreamClient
) -> None:
    issuer.extra_keys = [
        "not a key",
        {"kty": "oct", "k": "c2VjcmV0", "kid": "shared"},  # symmetric: anyone who reads it could sign
        {**rsa_jwk(2048, 65537, "enc"), "use": "enc"},
        {"kty": "RSA", "n": "!!", "e": "AQAB", "kid": "broken"},
    ]
    verifier = TokenVerifier(client)
    assert (await verifier.verify(issuer.token(AUDIENCE), (issuer.url,))).subject == "alice"
    for kid in ("shared", "enc", "broken"):
        with pytest.raises(AuthChallengeError, match="does not publish"):
            await verifier.verify(issuer.forged(AUDIENCE, kid=kid), (issuer.url,))


@pytest.mark.parametrize("broken", ["no jwks_uri", "not a JWKS"])
async def test_an_issuer_without_usable_keys_is_unavailable_and_asked_again_only_later(
    issuer: Issuer, client: UpstreamClient, broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    if broken == "no jwks_uri":
        issuer.omitted.add("jwks_uri")
    else:
        issuer.jwks_uri = "/.well-known/openid-configuration"  # a document, but no keys in it
    verifier = TokenVerifier(client)
    with pytest.raises(DependencyUnavailableError, match="retry later"):  # the client is told no more
        await verifier.verify(issuer.token(AUDIENCE), (issuer.url,))
    assert broken in caplog.text  # the operator is
    issuer.broken = "error"  # its metadata goes down too: asked once, then remembered a few seconds
    other = TokenVerifier(client)
    for _ in range(3):
        with pytest.raises(DependencyUnavailableError):
            await other.verify(issuer.token(AUDIENCE), (issuer.url,))
    assert issuer.requests.count("/.well-known/openid-configuration") <= 3  # the two discovery URLs, once


@pytest.mark.parametrize(
    ("answer", "refusal"),
    [
        ({"token_type": "refresh_token"}, "not an access token"),
        ({"exp": 1_000_000}, "has expired"),
        ({"iss": "https://elsewhere.example"}, "does not trust"),
    ],
)
async def test_an_introspection_answer_that_does_not_vouch_for_an_access_token_is_a_refusal(
    issuer: Issuer, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch, answer: dict[str, object], refusal: str
) -> None:
    from crank.registry.runtime import IntrospectionClient

    monkeypatch.setenv("TEST_INTROSPECTION", "introspection-secret")
    introspection = IntrospectionClient(client_id="crank", client_secret="env:TEST_INTROSPECTION")
    token = issuer.opaque_token(AUDIENCE)
    issuer.opaque[token].update(answer)
    with pytest.raises(AuthChallengeError, match=refusal):
        await TokenVerifier(client).verify(token, (issuer.url,), introspection)


async def test_an_introspection_that_cannot_answer_is_unavailable_never_a_pass(
    issuer: Issuer, client: UpstreamClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from crank.registry.runtime import IntrospectionClient

    introspection = IntrospectionClient(client_id="crank", client_secret="env:TEST_INTROSPECTION")
    token = issuer.opaque_token(AUDIENCE)
    monkeypatch.delenv("TEST_INTROSPECTION", raising=False)
    with pytest.raises(DependencyUnavailableError):  # the secret is not set on this server
        await TokenVerifier(client).verify(token, (issuer.url,), introspection)
    assert "the introspection client's secret" in caplog.text
    monkeypatch.setenv("TEST_INTROSPECTION", "introspection-secret")
    issuer.opaque[token] = ["active", True]  # type: ignore[assignment]  # an answer that is no object
    with pytest.raises(DependencyUnavailableError):
        await TokenVerifier(client).verify(token, (issuer.url,), introspection)
    assert "its introspection answer is not an object" in caplog.text
    issuer.omitted.add("introspection_endpoint")
    with pytest.raises(DependencyUnavailableError):
        await TokenVerifier(client).verify(issuer.opaque_token(AUDIENCE), (issuer.url,), introspection)
    assert "its metadata names no introspection_endpoint" in caplog.text
