"""A small OAuth authorization server for the resource-server tests, served over real HTTP on loopback: RFC 8414
metadata, a JWKS whose signing key can rotate, and RFC 7662 introspection of opaque tokens. It mints whatever
token a test needs, the hostile ones included (`alg: none`, HS256 with the public key, an ID token)."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route


class Issuer:
    def __init__(self) -> None:
        self.url = ""  # set once served
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "k1"
        self.opaque: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []  # the paths asked, in order
        self.broken: str | None = None  # "garbage", "error", "slow" or None
        self.rfc8414 = True  # False: metadata only at the OpenID discovery URL, as many identity providers do
        self.extra_keys: list[dict[str, Any]] = []  # more JWKs published beside the signing key (hostile ones, say)
        self.jwks_uri = "/jwks"  # where the metadata says the keys are
        self.omitted: set[str] = set()  # metadata fields left out ("jwks_uri", "introspection_endpoint")
        self.app = Starlette(routes=[
            Route("/.well-known/oauth-authorization-server", self.metadata),
            Route("/.well-known/openid-configuration", self.metadata),
            Route("/jwks", self.jwks),
            Route("/jwks-moved", self.jwks),
            Route("/introspect", self.introspect, methods=["POST"]),
        ])  # fmt: skip

    def rotate(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = f"k{uuid.uuid4().hex[:6]}"

    def token(self, audience: str, *, scope: str = "tools:read", subject: str = "alice", ttl: float = 300,
              issuer: str | None = None, **claims: Any) -> str:  # fmt: skip
        now = time.time()
        payload = {"iss": issuer or self.url, "sub": subject, "aud": audience, "scope": scope, "iat": int(now),
                   "exp": int(now + ttl), "client_id": "test-client", **claims}  # fmt: skip
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid, "typ": "at+jwt"})

    def forged(self, audience: str, *, kid: str | None = None, **claims: Any) -> str:
        """A token that names this issuer and one of its key ids (both public) with a signature of a key of its
        own: what anyone can make, a new one each time (`jti`)."""
        stranger = _STRANGER
        now = time.time()
        payload = {"iss": self.url, "sub": "mallory", "aud": audience, "scope": "tools:read tools:write",
                   "exp": int(now + 300), "jti": uuid.uuid4().hex, **claims}  # fmt: skip
        return jwt.encode(payload, stranger, algorithm="RS256", headers={"kid": kid or self.kid})

    def unsigned(self, audience: str) -> str:
        """`alg: none`: no signature at all."""
        header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        body = _b64(json.dumps({"iss": self.url, "sub": "mallory", "aud": audience, "exp": int(time.time()) + 300,
                                "scope": "tools:read tools:write"}).encode())  # fmt: skip
        return f"{header}.{body}."

    def hmac_with_public_key(self, audience: str) -> str:
        """HS256 keyed with the issuer's public key, which everyone can read: the algorithm-confusion attack."""
        public = self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        payload = {"iss": self.url, "sub": "mallory", "aud": audience, "exp": int(time.time()) + 300,
                   "scope": "tools:read tools:write"}  # fmt: skip
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": self.kid}).encode())
        body = _b64(json.dumps(payload).encode())
        import hashlib
        import hmac

        signature = hmac.new(public, f"{header}.{body}".encode(), hashlib.sha256).digest()
        return f"{header}.{body}.{_b64(signature)}"

    def opaque_token(self, audience: str, *, active: bool = True, scope: str = "tools:read") -> str:
        token = uuid.uuid4().hex
        self.opaque[token] = {"active": active, "sub": "olga", "client_id": "opaque-client", "scope": scope,
                              "aud": audience, "exp": int(time.time()) + 300, "iss": self.url}  # fmt: skip
        return token

    async def metadata(self, request: Request) -> Response:
        self.requests.append(request.url.path)
        if not self.rfc8414 and request.url.path.endswith("oauth-authorization-server"):
            return PlainTextResponse("not found", 404)
        if self.broken == "slow":
            await asyncio.sleep(8)  # longer than Crank's fetch timeout
        if self.broken == "garbage":
            return PlainTextResponse("<html>not json", 200)
        if self.broken == "error":
            return PlainTextResponse("down", 500)
        url = self.url
        endpoints = {"jwks_uri": self.jwks_uri, "introspection_endpoint": "/introspect", "token_endpoint": "/token"}
        return JSONResponse({"issuer": url, **{name: url + path for name, path in endpoints.items()
                                               if name not in self.omitted}})  # fmt: skip

    async def jwks(self, request: Request) -> Response:
        self.requests.append(request.url.path)
        if self.broken == "garbage":
            return PlainTextResponse("{not json", 200)
        if self.broken == "error":
            return PlainTextResponse("down", 500)
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return JSONResponse({"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}, *self.extra_keys]})

    async def introspect(self, request: Request) -> Response:
        self.requests.append(request.url.path)
        if request.headers.get("authorization") != "Basic " + base64.b64encode(b"crank:introspection-secret").decode():
            return JSONResponse({"error": "invalid_client"}, 401)
        token = (await request.form()).get("token")
        return JSONResponse(self.opaque.get(str(token), {"active": False}))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def rsa_jwk(modulus_bits: int, exponent: int, kid: str) -> dict[str, Any]:
    """The public JWK of an RSA key of `modulus_bits` bits with public exponent `exponent` (any odd number below the
    modulus: no private key is needed to publish one, only to sign, and a forger signs nothing valid anyway)."""
    modulus = secrets.randbits(modulus_bits) | (1 << (modulus_bits - 1)) | 1  # odd, of exactly that size

    def number(value: int) -> str:
        return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))

    return {"kty": "RSA", "n": number(modulus), "e": number(exponent), "kid": kid, "use": "sig", "alg": "RS256"}
