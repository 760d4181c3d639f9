#!/usr/bin/env python3
"""What one signature check costs with a JWKS key at the bounds of `crank.gateway.tokens.usable_key` (issue 36):
an ordinary key (RSA 2048, e = 65537), the costliest key still used (RSA 4096, e = 2^32 - 1), and a key that is
skipped (RSA 3072 with a 3,000-bit exponent), each over signatures as long as its modulus and below it, as a
forger's are (OpenSSL refuses a longer or larger one before any arithmetic).

    python bench/key_cost.py [--checks 200]

Prints the median time per check (ms) and its ratio to the ordinary key's, and `usable_key`'s verdict. Timed
in process with `time.perf_counter`; run it on a quiet machine and read the ratios."""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: E402
from jwt import PyJWK  # noqa: E402

from crank.gateway.tokens import RSA_MAX_EXPONENT, usable_key  # noqa: E402

KEYS = {
    "ordinary: RSA 2048, e = 65537": (2048, 65537),
    "costliest used: RSA 4096, e = 2^32 - 1": (4096, RSA_MAX_EXPONENT - 1),
    "skipped: RSA 3072, e of 3,000 bits": (3072, secrets.randbits(3000) | (1 << 2999) | 1),
}


def check_ms(bits: int, exponent: int, checks: int) -> tuple[float, str | None]:
    modulus = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    key = rsa.RSAPublicNumbers(exponent, modulus).public_key()
    jwk = {"kty": "RSA", "n": _b64(modulus), "e": _b64(exponent), "kid": "k"}
    times = []
    for _ in range(checks):
        signature = secrets.randbelow(modulus).to_bytes(bits // 8, "big")
        started = time.perf_counter()
        try:
            key.verify(signature, b"header.claims", padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            pass
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, usable_key(PyJWK(jwk))


def _b64(value: int) -> str:
    import base64

    return base64.urlsafe_b64encode(value.to_bytes((value.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checks", type=int, default=200)
    args = p.parse_args()
    ordinary = None
    for name, (bits, exponent) in KEYS.items():
        ms, verdict = check_ms(bits, exponent, args.checks)
        ordinary = ordinary or ms
        print(f"{name}: {ms:.3f} ms per check, {ms / ordinary:.1f}x the ordinary key; "
              f"{'used' if verdict is None else 'skipped: ' + verdict}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
