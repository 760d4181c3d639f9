"""Gateway target `gateway-crank-jwt`: `gateway-crank` (API keys required) whose workspace also takes OAuth access
tokens, called with a JWT instead of the API key (issue 20).

It opens a copy of the registry `bench/run.py` built (`BENCH_GATEWAY_DB`, see `gateway_crank`) and gives the
workspace an `OAuthPolicy`: one trusted issuer, API keys and tokens both accepted (the default), scope
`tools:read` needed by every agent and by every read tool. The issuer is served by this process on a loopback
port of its own, from a thread (stdlib `http.server`): RFC 8414 metadata at
`/.well-known/oauth-authorization-server/bench-issuer` and the JWKS at `/bench-issuer/jwks`, with a fresh RSA
2048 key. So the gateway's app is the same `GatewayService` object as `gateway-crank`'s, with nothing in front of
it, and the issuer costs nothing while it is not asked (its thread waits in `select`, waking twice a second). The
gateway fetches the metadata and the JWKS through its own upstream client (loopback egress, as for the upstream)
on the first request with the token, checks the signature once and keeps the validated token until it expires.

The app mints one RS256 token valid for 30 days whose audiences are the resources of agents `agent` and
`discovery`, `PUBLIC_URL/mcp/v1/bench/{agent}` (the gateway's `public_url` is configuration, never the request's
`Host`, so it need not be the port the bench listens on), and writes it to `BENCH_GATEWAY_TOKEN_FILE`;
`bench/run.py` reads it once the port listens and sends it as wrk's `BENCH_AUTH` (`Authorization: Bearer
<token>`), exactly where `gateway-crank` sends its API key.

`BENCH_GATEWAY_CREDENTIAL` gives agent `agent`'s operations upstream credentials (issue 37): `static`, a bearer
token by reference (one account, as a workspace credential is); `exchange`, a token exchange (RFC 8693) at the
issuer's `/token`, which answers any exchange with a new opaque token valid for an hour (`Issuer.exchanges`
counts them): the signed-in user's token, exchanged once and then kept; `connection`, each user's own connection
(OAuth authorization code), which this app puts in the token vault for every user it mints a token for (a vault
key of its own), as the connect page would: read and decrypted on a user's first call, then kept. nginx, the
upstream, reads none of them.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from bench.apps.gateway_crank import AGENT, DISCOVERY_AGENT, LOOPBACK_EGRESS, WORKSPACE
from crank.gateway.client import UpstreamClient
from crank.registry import Registry, open_engine
from crank.registry.runtime import OAuthPolicy
from crank.registry.vault import Vault, VaultKeys
from crank.server import GatewayService
from crank.types import JSONObject

STATIC_SECRET, EXCHANGE_SECRET = "BENCH_STATIC_TOKEN", "BENCH_EXCHANGE_SECRET"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
PUBLIC_URL = "http://gateway.bench.test"
"""The gateway's public base URL (`CRANK_PUBLIC_URL`): the token's audience is this plus the agent's path."""
ISSUER_PATH = "/bench-issuer"
SCOPE = "tools:read"
TOKEN_TTL = 30 * 24 * 3600.0
KID = "bench-1"


