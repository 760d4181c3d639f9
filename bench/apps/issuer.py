"""An OAuth issuer for `bench/hostile.py`'s token attacks: RFC 8414 metadata and a JWKS, served by uvicorn.

    python -m bench.apps.issuer PORT

The JWKS holds an ordinary signing key (`k1`, RSA 2048) and a key whose checks would cost without bound (`big`:
an RSA modulus of 3,072 bits with a public exponent of 3,000 bits; OpenSSL itself refuses an exponent over 64 bits
only for larger moduli), as a hostile tenant's own issuer may publish. Nobody needs the private keys: the attacks
send tokens whose signatures are made up (`prefix`, below)."""

from __future__ import annotations

import base64
import json
import secrets
import sys
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

HOST = "127.0.0.1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _number(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def _rsa(bits: int, exponent: int, kid: str) -> dict[str, str]:
    modulus = secrets.randbits(bits) | (1 << (bits - 1)) | 1  # a public key needs no primes to be published
    return {"kty": "RSA", "n": _number(modulus), "e": _number(exponent), "kid": kid, "use": "sig", "alg": "RS256"}


KEYS = [_rsa(2048, 65537, "k1"), _rsa(3072, secrets.randbits(3000) | (1 << 2999) | 1, "big")]


def prefix(issuer: str, kid: str) -> str:
    """A JWT's header and claims naming `issuer` and `kid`: an attacker adds a made-up signature to each."""
    header = _b64(json.dumps({"alg": "RS256", "kid": kid, "typ": "at+jwt"}).encode())
    claims = {"iss": issuer, "sub": "mallory", "aud": "x", "exp": int(time.time()) + 86_400}
    return f"{header}.{_b64(json.dumps(claims).encode())}"


def make_app(url: str) -> Starlette:
    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse({"issuer": url, "jwks_uri": url + "/jwks"})

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse({"keys": KEYS})

    return Starlette(routes=[
        Route("/.well-known/oauth-authorization-server", metadata),
        Route("/.well-known/openid-configuration", metadata),
        Route("/jwks", jwks),
    ])  # fmt: skip


if __name__ == "__main__":
    import uvicorn

    port = int(sys.argv[1])
    uvicorn.run(make_app(f"http://{HOST}:{port}"), host=HOST, port=port, log_level="warning")
