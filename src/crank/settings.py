"""Settings of a Crank server: environment variables prefixed `CRANK_`, or a settings file.

Precedence, highest first: command-line options, `CRANK_*` environment variables, the settings file
(`CRANK_SETTINGS_FILE` or `crank --settings`, TOML or YAML, keys without the prefix; without either, the data
folder's `crank.toml` when there is one, so that every command and every serving role read the same), defaults.
Everything is checked when the server starts; `load_settings` raises `SettingsError` listing every bad
value with the variable that carries it.

    CRANK_DATA_DIR=/var/lib/crank CRANK_ADMIN_TOKEN=... crank serve --role admin
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from crank.exceptions import ConfigurationError, SettingsError
from crank.gateway.client import DEFAULT_LIMIT_PER_HOST, UpstreamClient
from crank.gateway.egress import ALLOW_VARIABLE, EgressPolicy
from crank.gateway.secrets import ENV_ALLOW_VARIABLE, ENV_PREFIX_VARIABLE, SECRET_DIRS_VARIABLE
from crank.gateway.tokens import (
    INTROSPECTIONS_PER_ADDRESS,
    INTROSPECTIONS_PER_SECOND,
    SIGNATURE_CHECKS_PER_ADDRESS,
    SIGNATURE_CHECKS_PER_SECOND,
    TOKEN_CACHE_BYTES,
    TOKEN_CACHE_TOTAL_BYTES,
    TokenLimits,
)
from crank.registry.database import DEFAULT_CONNECT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT
from crank.registry.vault import VaultKeys
from crank.schema import problems_of
from crank.sources.agent_cache import AGENT_BUILDS_PER_SECOND, DEFAULT_AGENT_CACHE, AgentCacheLimits
from crank.sources.api_keys import DEFAULT_KEY_CACHE, DEFAULT_KEY_LIST_MAX_AGE, KEY_LOOKUPS_PER_SECOND, KeyCacheLimits
from crank.sources.audit_trail import DEFAULT_AUDIT_BUFFER
from crank.wire.asgi import DEFAULT_MAX_BODY_SIZE
from crank.wire.connection_limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_BYTES,
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEAD_BYTES,
    DEFAULT_SEND_TIMEOUT,
    ConnectionLimits,
)
from crank.wire.listen import DEFAULT_LISTEN
from crank.wire.workers import DEFAULT_LIVENESS_TIMEOUT, DEFAULT_WORKERS, MAX_WORKERS

__all__ = ["DATA_FOLDER_SETTINGS", "Role", "Settings", "SettingsError", "given_settings", "load_settings"]

Role = Literal["admin", "mcp", "all"]
ENV_PREFIX = "CRANK_"
_DATABASES = ("sqlite", "postgresql")
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
# may carry credentials
_UNSHOWN = ("admin_token", "database_url", "redis_url", "state_secret", "console_sso_client_secret")
_settings_file: ContextVar[Path | None] = ContextVar("crank_settings_file", default=None)
_given_only: ContextVar[bool] = ContextVar("crank_settings_given_only", default=False)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "crank"


class Settings(BaseSettings):
    """What a `crank serve` process needs. Every field is `CRANK_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", validate_default=True)

    data_dir: Path = Field(default_factory=_default_data_dir, description="Where the SQLite registry lives.")
    database_url: str | None = Field(None, description="sqlite:///path or postgresql+psycopg://...; default: SQLite.")
    redis_url: str | None = Field(None, description="redis://host:port/db for shared state and notifications.")
    admin_token: SecretStr | None = Field(None, description="Bearer token of the admin API (generated if unset).")
    state_secret: SecretStr | None = Field(
        None, description="Signs MCP request states and session ids (every replica the same; default: from the "
        "admin token)."
    )  # fmt: skip
    vault_keys: str | None = Field(
        None, max_length=4096,
        description="References (env:NAME or file:/path, comma-separated) to the token vault's keys, the first "
        "encrypting: users' own connections to APIs need them (`crank vault key` makes one).",
    )  # fmt: skip
    listen: str = Field(DEFAULT_LISTEN, description="host:port to listen on ([::1]:8000 for IPv6).")
    role: Role = Field("all", description="admin, mcp or all.")
    workers: int = Field(
        DEFAULT_WORKERS, ge=1, le=MAX_WORKERS, description="Worker processes serving the one port (one per core)."
    )
    worker_timeout: float = Field(
        DEFAULT_LIVENESS_TIMEOUT,
        ge=1,
        le=3600,
        description="With workers: seconds a worker's event loop may go without a heartbeat before it is replaced.",
    )
    require_api_keys: bool = Field(True, description="MCP endpoints need a workspace API key or access token.")
    public_url: str | None = Field(
        None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        max_length=512,
        description="The public base URL clients reach this server at (https://mcp.example.com): names each agent's "
        "OAuth resource (its tokens' audience) and metadata; never taken from a request's Host header.",
    )
    poll_interval: float = Field(0.5, gt=0, le=60, description="Seconds between registry generation checks.")
    console_idle_timeout: int = Field(
        1800, ge=60, le=43200, description="Seconds without a request after which a console session ends."
    )
    console_sso_issuer: str | None = Field(
        None, description="OpenID Connect provider the console's single sign-on goes through (its issuer URL)."
    )
    console_sso_client_id: str | None = Field(None, description="The console's client id at that provider.")
    console_sso_client_secret: SecretStr | None = Field(None, description="The console's client secret there.")
    console_sso_admins: list[str] = Field(
        default_factory=list,
        description="Subjects or verified e-mail addresses who may sign in to the console through the provider.",
    )
    registry_push: bool = Field(
        True,
        description="MCP replicas reload as soon as a registry change is announced (PostgreSQL LISTEN/NOTIFY, or "
        "Redis pub/sub with another database); polling stays as the fallback.",
    )
    database_connect_timeout: float = Field(
        DEFAULT_CONNECT_TIMEOUT, gt=0, le=300, description="Seconds to open a registry connection."
    )
    database_statement_timeout: float = Field(
        DEFAULT_STATEMENT_TIMEOUT, gt=0, le=3600, description="Seconds one registry statement may take."
    )
    head_timeout: float = Field(
        DEFAULT_HEAD_TIMEOUT, gt=0, le=3600, description="Seconds for a request's line and headers to arrive."
    )
    body_timeout: float = Field(
        DEFAULT_BODY_TIMEOUT, gt=0, le=3600, description="Seconds for a request's body to arrive after its head."
    )
    keepalive_timeout: float = Field(
        DEFAULT_KEEPALIVE_TIMEOUT, gt=0, le=3600, description="Seconds a connection may stay idle between requests."
    )
    send_timeout: float = Field(
        DEFAULT_SEND_TIMEOUT,
        gt=0,
        le=3600,
        description="Seconds a connection may hold unsent answer bytes without taking 64 KiB of them (or the rest).",
    )
    max_connections: int = Field(
        DEFAULT_MAX_CONNECTIONS, ge=1, le=1_000_000, description="Client connections open at once (per process)."
    )
    max_head_bytes: int = Field(
        DEFAULT_MAX_HEAD_BYTES, ge=1024, le=1024 * 1024, description="Bytes of a request's line and headers."
    )
    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY_SIZE,
        ge=1024,
        le=64 * 1024 * 1024,
        description="Bytes of a request's body at an MCP endpoint (413).",
    )
    audit: bool = Field(
        False, description="Record every tool call in the registry's audit trail (docs/deployment.md); off by default."
    )
    audit_buffer: int = Field(
        DEFAULT_AUDIT_BUFFER, ge=1, le=1_000_000,
        description="Audit records waiting to be written at most; past it, new ones are dropped and counted.",
    )  # fmt: skip
    upstream_connections_per_origin: int = Field(
        DEFAULT_LIMIT_PER_HOST, ge=1, le=10_000, description="Connections to one upstream origin, all workspaces."
    )
    upstream_connections_per_workspace: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Connections to one upstream origin, one workspace (default: half the per-origin limit, at "
        "least 1; at most the per-origin limit).",
    )
    key_list_max_age: float = Field(
        DEFAULT_KEY_LIST_MAX_AGE,
        gt=0,
        le=3600,
        description="Seconds an MCP replica accepts keys without the registry confirming its key list (then 503).",
    )
    trusted_proxies: str = Field(
        "", description="Comma-separated addresses or networks of reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto name the client (its address counts for the per-address budgets and limits)."
    )  # fmt: skip
    agent_cache: int = Field(
        DEFAULT_AGENT_CACHE, ge=1, le=1_000_000,
        description="Agents an MCP replica keeps built, the most recently used (the others are built on their next "
        "request).",
    )  # fmt: skip
    agent_builds_per_second: float = Field(
        AGENT_BUILDS_PER_SECOND, gt=0, le=10_000,
        description="Agents of up to 20 tools an MCP replica builds a second on requests (a larger one counts one per "
        "20 tools), a quarter of them at most for one workspace, and for one client address among callers without "
        "credentials (then 503).",
    )  # fmt: skip
    key_cache: int = Field(
        DEFAULT_KEY_CACHE, ge=1, le=10_000_000,
        description="API keys an MCP replica keeps, the most recently looked up (the others are looked up by digest on "
        "their next request).",
    )  # fmt: skip
    key_lookups_per_second: float = Field(
        KEY_LOOKUPS_PER_SECOND, gt=0, le=100_000,
        description="API keys an MCP replica looks up in the registry a second, a quarter of them at most for one "
        "client address (then 503).",
    )  # fmt: skip
    token_checks_per_second: float = Field(
        SIGNATURE_CHECKS_PER_SECOND, gt=0, le=100_000,
        description="New access tokens' signature checks a second, per workspace and issuer (then 503).",
    )  # fmt: skip
    token_checks_per_address: float = Field(
        SIGNATURE_CHECKS_PER_ADDRESS, gt=0, le=100_000,
        description="New access tokens' signature checks a second, per client address (IPv4, or IPv6 /64).",
    )  # fmt: skip
    introspections_per_second: float = Field(
        INTROSPECTIONS_PER_SECOND, gt=0, le=10_000,
        description="Introspection calls a second, per workspace and issuer (then 503).",
    )  # fmt: skip
    introspections_per_address: float = Field(
        INTROSPECTIONS_PER_ADDRESS, gt=0, le=10_000,
        description="Introspection calls a second, per client address (IPv4, or IPv6 /64).",
    )  # fmt: skip
    token_cache_bytes: int = Field(
        TOKEN_CACHE_BYTES, ge=4096, le=1024 * 1024 * 1024,
        description="Bytes of validated access tokens kept per workspace (its least recently used go first).",
    )  # fmt: skip
    token_cache_total_bytes: int = Field(
        TOKEN_CACHE_TOTAL_BYTES, ge=4096, le=16 * 1024 * 1024 * 1024,
        description="Bytes of validated access tokens kept for every workspace (the largest workspace's go first).",
    )  # fmt: skip
    egress_allow: str = Field(
        "", description="Comma-separated networks, address:port or host:port the gateway may connect to besides "
        "public addresses (crank.gateway.egress)."
    )  # fmt: skip
    secret_env_allow: str = Field(
        "", description="Comma-separated workspace:NAME: the environment variables a workspace's operations may name "
        "as env:NAME secrets (crank.gateway.secrets)."
    )  # fmt: skip
    secret_env_prefix: str = Field(
        "", description="Comma-separated workspace:PREFIX: every environment variable with the prefix, likewise."
    )
    secret_dirs: str | None = Field(
        None, description="Colon-separated folders of file: secrets, a subfolder per workspace (default: /run/secrets "
        "and /var/run/secrets)."
    )  # fmt: skip
    allowed_hosts: str = Field(
        "", description="Comma-separated host names (no port) MCP endpoints serve besides the loopback names, when "
        "DNS-rebinding protection is on (a loopback listen address): the names clients reach a load balancer by."
    )  # fmt: skip
    allowed_origins: str = Field(
        "", description="Comma-separated origins (https://app.example.com) allowed besides same-origin requests."
    )
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @field_validator("database_url")
    @classmethod
    def _database(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = make_url(value)
        except ArgumentError:
            raise ValueError("not a database URL (sqlite:///path or postgresql+psycopg://user@host/db)") from None
        if url.get_backend_name() not in _DATABASES:
            raise ValueError(f"database {url.get_backend_name()!r} is not supported (supported: sqlite, postgresql)")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(_REDIS_SCHEMES):
            raise ValueError("a Redis URL starts with redis://, rediss:// or unix://")
        return value

    @field_validator("admin_token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("the admin token must be at least 16 characters")
        return value

    @field_validator("vault_keys")
    @classmethod
    def _vault_keys(cls, value: str | None) -> str | None:
        """The keys resolve and are keys, at start: a missing or wrong key is said before anything is served."""
        if value:
            try:
                VaultKeys.from_references(value)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("egress_allow")
    @classmethod
    def _egress(cls, value: str) -> str:
        try:
            EgressPolicy(value.split(","))
        except ConfigurationError as exc:
            raise ValueError(str(exc).removeprefix(f"{ALLOW_VARIABLE}: ")) from None
        return value

    @property
    def host_names(self) -> list[str]:
        """`allowed_hosts` as a list (empty items dropped)."""
        return _listed(self.allowed_hosts)

    @property
    def origins(self) -> list[str]:
        """`allowed_origins` as a list (empty items dropped)."""
        return _listed(self.allowed_origins)

    def egress_policy(self) -> EgressPolicy:
        """What the gateway may connect to: public addresses, `egress_allow`, never its own `listen` port."""
        return EgressPolicy(self.egress_allow.split(","), listen=[self.listen])

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, port = _split_address(value)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected host:port with a port from 1 to 65535, e.g. 127.0.0.1:8000 or [::1]:8000")
        return value

    @model_validator(mode="after")
    def _key_list_outlives_polls(self) -> Settings:
        # The watcher confirms the key list once per poll: a shorter window would refuse keys between polls.
        if self.key_list_max_age <= 2 * self.poll_interval:
            raise ValueError("key_list_max_age must be more than twice poll_interval")
        return self

    @model_validator(mode="after")
    def _sso_complete(self) -> Settings:
        given = (self.console_sso_issuer, self.console_sso_client_id, self.console_sso_client_secret)
        if any(value is not None for value in given) and (None in given or not self.console_sso_admins):
            raise ValueError(
                f"the console's single sign-on needs {ENV_PREFIX}CONSOLE_SSO_ISSUER, _CLIENT_ID, _CLIENT_SECRET and "
                "_ADMINS (who may sign in) together"
            )
        return self

    @model_validator(mode="after")
    def _workspace_share_within_origin(self) -> Settings:
        per_workspace, per_origin = self.upstream_connections_per_workspace, self.upstream_connections_per_origin
        if per_workspace is not None and per_workspace > per_origin:
            raise ValueError(
                f"{ENV_PREFIX}UPSTREAM_CONNECTIONS_PER_WORKSPACE ({per_workspace}) may not exceed "
                f"{ENV_PREFIX}UPSTREAM_CONNECTIONS_PER_ORIGIN ({per_origin})"
            )
        return self

    @property
    def host(self) -> str:
        return _split_address(self.listen)[0]

    @property
    def port(self) -> int:
        return int(_split_address(self.listen)[1])

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            head_timeout=self.head_timeout,
            body_timeout=self.body_timeout,
            keepalive_timeout=self.keepalive_timeout,
            send_timeout=self.send_timeout,
            max_connections=self.max_connections,
            max_head_bytes=self.max_head_bytes,
            drain_bytes=min(DEFAULT_DRAIN_BYTES, self.max_body_bytes),  # never more of a refused body than a whole one
        )

    def vault(self) -> VaultKeys | None:
        """The token vault's keys (`CRANK_VAULT_KEYS`), read from their references; None when unset.
        `ConfigurationError` naming a reference that does not resolve or is no key."""
        return VaultKeys.from_references(self.vault_keys) if self.vault_keys else None

    def token_limits(self) -> TokenLimits:
        """What checking new access tokens may cost (`crank.gateway.tokens.TokenLimits`)."""
        return TokenLimits(
            checks_per_second=self.token_checks_per_second,
            checks_per_address=self.token_checks_per_address,
            introspections_per_second=self.introspections_per_second,
            introspections_per_address=self.introspections_per_address,
            cache_bytes=self.token_cache_bytes,
            cache_total_bytes=self.token_cache_total_bytes,
        )

    def agent_cache_limits(self) -> AgentCacheLimits:
        """How many agents stay built, and how many cold ones are built a second (`crank.sources.agent_cache`)."""
        return AgentCacheLimits(size=self.agent_cache, builds_per_second=self.agent_builds_per_second)

    def key_cache_limits(self) -> KeyCacheLimits:
        """How many API keys stay held, and how many are looked up a second (`crank.sources.api_keys`)."""
        return KeyCacheLimits(size=self.key_cache, lookups_per_second=self.key_lookups_per_second)

    def upstream_client(self, egress: EgressPolicy) -> UpstreamClient:
        """The gateway's one upstream client, with the settings' pool limits and the egress policy."""
        return UpstreamClient(
            limit_per_host=self.upstream_connections_per_origin,
            limit_per_tenant=self.upstream_connections_per_workspace,
            egress=egress,
        )

    @property
    def registry_url(self) -> str:
        """The database URL, or the SQLite file under the data folder (created on first use)."""
        if self.database_url is not None:
            return self.database_url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.data_dir / 'registry.sqlite3'}"

    def signing_secret(self) -> bytes:
        """What signs 2026-07-28 request states and legacy session ids: `CRANK_STATE_SECRET`, else derived from
        the admin token (never the token itself), so that replicas and workers that share either honour each
        other's: a confirmation answered through one replica completes on another."""
        if self.state_secret is not None:
            return self.state_secret.get_secret_value().encode()
        return hmac.new(self.admin_secret().encode(), b"crank.state-secret", hashlib.sha256).digest()

    def admin_secret(self) -> str:
        """The admin token; when none is set, one is generated once and kept in the data folder (mode 0600)."""
        if self.admin_token is not None:
            return self.admin_token.get_secret_value()
        path = self.data_dir / "admin-token"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            fresh = path.with_name(f".admin-token-{secrets.token_hex(8)}")
            fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(secrets.token_urlsafe(32))
            try:  # written whole, then linked into place: two processes starting at once agree on one
                os.link(fresh, path)
            except FileExistsError:
                pass
            finally:
                fresh.unlink()
        return path.read_text().strip()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if _given_only.get():  # `given_settings`: no environment, no file
            return (init_settings,)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        file = _settings_file.get() or os.environ.get(f"{ENV_PREFIX}SETTINGS_FILE")
        if file:
            sources.append(_file_source(settings_cls, Path(file)))
        elif (folder_file := _data_folder_file(init_settings)).is_file():
            source = _file_source(settings_cls, folder_file)
            if "data_dir" in source():
                raise SettingsError(f"{folder_file}: the data folder's settings file cannot name another data folder "
                                    f"(data_dir); set CRANK_DATA_DIR instead")  # fmt: skip
            sources.append(source)
        return tuple(sources)


def given_settings(**values: Any) -> Settings:
    """Settings from these values and the defaults only: no `CRANK_*` variable, no settings file (the demo
    must never write into the registry a real deployment's environment names)."""
    token = _given_only.set(True)
    try:
        return _checked(values)
    finally:
        _given_only.reset(token)


def _listed(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _split_address(value: str) -> tuple[str, str]:
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = value.rpartition(":")
    return host, port


DATA_FOLDER_SETTINGS: Final = "crank.toml"
"""The settings file every command and role reads from the data folder when no other file is named."""


def _data_folder_file(init_settings: PydanticBaseSettingsSource) -> Path:
    """The data folder's settings file: the folder as an option, `CRANK_DATA_DIR` or the default names it."""
    given = init_settings().get("data_dir") or os.environ.get(f"{ENV_PREFIX}DATA_DIR")
    return (Path(given) if given else _default_data_dir()) / DATA_FOLDER_SETTINGS


def _file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    if not path.is_file():
        raise SettingsError(f"{ENV_PREFIX}SETTINGS_FILE: no such file {str(path)!r}")
    if path.suffix == ".toml":
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    if path.suffix in (".yaml", ".yml"):
        return YamlConfigSettingsSource(settings_cls, yaml_file=path)
    raise SettingsError(f"{ENV_PREFIX}SETTINGS_FILE: {str(path)!r} must be a .toml, .yaml or .yml file")


def load_settings(settings_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Read and check the settings; `overrides` (command-line options) win over everything else."""
    token = _settings_file.set(Path(settings_file) if settings_file is not None else None)
    try:
        settings = _checked({key: value for key, value in overrides.items() if value is not None})
    finally:
        _settings_file.reset(token)
    _give_secret_allowances(settings)
    return settings


def _give_secret_allowances(settings: Settings) -> None:
    """The secret allowances a settings file names, given to this process's environment, where every check of a
    secret reference reads them (`crank.gateway.secrets`, on each call too) and where `--workers` inherit them. A
    variable set already is what the settings read (the environment wins over the file), so it stays."""
    for variable, value in ((ENV_ALLOW_VARIABLE, settings.secret_env_allow),
                            (ENV_PREFIX_VARIABLE, settings.secret_env_prefix),
                            (SECRET_DIRS_VARIABLE, settings.secret_dirs)):  # fmt: skip
        if value:
            os.environ.setdefault(variable, value)


def _checked(values: dict[str, Any]) -> Settings:
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    except ValueError as exc:  # a settings file that is not valid TOML/YAML
        raise SettingsError(f"{ENV_PREFIX}SETTINGS_FILE: {exc}") from None


def _describe(error: ValidationError) -> str:
    lines = ["invalid settings:"]
    for problem in problems_of(error):
        name = problem.dotted
        variable = f"{ENV_PREFIX}{name.upper()}" if name else "settings"
        # A problem of the settings as a whole has them all as its input, secrets included: never shown.
        shown = "" if not name or name in _UNSHOWN else f" (got {problem.input!r})"
        lines.append(f"  {variable}: {problem.message}{shown}")
    return "\n".join(lines)