class Issuer:
    """A minimal authorization server for the resource server's side: metadata and JWKS over HTTP on loopback (in
    a daemon thread), and tokens minted in-process."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.requests: list[str] = []  # the paths asked, in order
        self.exchanges = 0
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        documents: dict[str, bytes] = {}
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as an issuer would
            disable_nagle_algorithm = True  # its head and body go in two writes: no 40 ms wait between them

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                issuer.requests.append(self.path)
                body = documents.get(self.path)
                self.send_response(200 if body is not None else 404)
                body = body if body is not None else b'{"error":"not_found"}'
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name): a token exchange, whoever asks
                issuer.requests.append(self.path)
                self.rfile.read(int(self.headers.get("content-length", "0")))
                issuer.exchanges += 1
                body = json.dumps({"access_token": f"exchanged.{uuid.uuid4().hex}", "token_type": "Bearer",
                                   "issued_token_type": ACCESS_TOKEN_TYPE, "expires_in": 3600}).encode()  # fmt: skip
                self.send_response(200 if self.path == ISSUER_PATH + "/token" else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}{ISSUER_PATH}"
        metadata = {"issuer": self.url, "jwks_uri": self.url + "/jwks", "token_endpoint": self.url + "/token",
                    "authorization_endpoint": self.url + "/authorize"}  # fmt: skip
        documents["/.well-known/oauth-authorization-server" + ISSUER_PATH] = json.dumps(metadata).encode()
        documents[ISSUER_PATH + "/jwks"] = json.dumps(
            {"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]}
        ).encode()
        # The thread waits in select() and wakes for a connection or, to check for shutdown, twice a second.
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def token(self, audience: str | list[str], *, scope: str = SCOPE, ttl: float = TOKEN_TTL, **claims: Any) -> str:
        """An RS256 access token for `audience`; `claims` add to (or replace) the usual ones."""
        now = time.time()
        payload = {"iss": self.url, "sub": "bench", "aud": audience, "scope": scope, "iat": int(now),
                   "exp": int(now + ttl), "client_id": "bench-client", **claims}  # fmt: skip
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": KID, "typ": "at+jwt"})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def policy(issuer_url: str) -> OAuthPolicy:
    """Tokens of one issuer, API keys still accepted; `tools:read` for every agent and every read tool."""
    return OAuthPolicy(issuers=(issuer_url,), agent_scopes={"*": (SCOPE,)}, tool_scopes={"read": (SCOPE,)})


def resource(agent: str = AGENT) -> str:
    """The agent's resource, its tokens' audience."""
    return f"{PUBLIC_URL}/mcp/v1/{WORKSPACE}/{agent}"


def upstream_auth(kind: str, issuer_url: str) -> JSONObject | None:
    """The upstream credentials of `BENCH_GATEWAY_CREDENTIAL`: none, one account's, or the signed-in user's."""
    if kind == "static":
        return {"type": "bearer", "secret": f"env:{STATIC_SECRET}"}
    if kind == "connection":
        return {"type": "user_connection", "secret": f"env:{EXCHANGE_SECRET}", "client_id": "bench-crank",
                "token_url": issuer_url + "/token", "authorization_url": issuer_url + "/authorize",
                "scheme": "people"}  # fmt: skip
    if kind == "exchange":
        return {"type": "token_exchange", "secret": f"env:{EXCHANGE_SECRET}", "client_id": "bench-crank",
                "token_url": issuer_url + "/token", "audience": "https://upstream.bench.test",
                "subject_issuer": issuer_url}  # fmt: skip
    return None


def oauth_registry(db_path: str, issuer_url: str, credential: str = "") -> str:
    """A copy of the registry whose workspace takes this issuer's tokens (one per process: the import check of
    `bench/run.py` makes one too), agent `agent`'s operations with `credential`'s upstream credentials."""
    copy = f"{db_path}.oauth-{os.getpid()}"
    shutil.copyfile(db_path, copy)
    engine = open_engine(f"sqlite:///{copy}")
    registry = Registry(engine)
    registry.set_workspace_oauth(WORKSPACE, policy(issuer_url))
    auth = upstream_auth(credential, issuer_url)
    if auth is not None:
        os.environ.setdefault("CRANK_SECRET_ENV_ALLOW", f"{WORKSPACE}:{STATIC_SECRET},{WORKSPACE}:{EXCHANGE_SECRET}")
        os.environ.setdefault(STATIC_SECRET, "one-account-token")
        os.environ.setdefault(EXCHANGE_SECRET, "bench-exchange-secret")
        specs = registry.operations(WORKSPACE)
        registry.put_operations(WORKSPACE, {name: {**spec, "execution_config": {"auth": auth}}
                                            for name, spec in specs.items()})  # fmt: skip
        registry.publish(WORKSPACE, AGENT)
    engine.dispose()
    return copy


def make_app(token_file: str | None = None) -> tuple[GatewayService, Issuer, str]:
    """The gateway, its issuer and the token, written to `token_file` when given."""
    issuer = Issuer()
    credential = os.environ.get("BENCH_GATEWAY_CREDENTIAL", "")
    copy = oauth_registry(os.environ["BENCH_GATEWAY_DB"], issuer.url, credential)
    registry = Registry(open_engine(f"sqlite:///{copy}"))
    keys = VaultKeys([os.urandom(32)]) if credential == "connection" else None
    users = int(os.environ.get("BENCH_GATEWAY_TOKENS", "1"))
    subjects = ["bench", *(f"user-{n}" for n in range(1, users))]
    if keys is not None:  # every user connected already, as the connect page leaves them
        vault = Vault(registry.engine, keys)
        for subject in subjects:
            vault.put(WORKSPACE, "people", issuer.url, subject, {"access_token": f"connected.{subject}"})
    gateway = GatewayService(registry, client=UpstreamClient(egress=LOOPBACK_EGRESS), public_url=PUBLIC_URL,
                             vault_keys=keys)  # fmt: skip
    audiences = [resource(AGENT), resource(DISCOVERY_AGENT)]
    token = issuer.token(audiences)
    if token_file:  # the bench's token first; with BENCH_GATEWAY_TOKENS=N, N-1 more, each another user's
        tokens = [token, *(issuer.token(audiences, sub=subject) for subject in subjects[1:])]
        Path(token_file).write_text("\n".join(tokens) + "\n")
    return gateway, issuer, token


app = make_app(os.environ.get("BENCH_GATEWAY_TOKEN_FILE"))[0] if "BENCH_GATEWAY_DB" in os.environ else None
