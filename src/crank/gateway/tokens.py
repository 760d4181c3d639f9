"""OAuth access tokens, checked as a resource server checks them (MCP authorization, RFC 9068, RFC 7662).

`TokenVerifier.verify` turns a token into `TokenClaims` or refuses it:
- a JWT is checked against its issuer's JWKS, found through the issuer's metadata (RFC 8414, then OpenID
  discovery): an allowed asymmetric algorithm only (never `none`, never an HMAC), `iss` one of the trusted
  issuers, `exp` and `nbf` with `LEEWAY` seconds; an ID token (`nonce`, `at_hash`, `c_hash`) is refused;
- an opaque token goes to the issuer's introspection endpoint, when the workspace configured a client for it.
The audience is checked by the caller, per resource (`crank.wire.auth.same_resource`).

Every document (metadata, JWKS, introspection answers) is fetched through the gateway's upstream client, so the
egress policy applies, with `FETCH_TIMEOUT` and `MAX_DOCUMENT_BYTES`. The metadata is kept `METADATA_MAX_AGE`
seconds and the JWKS `JWKS_MAX_AGE`; an unknown `kid` refetches the JWKS once, at most every `MIN_REFETCH` seconds
per issuer (signing keys rotate). A key of unbounded cost (`usable_key`: an RSA exponent or modulus past its bound,
a curve outside the list) is skipped, with one log line per issuer and fetch.

A validated token is kept until it expires (introspected ones at most `INTROSPECTION_MAX_AGE` seconds), in its
workspace's own cache (`TOKEN_CACHE_BYTES`, all together `TOKEN_CACHE_TOTAL_BYTES`: `crank.wire.tenant_cache`), so
a request pays the signature check once per token and no tenant's tokens push out another's. A token refused after
its check (a bad signature, expired, introspected inactive) is remembered by its digest for `REFUSED_MEMORY` seconds
and refused again without a check. New checks are budgeted per client address (`crank.wire.budgets`) and per
workspace and issuer, never per process: a flood of made-up tokens spends its own address's budget and the
budget of the workspace it names, not another's.

An issuer that cannot be reached or answers garbage is `DependencyUnavailableError` (503): the token may be good,
and a 401 would send the client through sign-in again for a fault that is not its own.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote_plus, urlencode, urlsplit

import jwt
from cachetools import LRUCache
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt import PyJWK

from crank import _json
from crank.exceptions import AuthChallengeError, ConfigurationError, DependencyUnavailableError, UpstreamError
from crank.gateway.client import UpstreamClient
from crank.gateway.secrets import resolve_secret
from crank.references import read_reference
from crank.registry.runtime import IntrospectionClient
from crank.wire.budgets import DEFAULT_MAX_KEYS, NO_ADDRESS, Budget, KeyedBudgets
from crank.wire.notices import ThrottledLog
from crank.wire.tenant_cache import TenantCaches

__all__ = [
    "ALLOWED_ALGORITHMS",
    "FETCH_TIMEOUT",
    "JWKS_MAX_AGE",
    "LEEWAY",
    "MAX_DOCUMENT_BYTES",
    "MIN_REFETCH",
    "TokenClaims",
    "TokenLimits",
    "TokenVerifier",
    "issuer_key",
    "same_issuer",
    "usable_key",
]

logger = logging.getLogger("crank.gateway.tokens")
_notices = ThrottledLog(logger)

ALLOWED_ALGORITHMS: Final = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                                       "ES512", "EdDSA"})  # fmt: skip
"""Asymmetric only: `none` proves nothing, and an HMAC "key" made from a public key is known to everyone."""
LEEWAY: Final = 30.0
"""Seconds of clock difference allowed on `exp` and `nbf`."""
FETCH_TIMEOUT: Final = 5.0
MAX_DOCUMENT_BYTES: Final = 256 * 1024
JWKS_MAX_AGE: Final = 600.0
METADATA_MAX_AGE: Final = 3600.0
"""Seconds an issuer's metadata is kept: a changed `jwks_uri` or introspection endpoint is read within this."""
MIN_REFETCH: Final = 10.0
FAILURE_MEMORY: Final = 5.0
"""Seconds an issuer that failed to answer is not asked again: a flood of new tokens costs it one fetch."""
TOKEN_CACHE_BYTES: Final = 4 * 1024 * 1024
"""What one workspace's validated tokens may take in memory (the tokens' own length and about 300 bytes each):
4 MiB is about 3,000 tokens of 1 KB. Past it, its least recently used are checked again when next seen."""
TOKEN_CACHE_TOTAL_BYTES: Final = 64 * 1024 * 1024
"""What every workspace's validated tokens may take together; past it the largest workspace's go first."""
_ENTRY_OVERHEAD = 300  # bytes a cached token's claims and keys cost beside the token itself
SIGNATURE_CHECKS_PER_SECOND: Final = 500.0
"""New JWTs a workspace's trusted issuer gets checked a second at most (about 0.2 ms of CPU each, so a tenth of a
core for one workspace); a token checked before costs a look-up and never counts. Past it a new token for that
workspace gets 503 (retry); another workspace's do not."""
SIGNATURE_CHECKS_PER_ADDRESS: Final = 50.0
"""New JWTs one client address (an IPv4 address, an IPv6 /64) gets checked a second at most, whichever workspace
they name: a flood from one address spends its own budget (503 for it), not the others'."""
INTROSPECTIONS_PER_SECOND: Final = 20.0
"""Introspection calls a workspace's issuer gets a second at most; past it a new opaque token is 503 (retry)."""
INTROSPECTIONS_PER_ADDRESS: Final = 5.0
"""Introspection calls the tokens of one client address cost a second at most (bursts of 10)."""
INTROSPECTION_MAX_AGE: Final = 60.0
"""Seconds an introspection answer is trusted: a token revoked at the issuer stops working within this."""
SIGNATURE_CHECKS_PER_PROCESS: Final = 2000.0
"""New JWTs a process checks a second at most, every workspace together (about 0.4 s of CPU): what many
addresses flooding many workspaces at once cost at most."""
INTROSPECTIONS_PER_PROCESS: Final = 100.0
"""Introspection calls a process makes a second at most, every workspace together."""
KNOWN_ADDRESS_MEMORY: Final = 3600.0
"""Seconds an address whose token was valid stays known: half of each workspace's budget is kept for known addresses,
so that a flood from many new addresses (or ones whose tokens were refused) takes the other half at most, and the
workspace's users signing in again from where they did before keep theirs."""
REFUSED_MEMORY: Final = 600.0
"""Seconds a token refused after its check (bad signature, expired, inactive) is refused again at no cost (for a
JWT, until its issuer's keys are read again: a key that changed may make it valid)."""
MAX_REFUSED_TOKENS: Final = 10_000
"""Refused tokens remembered per issuer, and opaque ones per process (a 32-byte digest, about 150 bytes each);
the oldest go first."""
RSA_MIN_BITS: Final = 2048
RSA_MAX_BITS: Final = 4096
"""An RSA key's modulus: at least 2048 bits (RFC 7518 §3.3), at most 4096 (a check costs about the square)."""
RSA_MAX_EXPONENT: Final = 2**32
"""An RSA key's public exponent, at most: a check costs one multiplication per bit of it (65537 has 17)."""
EC_CURVES: Final = frozenset({"secp256r1", "secp384r1", "secp521r1"})
"""The curves of ES256, ES384 and ES512: any other is skipped."""
_ID_TOKEN_CLAIMS = ("nonce", "at_hash", "c_hash")
_UNAVAILABLE_RETRY = 5


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """What a valid access token says, as the resource server needs it."""

    issuer: str
    subject: str | None
    client_id: str | None
    scopes: frozenset[str]
    audiences: tuple[str, ...]
    expires_at: float
    method: Literal["jwt", "introspection"]


