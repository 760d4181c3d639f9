"""Settings from CRANK_* variables and settings files, checked at start with a message per bad value."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from crank.exceptions import SettingsError
from crank.settings import load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("DATA_DIR", "DATABASE_URL", "REDIS_URL", "ADMIN_TOKEN", "LISTEN", "ROLE", "SETTINGS_FILE"):
        monkeypatch.delenv(f"CRANK_{name}", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_defaults_put_a_sqlite_registry_in_the_data_folder(tmp_path: Path) -> None:
    settings = load_settings()
    assert settings.role == "all" and (settings.host, settings.port) == ("127.0.0.1", 8000)
    assert settings.registry_url == f"sqlite:///{tmp_path / 'xdg' / 'crank' / 'registry.sqlite3'}"
    assert (tmp_path / "xdg" / "crank").is_dir()  # created on first use


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRANK_LISTEN", "[::1]:9100")
    monkeypatch.setenv("CRANK_ROLE", "mcp")
    monkeypatch.setenv("CRANK_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1/test")
    monkeypatch.setenv("CRANK_REDIS_URL", "redis://cache:6380/2")  # only read here, never connected to
    settings = load_settings()
    assert (settings.host, settings.port, settings.role) == ("::1", 9100, "mcp")
    assert settings.redis_url == "redis://cache:6380/2"
    assert settings.registry_url.startswith("postgresql+psycopg://")


def test_every_bad_value_is_named_with_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRANK_LISTEN", "localhost")
    monkeypatch.setenv("CRANK_DATABASE_URL", "mysql://root:hunter2@db/crank")
    monkeypatch.setenv("CRANK_REDIS_URL", "http://cache")
    monkeypatch.setenv("CRANK_ADMIN_TOKEN", "short")
    monkeypatch.setenv("CRANK_ROLE", "everything")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    for variable in ("CRANK_LISTEN", "CRANK_DATABASE_URL", "CRANK_REDIS_URL", "CRANK_ADMIN_TOKEN", "CRANK_ROLE"):
        assert variable in message
    assert "'mysql' is not supported" in message and "got 'localhost'" in message
    assert "hunter2" not in message and "short" not in message.replace("CRANK_", "")  # secrets are not echoed


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_settings_file_is_read_and_the_environment_wins(
    suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / f"crank{suffix}"
    lines = ['listen = "127.0.0.1:9001"', 'role = "admin"'] if suffix == ".toml" else ["listen: 127.0.0.1:9001",
                                                                                       "role: admin"]  # fmt: skip
    file.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("CRANK_ROLE", "mcp")
    settings = load_settings(file)
    assert settings.port == 9001 and settings.role == "mcp"
    assert load_settings(file, role="all").role == "all"  # command-line options win over both


def test_the_data_folders_crank_toml_is_read_when_no_other_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command and every serving role read the same settings: the data folder's `crank.toml`, below the
    environment; a file named by `--settings` or `CRANK_SETTINGS_FILE` is read instead of it."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "crank.toml").write_text('egress_allow = "127.0.0.1:9"\nrole = "admin"\n')
    monkeypatch.setenv("CRANK_DATA_DIR", str(folder))
    monkeypatch.setenv("CRANK_ROLE", "mcp")
    monkeypatch.delenv("CRANK_EGRESS_ALLOW", raising=False)  # the tests' own
    settings = load_settings()
    assert settings.egress_allow == "127.0.0.1:9" and settings.role == "mcp"  # the environment wins
    assert load_settings(data_dir=str(folder)).egress_allow == "127.0.0.1:9"
    other = tmp_path / "other.toml"
    other.write_text('listen = "127.0.0.1:9002"\n')
    named = load_settings(other)
    assert named.port == 9002 and named.egress_allow != "127.0.0.1:9"  # the named file instead
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path / "empty"))
    assert load_settings().egress_allow != "127.0.0.1:9"  # another folder: its own file, here none
    (folder / "crank.toml").write_text(f'data_dir = "{tmp_path / "elsewhere"}"\n')
    monkeypatch.setenv("CRANK_DATA_DIR", str(folder))
    with pytest.raises(SettingsError, match="cannot name another data folder"):
        load_settings()


def test_unknown_keys_and_missing_files_are_errors(tmp_path: Path) -> None:
    file = tmp_path / "crank.yaml"
    file.write_text("lissten: 127.0.0.1:1\n")
    with pytest.raises(SettingsError, match="CRANK_LISSTEN: Extra inputs are not permitted"):
        load_settings(file)
    with pytest.raises(SettingsError, match="no such file"):
        load_settings(tmp_path / "nope.toml")


def test_a_missing_admin_token_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    token = settings.admin_secret()
    assert len(token) >= 32 and settings.admin_secret() == token
    mode = stat.S_IMODE((tmp_path / "data" / "admin-token").stat().st_mode)
    assert mode == 0o600


def test_a_workspaces_share_of_an_origin_is_half_and_never_more_than_the_origins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRANK_UPSTREAM_CONNECTIONS_PER_ORIGIN", "20")
    settings = load_settings()
    assert settings.upstream_connections_per_workspace is None
    assert settings.upstream_client(settings.egress_policy())._limits == (20, 10)
    monkeypatch.setenv("CRANK_UPSTREAM_CONNECTIONS_PER_WORKSPACE", "30")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert (
        "CRANK_UPSTREAM_CONNECTIONS_PER_WORKSPACE (30) may not exceed CRANK_UPSTREAM_CONNECTIONS_PER_ORIGIN (20)"
        in str(caught.value)
    )


def test_the_consoles_single_sign_on_is_all_or_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CRANK_CONSOLE_SSO_ISSUER", "https://id.example")
    monkeypatch.setenv("CRANK_CONSOLE_SSO_CLIENT_SECRET", "sso-client-secret-value")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "_CLIENT_ID, _CLIENT_SECRET and _ADMINS" in str(caught.value)
    assert "sso-client-secret-value" not in str(caught.value)
    monkeypatch.setenv("CRANK_CONSOLE_SSO_CLIENT_ID", "crank-console")
    monkeypatch.setenv("CRANK_CONSOLE_SSO_ADMINS", '["alice@example.com"]')
    settings = load_settings()
    assert settings.console_sso_admins == ["alice@example.com"] and settings.console_sso_client_id == "crank-console"
