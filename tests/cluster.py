"""Several `crank serve` OS processes behind nginx, for the tests of what many replicas do together.

    def test_something(start_cluster):
        cluster = start_cluster(3)                     # sharing the test's PostgreSQL database and Redis
        httpx.get(cluster.url + "/readyz")             # through nginx
        httpx.get(cluster.replicas[0].url + "/readyz")  # one replica directly
        cluster.kill(0)                                # SIGKILL (its whole process group)
        cluster.restart(0)                             # same port, same environment; waits for /readyz

Each replica is `python -m crank.cli serve [ARGS]` in a process group of its own, on a free loopback port,
with the environment given. Unless the test says otherwise every replica gets `CRANK_ADMIN_TOKEN=ADMIN_TOKEN`,
role `all`, `CRANK_DATABASE_URL` = the test's own PostgreSQL database (`cluster_database`, also
`cluster.database_url`) and `CRANK_REDIS_URL` = the session's Redis (`redis=False`: none). Its output goes to
`<root>/replica-<i>.log`. It counts as started once `/readyz` answers 200; replicas start one after the
other (the first one migrates the database).

nginx runs as a process of the test, with its prefix, pid, logs and temporary files in `<root>/nginx`. Its
configuration is the project's own `deploy/nginx/crank.conf`, included as it is by a small top-level
`nginx.conf` written here; the only things the test supplies are the two files crank.conf includes:
`crank-upstreams.conf` (the replicas' ports) and `crank-listen.conf` (nginx's port).

The `start_cluster` fixture stops everything at the end of the test, whatever happened, and only then drops
the test's database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import pytest

from crank.gateway.egress import ALLOW_VARIABLE
from tests import services

__all__ = [
    "ADMIN_HEADERS",
    "ADMIN_TOKEN",
    "NGINX_CONF",
    "Cluster",
    "ClusterError",
    "Nginx",
    "Replica",
    "StartCluster",
    "admin",
    "cluster_database",
    "mcp",
    "publish_user_agent",
    "serves_tool",
    "until",
    "start_cluster",
    "upstream_lines",
]

ROOT = Path(__file__).resolve().parent.parent
NGINX_CONF = ROOT / "deploy" / "nginx" / "crank.conf"
NGINX = "/usr/sbin/nginx"
HOST = services.HOST
ADMIN_TOKEN = "cluster-admin-token-0123456789"
START_TIMEOUT = 60.0  # seconds a replica or nginx may take to answer (a guard against a hang, not a measure)
STOP_TIMEOUT = 10.0


class ClusterError(RuntimeError):
    """A replica or nginx did not start, with the tail of its log."""


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _kill_group(process: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the process group the process leads (a `--workers` supervisor and its workers alike)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


@dataclass
class Replica:
    """One `crank serve` process: `url` reaches it directly, bypassing nginx."""

    index: int
    port: int
    env: dict[str, str]
    args: tuple[str, ...]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    _output: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the process and wait until its `/readyz` answers 200."""
        if self.running:
            return
        self._output = self.log.open("ab")
        environment = {**self.env, "CRANK_LISTEN": f"{HOST}:{self.port}"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crank.cli", "serve", *self.args], cwd=ROOT, env=environment,
            stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                why = "exited" if self.process.poll() is not None else "did not get ready"
                self.stop()
                raise ClusterError(f"replica {self.index} on port {self.port} {why}\n{_tail(self.log)}")
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: no graceful shutdown, connections cut."""
        if self.process is not None:
            _kill_group(self.process, signal.SIGKILL)
            self.process.wait()
        self._close_output()

    def stop(self) -> None:
        """SIGTERM and wait for a graceful exit; SIGKILL if it does not come in time."""
        if self.process is not None:
            if self.process.poll() is None:
                _kill_group(self.process, signal.SIGTERM)
                try:
                    self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
            _kill_group(self.process, signal.SIGKILL)  # any worker left behind
            self.process.wait()
        self._close_output()

    def _close_output(self) -> None:
        if self._output is not None:
            self._output.close()
            self._output = None


def upstream_lines(ports: Sequence[int]) -> str:
    """`crank-upstreams.conf` for replicas on these loopback ports (the format docs/deployment.md shows).

    `fail_timeout=2s`: a replica that failed once is left out for 2 s, then tried again, so a restarted
    replica is back in the rotation soon."""
    return "".join(f"server {HOST}:{port} max_fails=1 fail_timeout=2s;\n" for port in ports)


def _main_conf(prefix: Path) -> str:
    # Running as root, nginx's workers would switch to `nobody`, who cannot enter the test's 0700 temp dirs.
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp = "".join(f"    {kind}_temp_path {prefix}/temp/{kind};\n" for kind in ("client_body", "proxy",
                                                                               "fastcgi", "uwsgi", "scgi"))  # fmt: skip
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log warn;\n"
        "events {\n    worker_connections 1024;\n}\n"
        f"http {{\n    access_log off;\n{temp}    include {NGINX_CONF};\n}}\n"
    )


@dataclass
class Nginx:
    """nginx with the project's configuration in front of the replicas, run from `prefix`."""

    prefix: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def configure(self, ports: Sequence[int]) -> None:
        (self.prefix / "temp").mkdir(parents=True, exist_ok=True)
        (self.prefix / "nginx.conf").write_text(_main_conf(self.prefix))
        (self.prefix / "crank-upstreams.conf").write_text(upstream_lines(ports))
        (self.prefix / "crank-listen.conf").write_text(f"listen {HOST}:{self.port};\n")

    def start(self, timeout: float = START_TIMEOUT) -> None:
        if not Path(NGINX).is_file():
            raise ClusterError(f"{NGINX} not found: run scripts/install-services (Debian's nginx-light)")
        log = self.prefix / "error.log"
        self.process = subprocess.Popen(
            [NGINX, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf"), "-e", str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._listening():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"nginx on port {self.port} did not start\n{_tail(log)}")
            time.sleep(0.05)

    def errors(self) -> list[str]:
        """The `[error]` lines of nginx's log so far (one per request it could not pass on or complete)."""
        log = self.prefix / "error.log"
        return [line for line in log.read_text(errors="replace").splitlines() if "[error]" in line]

    def _listening(self) -> bool:
        try:
            httpx.get(self.url + "/healthz", timeout=2)
            return True
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                _kill_group(self.process, signal.SIGQUIT)  # nginx's graceful shutdown
                try:
                    self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
            _kill_group(self.process, signal.SIGKILL)
            self.process.wait()


@dataclass
class Cluster:
    """Replicas behind nginx. `url` is nginx; `replicas[i].url` one replica directly."""

    root: Path
    replicas: list[Replica]
    nginx: Nginx
    database_url: str

    @property
    def url(self) -> str:
        return self.nginx.url

    def kill(self, index: int) -> None:
        """SIGKILL replica `index` (and any worker of it)."""
        self.replicas[index].kill()

    def restart(self, index: int) -> None:
        """Start replica `index` again on its port with its environment; returns once it is ready."""
        replica = self.replicas[index]
        replica.stop()
        replica.start()

    def stop(self) -> None:
        """Stop nginx and every replica (each attempted, whatever the others do)."""
        errors: list[BaseException] = []
        parts: list[Nginx | Replica] = [self.nginx, *self.replicas]
        for part in parts:
            try:
                part.stop()
            except BaseException as exc:  # noqa: BLE001 - stop the rest, then report
                errors.append(exc)
        if errors:
            raise errors[0]


def _replica_env(common: Mapping[str, str], own: Mapping[str, str] | None, root: Path, index: int) -> dict[str, str]:
    # The test's environment without its CRANK_* variables (a developer's own must not leak in), but with the
    # suite's loopback egress allowance: the test upstreams are loopback servers.
    base = {key: value for key, value in os.environ.items() if not key.startswith("CRANK_")}
    if ALLOW_VARIABLE in os.environ:
        base[ALLOW_VARIABLE] = os.environ[ALLOW_VARIABLE]
    defaults = {
        "CRANK_ADMIN_TOKEN": ADMIN_TOKEN,
        "CRANK_ROLE": "all",
        "CRANK_DATA_DIR": str(root / f"data-{index}"),
        "CRANK_POLL_INTERVAL": "0.1",
    }
    return {**base, **defaults, **common, **(own or {})}


StartCluster = Callable[..., Cluster]
"""The `start_cluster` fixture's type."""


@pytest.fixture
def start_cluster(tmp_path: Path, cluster_database: str, redis_url: str) -> Iterator[StartCluster]:
    """Start `replicas` `crank serve` processes and nginx in front of them; everything is stopped when the
    test ends. Arguments: `replicas` (a count), `env` (for every replica, over the defaults above),
    `replica_env` (a list, one mapping per replica, e.g. `[{"CRANK_ROLE": "admin"}, {}, {}]`), `args`
    (`crank serve` arguments, e.g. `["--workers", "2"]`), `redis` (False: no `CRANK_REDIS_URL`), `nginx_port`
    (nginx's port, when the replicas must know their public URL before they start)."""
    started: list[Cluster] = []

    def start(
        replicas: int = 3,
        *,
        env: Mapping[str, str] | None = None,
        replica_env: Sequence[Mapping[str, str]] | None = None,
        args: Sequence[str] = (),
        redis: bool = True,
        nginx_port: int | None = None,
    ) -> Cluster:
        root = tmp_path / f"cluster-{len(started)}"
        root.mkdir()
        own = list(replica_env or [{}] * replicas)
        if len(own) != replicas:
            raise ValueError(f"replica_env has {len(own)} entries for {replicas} replicas")
        shared = {"CRANK_DATABASE_URL": cluster_database, **({"CRANK_REDIS_URL": redis_url} if redis else {})}
        members = [
            Replica(i, services.free_port(), _replica_env({**shared, **(env or {})}, own[i], root, i), tuple(args),
                    root / f"replica-{i}.log")
            for i in range(replicas)
        ]  # fmt: skip
        nginx = Nginx(root / "nginx", nginx_port or services.free_port())
        cluster = Cluster(root, members, nginx, cluster_database)
        started.append(cluster)  # stopped at the end even if a part fails to start
        for replica in members:
            replica.start()
        cluster.nginx.configure([replica.port for replica in members])
        cluster.nginx.start()
        return cluster

    try:
        yield start
    finally:
        for cluster in started:
            cluster.stop()


@pytest.fixture
def cluster_database(postgres_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database of the test's own (a SQLAlchemy URL), dropped afterwards."""
    with services.fresh_database(postgres_url, "crank_cluster") as (url, _):
        yield url


# -- what most cluster tests do first --------------------------------------------------------------------

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def admin(base: str, method: str, path: str, body: object = None) -> httpx.Response:
    """One admin API request (`/admin/v1` + path) with the cluster's admin token; fails on an error status."""
    response = httpx.request(method, f"{base}/admin/v1{path}", json=body, headers=ADMIN_HEADERS, timeout=30)
    response.raise_for_status()
    return response


def publish_user_agent(base: str, upstream: str, *, workspace: str = "acme", agent: str = "desk",
                       tool: str = "user_get") -> str:  # fmt: skip
    """Through the admin API at `base`: a workspace, an operation `GET {upstream}/users/{id}` (the app of
    tests/gateway/upstream.py) bound as `tool`, published; returns a new API key of the workspace."""
    admin(base, "PUT", f"/workspaces/{workspace}", {"name": workspace})
    operation = {
        "protocol": "http",
        "target": {"method": "GET", "url": f"{upstream}/users/{{id}}"},
        "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        "description": "One user.",
    }
    admin(base, "PUT", f"/workspaces/{workspace}/operations/get_user", operation)
    admin(base, "PUT", f"/workspaces/{workspace}/agents/{agent}",
          {"description": "Desk", "bindings": [{"operation": "get_user", "tool_name": tool}]})  # fmt: skip
    admin(base, "POST", f"/workspaces/{workspace}/agents/{agent}/publish")
    key: str = admin(base, "POST", f"/workspaces/{workspace}/api-keys", {}).json()["key"]
    return key


def until(condition: Callable[[], bool], timeout: float = START_TIMEOUT, what: str = "the change") -> None:
    """Wait until `condition()` holds (a guard against a hang, not a measure of time)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not come within {timeout:g} s")
        time.sleep(0.05)


def serves_tool(base: str, key: str, tool: str, *, workspace: str = "acme", agent: str = "desk") -> bool:
    """Whether the agent at `base` lists `tool` now."""
    try:
        listed = mcp(base, key, "tools/list", workspace=workspace, agent=agent)
    except httpx.TransportError:
        return False
    tools = listed.json().get("result", {}).get("tools", []) if listed.status_code == 200 else []
    return any(entry["name"] == tool for entry in tools)


def mcp(base: str, key: str, method: str, params: dict[str, object] | None = None, *, workspace: str = "acme",
        agent: str = "desk", client: httpx.Client | None = None) -> httpx.Response:  # fmt: skip
    """One MCP JSON-RPC request (no session: Crank's endpoint is stateless) to an agent at `base`."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {key}"}
    url = f"{base}/mcp/v1/{workspace}/{agent}"
    if client is not None:
        return client.post(url, json=body, headers=headers)
    return httpx.post(url, json=body, headers=headers, timeout=30)