def _invalid(description: str) -> AuthChallengeError:
    return AuthChallengeError(description, error="invalid_token")


def _unavailable(issuer: str, why: str) -> DependencyUnavailableError:
    logger.warning("OAuth issuer %s: %s", issuer, why)
    return DependencyUnavailableError(
        "issuer", "This server cannot check the token with its issuer right now; retry later.",
        retry_after=_UNAVAILABLE_RETRY,
    )  # fmt: skip


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    scope = claims.get("scope", claims.get("scp"))
    if isinstance(scope, str):
        return frozenset(scope.split())
    if isinstance(scope, list):
        return frozenset(item for item in scope if isinstance(item, str))
    return frozenset()


def _audiences(claims: dict[str, Any]) -> tuple[str, ...]:
    audience = claims.get("aud")
    if isinstance(audience, str):
        return (audience,)
    if isinstance(audience, list):
        return tuple(item for item in audience if isinstance(item, str))
    return ()


def same_issuer(one: str, other: str) -> bool:
    """Whether two issuer identifiers are one, with or without a trailing slash."""
    return issuer_key(one) == issuer_key(other)


def issuer_key(issuer: str) -> str:
    """An issuer identifier as kept and compared (`same_issuer`): without its trailing slash."""
    return issuer.rstrip("/")


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON object: a JWS compact serialization."""
    head, dot, _ = token.partition(".")
    if not dot or token.count(".") != 2 or len(head) > 2048:
        return False
    try:
        return base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).lstrip().startswith(b"{")
    except (binascii.Error, ValueError):
        return False


class _Issuer:
    """One issuer's metadata and signing keys, fetched when needed and kept."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self.metadata: dict[str, Any] | None = None
        self.metadata_fetched = -float("inf")
        self.keys: dict[str, PyJWK] = {}
        self.keys_fetched = -float("inf")
        self.refetched = -float("inf")  # the last fetch an unknown kid caused
        self.failed_until = -float("inf")
        self.lock = asyncio.Lock()  # one fetch at a time: concurrent new tokens share it
        self.metadata_lock = asyncio.Lock()  # one metadata read at a time (the keys' fetch holds `lock`)
        self.refused: LRUCache[bytes, float] = LRUCache(maxsize=MAX_REFUSED_TOKENS)
        """Digests of tokens refused after their check, until when (forgotten when the keys are read again)."""


