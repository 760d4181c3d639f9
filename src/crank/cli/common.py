"""What every `crank` command shares: its settings, the registry they name, JSON and YAML in and out, and one-line
errors for what an operator must fix (`clear_errors`), never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import click

from crank import _json
from crank.exceptions import ConfigurationError, DependencyUnavailableError

__all__ = [
    "INCLUDE_HELP",
    "Commands",
    "clear_errors",
    "current_settings",
    "named_settings_file",
    "echo_json",
    "import_app",
    "scheme_credentials",
    "upstream_auth",
    "progress_bar",
    "egress_policy",
    "migrated_engine",
    "open_registry",
    "read_definition",
]


def echo_json(value: Any) -> None:
    click.echo(_json.dumps_pretty(value).decode())


@contextmanager
def clear_errors() -> Iterator[None]:
    """A wrong definition or setting, or an operational fault (the registry database or Redis cannot be
    reached), is a one-line (or one-per-problem) message and exit code 1, never a traceback."""
    try:
        yield
    except Exception as exc:
        message = _operational(exc)
        if message is None:
            raise
        raise click.ClickException(message) from None


def _operational(error: Exception) -> str | None:
    """The message of an error the operator must fix (not a bug in Crank), else None. The driver modules
    are looked at only when a command loaded them: `crank --version` imports neither."""
    if isinstance(error, ConfigurationError | DependencyUnavailableError):
        return str(error)
    if "sqlalchemy" in sys.modules:
        from crank.registry import DATABASE_ERRORS, describe_database_error

        if isinstance(error, DATABASE_ERRORS):
            return describe_database_error(error)
    if "redis" in sys.modules:
        import redis.exceptions

        if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            return f"Redis cannot be reached: {first}"
    return None


class Commands(click.Group):
    """Every command answers an operational fault in one line (`clear_errors`), wherever it arises."""

    def invoke(self, ctx: click.Context) -> Any:
        with clear_errors():
            return super().invoke(ctx)


def current_settings(**overrides: Any) -> Any:
    from crank.settings import load_settings

    with clear_errors():
        return load_settings(named_settings_file(), **overrides)


def named_settings_file() -> str | None:
    """The settings file `crank --settings` names; None without the option."""
    found = click.get_current_context().find_root().params.get("settings_file")
    return str(found) if found is not None else None


def egress_policy() -> Any:
    """The settings' egress policy (`egress_allow` and `listen`, from the environment or the settings file):
    what imports by URL, publishes and checks may reach, as `crank serve` would."""
    return current_settings().egress_policy()


def migrated_engine(settings: Any) -> Any:
    """The settings' registry, its schema brought up to date: an unpooled engine (a command's few statements;
    nothing open left for a fork to inherit). A registry that cannot be reached is one line (`clear_errors`)."""
    from crank.registry import migrate, open_engine

    with clear_errors():
        engine = open_engine(
            settings.registry_url,
            pooled=False,
            connect_timeout=settings.database_connect_timeout,
            statement_timeout=settings.database_statement_timeout,
        )
        migrate(engine)
    return engine


def open_registry() -> Any:
    from crank.registry import Registry
    from crank.registry.changes import change_announcer

    settings = current_settings()
    engine = migrated_engine(settings)
    return Registry(engine, announce=change_announcer(settings.registry_url, settings.redis_url))


def read_definition(path: str) -> Any:
    import yaml

    from crank import _yaml

    try:
        return _yaml.load(Path(path).read_text())
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{path} is not valid JSON or YAML: {exc}") from None


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None]]:
    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label=label, file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        yield progress
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)


def upstream_auth(bearer: str | None, header: str | None) -> dict[str, str] | None:
    if bearer is not None and header is not None:
        raise click.UsageError("give --auth-bearer or --auth-header, not both")
    if bearer is not None:
        return {"type": "bearer", "secret": bearer}
    if header is not None:
        name, sep, reference = header.partition("=")
        if not sep or not name or not reference:
            raise click.BadParameter("expected NAME=REF, e.g. X-Api-Key=env:API_KEY", param_hint="--auth-header")
        return {"type": "header", "name": name, "secret": reference}
    return None


def scheme_credentials(pairs: tuple[str, ...]) -> dict[str, tuple[str, str | None]]:
    """`--auth-scheme SCHEME=REF` (or `SCHEME=CLIENT_ID:REF`): each scheme's secret reference and client id, bound
    to origins once the import says which operations require the scheme (`give_scheme_credentials`)."""
    credentials: dict[str, tuple[str, str | None]] = {}
    for pair in pairs:
        scheme, equals, value = pair.partition("=")
        client_id = None
        if not value.startswith(("env:", "file:")):
            client_id, _, value = value.partition(":")
        if not equals or not scheme or not value.startswith(("env:", "file:")) or value in ("env:", "file:"):
            raise click.BadParameter(f"{pair!r}: expected SCHEME=env:NAME or SCHEME=CLIENT_ID:env:NAME",
                                     param_hint="--auth-scheme")  # fmt: skip
        credentials[scheme] = (value, client_id or None)
    return credentials


def import_app(app: str, app_dir: str) -> Any:
    from uvicorn.importer import ImportFromStringError, import_from_string

    sys.path.insert(0, app_dir)
    try:
        return import_from_string(app)
    except ImportFromStringError as exc:
        raise click.BadParameter(str(exc), param_hint="APP") from None


INCLUDE_HELP: Final = (
    "Only the operations this glob matches (case-insensitive) by name, operationId, a tag or 'METHOD /path'; "
    "repeatable. A pattern starting with '!' leaves out what it matches: --include 'pets*' --include '!delete_*'."
)
