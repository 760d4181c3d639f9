"""What the first request with a new OAuth access token costs the gateway (issue 20): `TokenVerifier.verify` of fresh
JWTs, the issuer's JWKS already fetched and kept, against `TokenVerifier.cached` of tokens validated before (what
every later request with the same token pays), in-process.

Usage: python bench/token_first_use.py [--tokens 500] [--rounds 5] [--lookups 200000] [--calls 4000] [--era legacy]

The issuer is `bench.apps.gateway_crank_jwt.Issuer` (RSA 2048, RS256; metadata and JWKS over HTTP on loopback,
fetched once through Crank's `UpstreamClient` before anything is timed). Every round mints `--tokens` new tokens
(distinct `jti`; minting is not timed), verifies each once (awaited one after the other, as requests with new
tokens would be), then looks each up `--lookups / --tokens` times with `cached`. For reference, it also times
what the check is made of on the same tokens: PyJWT's `jwt.decode` with the key (signature and claims) and the RSA
signature check alone (`cryptography`). It prints the median over the rounds of µs per operation
(`time.perf_counter`). A benchmark, not a test.

The look-up loop reuses the same `str` objects, whose hash Python keeps; a request's token is a new string, so
the server also hashes it once per request (about 0.2 µs for a 720-byte token, timed as `hash`).

Then, unless `--calls 0`, what a whole `tools/call` costs with each credential once the token is cached, as CPU
time (`time.process_time`, so that other processes on a shared machine count less than in wrk's req/s): the
apps of `gateway-crank` (API key) and `gateway-crank-jwt` (the same registry, the workspace with its OAuth
policy) driven in-process as `bench/profile_gateway.py --stub-upstream` drives one (the request of
`bench/wrk/gateway_call.lua`, 32 at a time, the upstream client answering at once), in interleaved rounds.

`--count key` or `--count jwt` runs only `--count-requests` of those calls, for callgrind, which a shared machine
cannot move (as `bench/count_gateway.py`; divide the total by the number of requests):

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=math_fsum \\
        --callgrind-out-file=jwt.out .venv/bin/python bench/token_first_use.py --count jwt
    callgrind_annotate jwt.out | grep 'PROGRAM TOTALS'
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.apps.gateway_crank import LOOPBACK_EGRESS  # noqa: E402
from bench.apps.gateway_crank_jwt import Issuer  # noqa: E402
from crank.gateway.client import UpstreamClient  # noqa: E402
from crank.gateway.tokens import TokenVerifier  # noqa: E402

AUDIENCE = "http://gateway.bench.test/mcp/v1/bench/agent"


def per_op(seconds: float, count: int) -> float:
    return seconds / count * 1e6


async def first_use(tokens: int, rounds: int, lookups: int) -> dict[str, list[float]]:
    issuer = Issuer()
    client = UpstreamClient(egress=LOOPBACK_EGRESS)
    verifier = TokenVerifier(client)
    issuers = (issuer.url,)
    await verifier.verify(issuer.token(AUDIENCE), issuers)  # fetches the metadata and the JWKS, kept from here on
    assert issuer.requests == ["/.well-known/oauth-authorization-server/bench-issuer", "/bench-issuer/jwks"]
    public_key = issuer.key.public_key()
    results: dict[str, list[float]] = {"verify": [], "cached": [], "pyjwt decode": [], "rsa verify": [], "hash": []}
    repeat = max(1, lookups // tokens)
    for _ in range(rounds):
        fresh = [issuer.token(AUDIENCE, jti=uuid.uuid4().hex) for _ in range(tokens)]
        start = time.perf_counter()
        for token in fresh:
            await verifier.verify(token, issuers)
        results["verify"].append(per_op(time.perf_counter() - start, tokens))
        assert issuer.requests == ["/.well-known/oauth-authorization-server/bench-issuer", "/bench-issuer/jwks"]

        cached: Callable[[str], object] = verifier.cached
        start = time.perf_counter()
        for _ in range(repeat):
            for token in fresh:
                cached(token)
        results["cached"].append(per_op(time.perf_counter() - start, repeat * tokens))
        assert all(cached(token) is not None for token in fresh)

        start = time.perf_counter()
        for token in fresh:
            jwt.decode(token, public_key, algorithms=["RS256"], options={"verify_aud": False})
        results["pyjwt decode"].append(per_op(time.perf_counter() - start, tokens))

        signed = []
        for token in fresh:
            head, body, encoded = token.split(".")
            signed.append((f"{head}.{body}".encode(), base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))))
        start = time.perf_counter()
        for message, signature in signed:
            public_key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
        results["rsa verify"].append(per_op(time.perf_counter() - start, tokens))

        copies = [token[:10] + token[10:] for token in fresh]  # new strings, no hash kept yet
        start = time.perf_counter()
        for copy in copies:
            hash(copy)
        results["hash"].append(per_op(time.perf_counter() - start, tokens))
    await client.aclose()
    issuer.close()
    return results


async def gateways(tmp: str, era: str) -> tuple[dict[str, tuple[Any, dict[str, Any]]], bytes, Issuer]:
    """The apps of `gateway-crank` and `gateway-crank-jwt` over one new registry, their upstream clients stubbed
    (`bench/profile_gateway.py --stub-upstream`), each with the scope of its request (the API key's, the token's:
    validated here, so that the JWKS comes through the client before its stub) and the body of that request."""
    from bench.apps import gateway_crank, gateway_crank_jwt
    from bench.count_gateway import post_scope
    from bench.profile_gateway import BODY, MODERN_BODY, MODERN_HEADERS, stub_upstream

    db = str(Path(tmp) / "registry.sqlite3")
    key = gateway_crank.setup(db, "http://127.0.0.1:9")  # never reached: the upstream client is stubbed
    os.environ["BENCH_GATEWAY_DB"] = db
    keyed = gateway_crank.make_app()
    oauth, issuer, token = gateway_crank_jwt.make_app()
    await oauth.auth.verifier.verify(token, (issuer.url,))
    body = MODERN_BODY if era == "modern" else BODY
    headers = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
               (b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]  # fmt: skip
    if era == "modern":
        headers += [(b"mcp-protocol-version", b"2026-07-28"), *MODERN_HEADERS]
    else:
        headers.append((b"mcp-protocol-version", b"2025-11-25"))
    apps: dict[str, tuple[Any, dict[str, Any]]] = {}
    for name, app, credential in (("API key", keyed, key), ("JWT", oauth, token)):
        stub_upstream(app.source.client)
        apps[name] = (
            app,
            post_scope(gateway_crank.PATH, [*headers, (b"authorization", f"Bearer {credential}".encode())]),
        )
    return apps, body, issuer


async def per_call(calls: int, rounds: int, era: str) -> dict[str, list[float]]:
    """CPU µs per `tools/call` through each gateway app, upstream stubbed, the token validated beforehand."""
    from bench.count_gateway import asgi_post

    with tempfile.TemporaryDirectory() as tmp:
        apps, body, issuer = await gateways(tmp, era)

        async def batch(app: Any, scope: dict[str, Any], n: int, answers: list[bytes]) -> None:
            for _ in range(n // 32):
                await asyncio.gather(*(asgi_post(app, scope, body, answers) for _ in range(32)))

        for name, (app, scope) in apps.items():  # warm up, and check the answer
            answers: list[bytes] = []
            await batch(app, scope, 640, answers)
            if b'"structuredContent"' not in answers[0] or b'"isError":true' in answers[0]:
                raise SystemExit(f"{name}: not a tool result: {answers[0][:300]!r}")
        results: dict[str, list[float]] = {name: [] for name in apps}
        for index in range(rounds):
            order = list(apps.items()) if index % 2 == 0 else list(reversed(apps.items()))
            for name, (app, scope) in order:
                app.source.reload()  # confirms the key list (no watcher runs here; it goes stale after 30 s)
                cpu = time.process_time()
                await batch(app, scope, calls, [])
                results[name].append(per_op(time.process_time() - cpu, calls // 32 * 32))
        issuer.close()
        return results


async def count(credential: str, requests: int, era: str) -> None:
    """`requests` calls with one credential, each request's coroutine stepped by hand inside `math.fsum`, as
    `bench/count_gateway.py` does, so that callgrind's `--toggle-collect=math_fsum` counts those requests alone."""
    from bench.count_gateway import asgi_post, count_requests

    with tempfile.TemporaryDirectory() as tmp:
        apps, body, issuer = await gateways(tmp, era)
        app, scope = apps[{"key": "API key", "jwt": "JWT"}[credential]]
        app.source.poll_interval = 3600  # no registry poll among the counted requests
        app.source.reload()  # confirms the key list: under valgrind the set-up takes longer than its 30 s
        answers: list[bytes] = []
        for _ in range(300):  # warm-up: caches, the token's principal
            await asgi_post(app, scope, body, answers)
        issuer.close()  # its thread would otherwise wake (and be counted) twice a second
        await asyncio.sleep(0.05)
        if b'"structuredContent"' not in answers[0] or b'"isError":true' in answers[0]:
            raise SystemExit(f"{credential}: not a tool result: {answers[0][:300]!r}")
        print(answers[0][:160], file=sys.stderr)
        app.source.reload()
        gc.collect()
        count_requests(app, scope, body, answers, requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=500, help="fresh tokens verified per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lookups", type=int, default=200_000, help="cached look-ups per round")
    parser.add_argument("--calls", type=int, default=4000, help="tools/call per app per round (0: skip that part)")
    parser.add_argument("--era", choices=("legacy", "modern"), default="legacy", help="request shape of the calls")
    parser.add_argument("--count", choices=("key", "jwt"), help="only run --count-requests calls for callgrind")
    parser.add_argument("--count-requests", type=int, default=500)
    args = parser.parse_args()
    if args.count:
        asyncio.run(count(args.count, args.count_requests, args.era))
        return
    results = asyncio.run(first_use(args.tokens, args.rounds, args.lookups))
    issuer = Issuer()
    token_bytes = len(issuer.token(AUDIENCE, jti=uuid.uuid4().hex))
    issuer.close()
    print(f"{args.rounds} rounds of {args.tokens} fresh RS256 (RSA 2048) tokens of {token_bytes} bytes; "
          f"median of the rounds, µs per operation (all rounds in brackets)")  # fmt: skip
    for name, values in results.items():
        spread = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:>13}: {statistics.median(values):9.2f} µs  [{spread}]")
    ratio = statistics.median(results["verify"]) / statistics.median(results["cached"])
    print(f"first use (verify) / later use (cached): {ratio:,.0f}×")
    if args.calls <= 0:
        return
    import uvloop

    calls = uvloop.run(per_call(args.calls, args.rounds, args.era))
    print(f"CPU µs per tools/call in-process ({args.era} shape, upstream stubbed, {args.calls} calls 32 at a time, "
          f"{args.rounds} interleaved rounds; median [all])")  # fmt: skip
    for name, values in calls.items():
        print(f"{name:>13}: {statistics.median(values):9.2f} µs  [{', '.join(f'{v:.2f}' for v in values)}]")
    share = statistics.median(calls["API key"]) / statistics.median(calls["JWT"])
    print(f"calls a second with a JWT / with an API key, from the CPU per call: {share:.3f}")


if __name__ == "__main__":
    main()