_Key = tuple[str, Hashable]
"""A cached token: the token, and the introspection client that vouched for it (None for a JWT)."""


def _entry_bytes(key: Hashable, _claims: object) -> int:
    return len(key[0]) + _ENTRY_OVERHEAD if isinstance(key, tuple) else _ENTRY_OVERHEAD


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """What checking new tokens may cost a process (settings `CRANK_TOKEN_CHECKS_PER_SECOND` and the rest,
    docs/security.md): signature checks and introspections a second per workspace and issuer, and per client
    address; the validated tokens kept per workspace, and for all workspaces together (bytes)."""

    checks_per_second: float = SIGNATURE_CHECKS_PER_SECOND
    checks_per_address: float = SIGNATURE_CHECKS_PER_ADDRESS
    checks_per_process: float = SIGNATURE_CHECKS_PER_PROCESS
    introspections_per_second: float = INTROSPECTIONS_PER_SECOND
    introspections_per_address: float = INTROSPECTIONS_PER_ADDRESS
    introspections_per_process: float = INTROSPECTIONS_PER_PROCESS
    cache_bytes: int = TOKEN_CACHE_BYTES
    cache_total_bytes: int = TOKEN_CACHE_TOTAL_BYTES


class TokenVerifier:
    """Checks access tokens for every workspace of a server (issuers are shared: one JWKS per issuer), within
    `limits`."""

    def __init__(self, client: UpstreamClient, *, leeway: float = LEEWAY, limits: TokenLimits | None = None) -> None:
        self.client = client
        self.leeway = leeway
        self.limits = limits = limits or TokenLimits()
        self._checks = _Budgets("signature checks", limits.checks_per_second, limits.checks_per_address,
                                limits.checks_per_process)  # fmt: skip
        self._introspections = _Budgets("introspections", limits.introspections_per_second,
                                        limits.introspections_per_address, limits.introspections_per_process,
                                        burst=2 * limits.introspections_per_address)  # fmt: skip
        self._issuers: dict[str, _Issuer] = {}
        # Each workspace's validated tokens, apart (`crank.wire.tenant_cache`). A JWT's claims are the token's own;
        # an introspection answer is what one endpoint said to one client: kept under that client, never shared
        # with another policy's.
        self._valid: TenantCaches[TokenClaims] = TenantCaches(limits.cache_bytes, limits.cache_total_bytes,
                                                              _entry_bytes)  # fmt: skip
        # Opaque tokens refused after their introspection, by digest, workspace and introspection client, until when
        # (a JWT's are its issuer's: `_Issuer.refused`).
        self._refused: LRUCache[tuple[bytes, str, Hashable], float] = LRUCache(maxsize=MAX_REFUSED_TOKENS)

    def cached(
        self, token: str, introspection: IntrospectionClient | None = None, *, workspace: str = ""
    ) -> TokenClaims | None:
        """The claims of a token validated before for `workspace` (a JWT, or an opaque token through this
        `introspection` client) and not expired since; None otherwise (then `verify`)."""
        key = (token, None if looks_like_jwt(token) else introspection)
        claims = self._valid.get(workspace, key)
        if claims is None:
            return None
        if time.time() > claims.expires_at + (self.leeway if claims.method == "jwt" else 0):
            self._valid.pop(workspace, key)
            return None
        return claims

    async def verify(
        self,
        token: str,
        issuers: tuple[str, ...],
        introspection: IntrospectionClient | None = None,
        *,
        workspace: str = "",
        client: str = NO_ADDRESS,
    ) -> TokenClaims:
        """Check a token that `cached` does not know, sent from `client` (`crank.wire.budgets.client_address`) to
        `workspace`: `AuthChallengeError` (401 `invalid_token`) when it is not valid, `DependencyUnavailableError`
        (503) when its issuer cannot tell now or the budget of new checks is spent."""
        if len(token) > 16 * 1024:
            raise _invalid("The access token is too long")
        jwt_shaped = looks_like_jwt(token)
        if not jwt_shaped and introspection is None:
            raise _invalid("The access token is not a JWT, and this workspace does not introspect tokens")
        key: _Key = (token, None if jwt_shaped else introspection)
        digest = hashlib.sha256(token.encode()).digest()
        try:
            if jwt_shaped:
                claims = await self._verify_jwt(token, digest, issuers, workspace, client)
            else:
                assert introspection is not None
                claims = await self._introspect(token, digest, issuers[0], introspection, workspace, client)
        except _Refused as final:
            final.memory[final.key] = time.monotonic() + REFUSED_MEMORY
            raise final.challenge from None
        self._checks.known(client)
        self._introspections.known(client)
        self._valid.put(workspace, key, claims)
        return claims

    # -- JWT ---------------------------------------------------------------------------------------------

    async def _verify_jwt(
        self, token: str, digest: bytes, issuers: tuple[str, ...], workspace: str, client: str
    ) -> TokenClaims:
        try:  # one unverified parse gives the header and the claims to choose the key by
            complete = jwt.api_jwt.decode_complete(token, options={"verify_signature": False})
            header, unverified = complete["header"], complete["payload"]
        except jwt.PyJWTError:
            raise _invalid("The access token is not a well-formed JWT") from None
        algorithm = header.get("alg")
        if algorithm not in ALLOWED_ALGORITHMS:
            raise _invalid(f"The access token's algorithm {str(algorithm)[:16]!r} is not accepted")
        if any(claim in unverified for claim in _ID_TOKEN_CLAIMS) or header.get("typ") == "id_token+jwt":
            raise _invalid("An ID token is not an access token")
        issuer = unverified.get("iss")
        trusted = next((known for known in issuers if isinstance(issuer, str) and same_issuer(known, issuer)), None)
        if trusted is None:
            raise _invalid("The access token was issued by an issuer this workspace does not trust")
        issuer = self._issuer(trusted)
        _refused_before(issuer.refused, digest)
        kid = header.get("kid")
        key = await self._key(issuer, kid if isinstance(kid, str) else None, algorithm)
        self._checks.spend(client, (workspace, trusted))  # a flood of made-up tokens costs this much CPU at most
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[algorithm], leeway=self.leeway,
                options={"verify_aud": False, "verify_iss": False, "require": ["exp", "iss"]},
            )  # fmt: skip
        except jwt.ExpiredSignatureError:
            raise _Refused(_invalid("The access token has expired"), issuer.refused, digest) from None
        except jwt.ImmatureSignatureError:
            raise _invalid("The access token is not valid yet") from None
        except jwt.PyJWTError as exc:
            raise _Refused(_invalid(f"The access token is not valid: {exc}"), issuer.refused, digest) from None
        return _claims(trusted, claims, float(claims["exp"]), "jwt")

    # -- OpenID Connect sign-in (the console's single sign-on) -------------------------------------------

    async def metadata(self, issuer: str) -> dict[str, Any]:
        """The issuer's metadata (RFC 8414, then OpenID discovery), fetched once and kept."""
        return await self._metadata(self._issuer(issuer))

    async def verify_id_token(self, token: str, issuer: str, client_id: str, nonce: str) -> dict[str, Any]:
        """An OpenID Connect ID token's claims, checked for a sign-in this server started: signed by `issuer`
        with an allowed algorithm, for `client_id`, with the sign-in's `nonce`, not expired. `AuthChallengeError`
        when it is not valid; `DependencyUnavailableError` when the issuer cannot tell now."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _invalid("The ID token is not a well-formed JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALLOWED_ALGORITHMS:
            raise _invalid(f"The ID token's algorithm {str(algorithm)[:16]!r} is not accepted")
        key = await self._key(self._issuer(issuer), kid if isinstance(kid, str) else None, algorithm)
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[algorithm], audience=client_id, leeway=self.leeway,
                options={"verify_iss": False, "require": ["exp", "iss", "aud", "sub", "nonce"]},
            )  # fmt: skip
        except jwt.PyJWTError as exc:
            raise _invalid(f"The ID token is not valid: {exc}") from None
        if not same_issuer(str(claims["iss"]), issuer):
            raise _invalid("The ID token was issued by another issuer")
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != client_id:  # OpenID Connect Core §3.1.3.7, items 4 and 5
            raise _invalid("The ID token names several audiences and was not authorized for this client (azp)")
        if not hmac.compare_digest(str(claims["nonce"]).encode(), nonce.encode()):
            raise _invalid("The ID token is not for this sign-in (nonce)")
        return claims

    def _issuer(self, issuer: str) -> _Issuer:
        known = self._issuers.get(issuer)
        if known is None:
            known = self._issuers[issuer] = _Issuer(issuer)
        return known

    async def _key(self, issuer: _Issuer, kid: str | None, algorithm: str) -> PyJWK:
        """The signing key `kid` names (or the only one, without a kid), refetching the JWKS once for an unknown
        one, so that keys can rotate."""
        key = _pick(issuer.keys, kid, algorithm)
        stale = time.monotonic() - issuer.keys_fetched > JWKS_MAX_AGE
        if key is not None and not stale:
            return key
        async with issuer.lock:
            key = _pick(issuer.keys, kid, algorithm)
            now = time.monotonic()
            if now - issuer.keys_fetched > JWKS_MAX_AGE:
                try:
                    await self._fetch_keys(issuer)
                except DependencyUnavailableError:
                    if key is None:
                        raise
                    return key  # the issuer is away: the key it published before still proves its tokens
            elif key is None and now - issuer.refetched >= MIN_REFETCH:
                issuer.refetched = now  # one refetch for an unknown kid, then none for MIN_REFETCH seconds
                await self._fetch_keys(issuer)
            key = _pick(issuer.keys, kid, algorithm)
        if key is None:
            raise _invalid("The access token is signed with a key its issuer does not publish")
        return key

    async def _fetch_keys(self, issuer: _Issuer) -> None:
        metadata = await self._metadata(issuer)
        jwks_uri = metadata.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise _unavailable(issuer.issuer, "its metadata names no jwks_uri")
        document = await self._fetch_json(issuer, "GET", jwks_uri)
        keys = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(keys, list):
            raise _unavailable(issuer.issuer, f"{jwks_uri} is not a JWKS")
        usable: dict[str, PyJWK] = {}
        skipped: list[str] = []
        for index, entry in enumerate(keys[:100]):
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
                continue  # encryption keys and symmetric keys never verify an access token
            try:
                key = PyJWK(entry)
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue  # a key of a kind this library cannot use: the others still serve
            name = str(entry.get("kid", f"#{index}"))
            problem = usable_key(key)
            if problem is None:
                usable[name] = key
            else:
                skipped.append(f"{name[:64]!r} ({problem})")
        if skipped:
            _notices.warning(f"jwks-key:{issuer.issuer}", "OAuth issuer %s: skipped signing keys of unbounded cost: "
                             "%s", issuer.issuer, ", ".join(skipped[:10]))  # fmt: skip
        issuer.keys = usable
        issuer.keys_fetched = time.monotonic()
        issuer.refused.clear()  # a token refused with the keys before may be valid with these

    async def _metadata(self, issuer: _Issuer) -> dict[str, Any]:
        """The issuer's authorization server metadata: RFC 8414's well-known URL, then OpenID discovery's. Kept
        `METADATA_MAX_AGE` seconds; while a refresh fails, the metadata read before still serves."""
        known = issuer.metadata
        if known is not None and time.monotonic() - issuer.metadata_fetched <= METADATA_MAX_AGE:
            return known
        async with issuer.metadata_lock:  # concurrent new tokens share one read
            if issuer.metadata is not known:
                assert issuer.metadata is not None
                return issuer.metadata
            return await self._read_metadata(issuer, known)

    async def _read_metadata(self, issuer: _Issuer, known: dict[str, Any] | None) -> dict[str, Any]:
        parts = urlsplit(issuer.issuer)
        path = parts.path.rstrip("/")
        origin = f"{parts.scheme}://{parts.netloc}"
        candidates = [
            f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}{path}/.well-known/openid-configuration",
        ]
        if known is None:
            self._check_not_failing(issuer)
        elif time.monotonic() < issuer.failed_until:
            return known
        for url in candidates:
            try:
                document = await self._fetch_json(issuer, "GET", url, remember=False)
            except DependencyUnavailableError:
                continue  # many issuers publish only one of the two
            if isinstance(document, dict) and same_issuer(str(document.get("issuer", "")), issuer.issuer):
                issuer.metadata = document
                issuer.metadata_fetched = time.monotonic()
                return document
        issuer.failed_until = time.monotonic() + FAILURE_MEMORY
        if known is not None:
            logger.warning("OAuth issuer %s: its metadata could not be read again; the metadata read before serves",
                           issuer.issuer)  # fmt: skip
            return known
        raise _unavailable(issuer.issuer, "no metadata at its RFC 8414 or OpenID discovery URL")

    @staticmethod
    def _check_not_failing(issuer: _Issuer) -> None:
        if time.monotonic() < issuer.failed_until:
            raise _unavailable(issuer.issuer, "not asked again yet after a failure")

    async def _fetch_json(
        self,
        issuer: _Issuer,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        remember: bool = True,
    ) -> Any:
        """A JSON document from the issuer, bounded in time and size. A failure is remembered for the issuer's
        metadata and keys (`remember`), so that a flood of new tokens costs it one attempt per FAILURE_MEMORY."""
        if remember:
            self._check_not_failing(issuer)
        request_headers = {"accept": "application/json", **(headers or {})}
        try:
            answer = await self.client.request(
                method, url, params=None, headers=request_headers, body=body, timeout=FETCH_TIMEOUT, tenant="oauth"
            )
            if answer.status != 200:
                raise ValueError(f"{url} answered {answer.status}")
            if len(answer.body) > MAX_DOCUMENT_BYTES:
                raise ValueError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
            return _json.loads(answer.body)
        except (UpstreamError, ValueError, _json.JSONDecodeError) as exc:
            if remember:
                issuer.failed_until = time.monotonic() + FAILURE_MEMORY
            raise _unavailable(issuer.issuer, f"{type(exc).__name__}: {exc}") from None

    # -- introspection ---------------------------------------------------------------------------------

    async def _introspect(
        self, token: str, digest: bytes, issuer_url: str, config: IntrospectionClient, workspace: str, client: str
    ) -> TokenClaims:
        refused = (digest, workspace, config)
        _refused_before(self._refused, refused)
        issuer = self._issuer(issuer_url)
        endpoint = config.endpoint or (await self._metadata(issuer)).get("introspection_endpoint")
        if not isinstance(endpoint, str):
            raise _unavailable(issuer_url, "its metadata names no introspection_endpoint")
        try:
            secret = _client_secret(config.client_secret, workspace)
        except ConfigurationError as exc:
            raise _unavailable(issuer_url, f"the introspection client's secret: {exc}") from None
        self._introspections.spend(client, (workspace, issuer_url))  # what made-up opaque tokens cost the issuer
        # RFC 6749 §2.3.1: the client id and secret are form-encoded before they are joined.
        basic = base64.b64encode(f"{quote_plus(config.client_id)}:{quote_plus(secret)}".encode()).decode()
        body = urlencode({"token": token, "token_type_hint": "access_token"}).encode()
        headers = {"content-type": "application/x-www-form-urlencoded", "authorization": f"Basic {basic}"}
        answer = await self._fetch_json(issuer, "POST", endpoint, body=body, headers=headers, remember=False)
        if not isinstance(answer, dict):
            raise _unavailable(issuer_url, "its introspection answer is not an object")
        if answer.get("active") is not True:
            raise _Refused(_invalid("The access token is not active"), self._refused, refused)
        if answer.get("token_type") not in (None, "access_token", "Bearer", "bearer"):
            raise _Refused(_invalid("The token is not an access token"), self._refused, refused)
        now = time.time()
        expires = answer.get("exp")
        if isinstance(expires, int | float) and expires + self.leeway < now:
            raise _Refused(_invalid("The access token has expired"), self._refused, refused)
        reported = answer.get("iss")
        if isinstance(reported, str) and not same_issuer(reported, issuer_url):
            raise _invalid("The access token was issued by an issuer this workspace does not trust")
        limit = now + INTROSPECTION_MAX_AGE
        return _claims(issuer_url, answer, min(float(expires), limit) if isinstance(expires, int | float) else limit,
                       "introspection")  # fmt: skip


def _client_secret(reference: str, workspace: str) -> str:
    """The introspection client's secret: a workspace's by its secret allowances, as upstream secrets are; an
    in-process endpoint's (no workspace) straight from the environment or the file its developer named."""
    if workspace:
        return resolve_secret(reference, workspace=workspace, where=f"workspace {workspace} oauth")
    return read_reference(reference)


class _Refused(Exception):
    """A token refused after its check, for good: remembered by its digest in `memory` (`REFUSED_MEMORY`)."""

    def __init__(self, challenge: AuthChallengeError, memory: LRUCache[Any, float], key: Hashable) -> None:
        self.challenge = challenge
        self.memory = memory
        self.key = key


def _refused_before(memory: LRUCache[Any, float], key: Hashable) -> None:
    """Refuse (401) a token refused after its check before, while that holds: no check, no budget spent."""
    until = memory.get(key)
    if until is not None and time.monotonic() < until:
        raise _invalid("The access token is not valid")


class _Budgets:
    """The budget of one kind of work on new tokens: per client address, per workspace and issuer, and for the
    process. Half of each workspace's budget is kept for known addresses (`KNOWN_ADDRESS_MEMORY`): any other may
    spend it only while it is more than half full."""

    def __init__(
        self, what: str, per_tenant: float, per_address: float, per_process: float, *, burst: float | None = None
    ) -> None:
        self.what = what
        self.per_tenant = KeyedBudgets(per_tenant)
        self.per_address = KeyedBudgets(per_address, burst)
        self.per_process = Budget(per_process)
        self._reserve = max(per_tenant, 1.0) / 2  # what an address not known may not take of a workspace's budget
        self._known: LRUCache[str, float] = LRUCache(maxsize=DEFAULT_MAX_KEYS)

    def known(self, address: str) -> None:
        """A valid token came from `address`."""
        self._known[address] = time.monotonic() + KNOWN_ADDRESS_MEMORY

    def spend(self, address: str, tenant: tuple[str, str]) -> None:
        """One piece of work for a token from `address` to `tenant` (a workspace and issuer), or 503 (retry)."""
        if not self.per_address.take(address):
            _notices.warning(f"{self.what}-address", "more than %g new access tokens' %s a second from one address "
                             "(%s): refused with 503 until its budget refills", self.per_address.rate, self.what,
                             address)  # fmt: skip
            raise _busy("from your address")
        until = self._known.get(address)
        reserve = 0.0 if until is not None and time.monotonic() < until else self._reserve
        if not self.per_tenant.take(tenant, reserve):
            _notices.warning(f"{self.what}-tenant:{tenant[0]}", "more than %g new access tokens' %s a second for "
                             "workspace %r: refused with 503 until its budget refills", self.per_tenant.rate,
                             self.what, tenant[0])  # fmt: skip
            raise _busy("for this workspace")
        if not self.per_process.take():
            _notices.warning(f"{self.what}-process", "more than %g new access tokens' %s a second in all: refused "
                             "with 503 until the budget refills", self.per_process.rate, self.what)  # fmt: skip
            raise _busy("in all")


def _busy(whose: str) -> DependencyUnavailableError:
    return DependencyUnavailableError(
        "issuer", f"This server checks too many new access tokens {whose} right now; retry in a second.", retry_after=1
    )


def usable_key(key: PyJWK) -> str | None:
    """Why a published signing key is not used (its check would cost without bound), or None: an RSA modulus of
    `RSA_MIN_BITS` to `RSA_MAX_BITS` and an odd public exponent of at most `RSA_MAX_EXPONENT`, a curve of
    `EC_CURVES`, Ed25519 or Ed448."""
    public = key.key
    if isinstance(public, rsa.RSAPublicKey):
        exponent = public.public_numbers().e
        if not RSA_MIN_BITS <= public.key_size <= RSA_MAX_BITS:
            return f"an RSA modulus of {public.key_size} bits, not {RSA_MIN_BITS} to {RSA_MAX_BITS}"
        if not 3 <= exponent <= RSA_MAX_EXPONENT or exponent % 2 == 0:
            return f"an RSA public exponent of {exponent.bit_length()} bits (at most 2^32, odd)"
        return None
    if isinstance(public, ec.EllipticCurvePublicKey):
        return None if public.curve.name in EC_CURVES else f"the curve {public.curve.name}"
    if isinstance(public, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return None
    return f"a key of kind {type(public).__name__}"


def _claims(
    issuer: str, claims: dict[str, Any], expires_at: float, method: Literal["jwt", "introspection"]
) -> TokenClaims:
    """What a JWT's claims or an introspection answer say (RFC 9068 and RFC 7662 name them alike)."""
    subject = claims.get("sub")
    return TokenClaims(
        issuer=issuer,
        subject=subject if isinstance(subject, str) else None,
        client_id=_client_id(claims),
        scopes=_scopes(claims),
        audiences=_audiences(claims),
        expires_at=expires_at,
        method=method,
    )


def _client_id(claims: dict[str, Any]) -> str | None:
    value = claims.get("client_id", claims.get("azp"))
    return value if isinstance(value, str) else None


def _pick(keys: dict[str, PyJWK], kid: str | None, algorithm: str) -> PyJWK | None:
    """The key `kid` names; without a kid, the only key there is. Never a key of another algorithm family."""
    if kid is not None:
        key = keys.get(kid)
    else:
        key = next(iter(keys.values())) if len(keys) == 1 else None
    if key is None or key.key_type != _KEY_TYPES[algorithm[:2]]:
        return None
    return key


_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
