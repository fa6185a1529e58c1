"""Load ``config/*.toml`` plus ``PIPELINE_*`` overrides into frozen ``Settings``.

Every problem is collected, not just the first, and reported as one line
``FILE:key.path: what is wrong`` inside a ``ConfigError``; environment problems
name the variable instead. ``check_command`` and ``show_command`` are the
bodies of ``pipeline config check`` and ``pipeline config show``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from pipeline.config import sections
from pipeline.config.reader import Problems, Table
from pipeline.config.render import render_json, render_toml
from pipeline.config.repos import RepoContext, repo
from pipeline.config.settings import Settings
from pipeline.core.errors import ConfigError

ENV_VARS: dict[str, str] = {
    "PIPELINE_CONFIG": "configuration file to read when no path is given on the command line",
    "PIPELINE_DATA_DIR": "data directory for the default history database and volume "
    "(default $XDG_DATA_HOME/afk-pipeline or ~/.local/share/afk-pipeline)",
    "PIPELINE_DATABASE_URL": "history database: sqlite:///PATH or postgresql://USER@HOST/DB "
    "(overrides database_url)",
    "PIPELINE_VOLUME": "directory for checkouts, caches and evidence (overrides volume)",
    "PIPELINE_LOG_LEVEL": "debug, info, warning or error (overrides log_level)",
    "PIPELINE_LOG_FORMAT": "text or json (overrides log_format)",
    "PIPELINE_MAX_CONCURRENCY": "runs executing at once on this host, >= 1 "
    "(overrides max_concurrency)",
    "PIPELINE_MAX_QUEUE_DEPTH": "queued runs accepted before new work is refused, >= 1 "
    "(overrides max_queue_depth)",
    "PIPELINE_POLL_INTERVAL_S": "seconds between tracker polls, > 0 (overrides poll_interval_s)",
    "PIPELINE_HTTP_LISTEN": "host:port of the HTTP server (overrides [http] listen)",
    "PIPELINE_RUN_MIGRATIONS": "true or false: upgrade the database schema at start "
    "(overrides run_migrations)",
}
DEFAULTS_SOURCE = "<built-in defaults>"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def load_settings(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read ``path`` (or ``$PIPELINE_CONFIG``, or only defaults) and apply overrides.

    Raises ``ConfigError`` listing every problem found.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    if path is None and env.get("PIPELINE_CONFIG"):
        path = Path(env["PIPELINE_CONFIG"])
    problems = Problems(str(path) if path is not None else DEFAULTS_SOURCE)
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        data = _read_toml(path, problems)
        base = path.absolute().parent
    settings = _build(Table(data, "", problems, base), env, path)
    settings = _apply_env(settings, env, problems)
    if problems.items:
        raise ConfigError(problems.items)
    return settings


def _read_toml(path: Path, problems: Problems) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        problems.add_raw(f"{path}: cannot read the file: {reason}")
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        problems.add_raw(_syntax_line(path, str(exc)))
        return {}


def _syntax_line(path: Path, message: str) -> str:
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if found is None:
        return f"{path}: invalid TOML: {message}"
    return f"{path}:{found[1]}:{found[2]}: invalid TOML: {message[: found.start()]}"


def _data_dir(env: Mapping[str, str]) -> Path:
    if env.get("PIPELINE_DATA_DIR"):
        return Path(env["PIPELINE_DATA_DIR"])
    xdg = env.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "afk-pipeline"


def _build(root: Table, env: Mapping[str, str], path: Path | None) -> Settings:
    data_dir = _data_dir(env)
    url = root.string("database_url")
    top: dict[str, Any] = {
        "database_url": _database_url(root, url) if url else f"sqlite:///{data_dir / 'history.db'}",
        "volume": root.path("volume") or data_dir / "volume",
        "log_level": root.choice("log_level", sections.LOG_LEVELS, "info") or "info",
        "log_format": root.choice("log_format", sections.LOG_FORMATS, "text") or "text",
        "max_concurrency": root.integer("max_concurrency", 10, 1),
        "max_queue_depth": root.integer("max_queue_depth", 100, 1),
        "poll_interval_s": root.number("poll_interval_s", 60.0),
        "run_migrations": root.boolean("run_migrations", True),
        "scheduler": sections.scheduler(root.table("scheduler")),
        "workspace": sections.workspace(root.table("workspace")),
        "http": sections.http(root.table("http")),
        "notify": sections.notify(root.table("notify")),
        "sandbox": sections.sandbox(root.table("sandbox")),
    }
    trackers = _named(root, "trackers", sections.builtin_trackers(), sections.tracker)
    agents = _named(root, "agents", sections.builtin_agents(), sections.agent)
    ctx = _repo_context(root, trackers, agents)
    repos = [repo(name, table, ctx) for name, table in root.table("repos").named()]
    root.finish()
    return Settings(
        source=path,
        trackers=tuple(trackers.values()),
        agents=tuple(agents.values()),
        repos=tuple(repos),
        **top,
    )


def _repo_context(root: Table, trackers: dict[str, Any], agents: dict[str, Any]) -> RepoContext:
    budgets = root.table("budgets")
    ctx = RepoContext(
        trackers=trackers,
        agents=agents,
        default_max_run_usd=budgets.optional_number("default_max_run_usd"),
        default_daily_usd=budgets.optional_number("default_daily_usd_per_repo"),
    )
    budgets.finish()
    return ctx


def _named(root: Table, section: str, builtins: dict[str, Any], build: Any) -> dict[str, Any]:
    """Built-in entries, then ``[section.NAME]`` tables replacing or adding to them."""
    result = dict(builtins)
    for name, table in root.table(section).named():
        result[name] = build(name, table)
    return result


def check_database_url(value: str, base: Path) -> tuple[str | None, str | None]:
    """``(url, None)`` with a relative SQLite path made absolute, or ``(None, problem)``."""
    parts = urlsplit(value)
    if value.startswith("sqlite:///"):
        rest = value[len("sqlite:///") :]
        if not rest:
            return None, "names no database file after sqlite:///"
        if rest == ":memory:" or rest.startswith("/"):
            return value, None
        return f"sqlite:///{base / rest}", None
    if parts.scheme in ("postgresql", "postgresql+psycopg"):
        return (value, None) if parts.hostname else (None, f"names no host: {_redact(value)!r}")
    return None, f"must start with sqlite:/// or postgresql://, got {_redact(value)!r}"


def _database_url(root: Table, value: str) -> str:
    checked, problem = check_database_url(value, root.base)
    if urlsplit(value).password:
        problem = (
            "must not carry a password in the file; set PIPELINE_DATABASE_URL "
            "or use a ~/.pgpass file"
        )
    if problem is not None or checked is None:
        root.error("database_url", problem or "is invalid")
        return value
    return checked


def _redact(url: str) -> str:
    """The URL with any password replaced, safe to print."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _apply_env(settings: Settings, env: Mapping[str, str], problems: Problems) -> Settings:
    changes: dict[str, Any] = {}
    for name, (field, parse) in _ENV_PARSERS.items():
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        value, problem = parse(raw)
        if problem is not None:
            problems.add_raw(f"{name}: {problem}")
        else:
            changes[field] = value
    if "http" in changes:
        host, port = changes.pop("http")
        changes["http"] = dataclasses.replace(settings.http, listen_host=host, listen_port=port)
    return dataclasses.replace(settings, **changes)


def _env_int(raw: str) -> tuple[int | None, str | None]:
    value = raw.strip()
    if value.isdigit() and int(value) >= 1:
        return int(value), None
    return None, f"must be an integer >= 1, got {raw!r}"


def _env_float(raw: str) -> tuple[float | None, str | None]:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value > 0 and value != float("inf"):
        return value, None
    return None, f"must be a number > 0, got {raw!r}"


def _env_choice(choices: tuple[str, ...]) -> Any:
    def parse(raw: str) -> tuple[str | None, str | None]:
        value = raw.strip().lower()
        if value in choices:
            return value, None
        return None, f"must be one of {', '.join(choices)}, got {raw!r}"

    return parse


def _env_bool(raw: str) -> tuple[bool | None, str | None]:
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE, None
    return None, f"must be true or false, got {raw!r}"


def _env_listen(raw: str) -> tuple[tuple[str, int] | None, str | None]:
    parsed = sections.parse_listen(raw.strip())
    if parsed is None:
        return None, f"must be host:port with a port 0-65535, got {raw!r}"
    return parsed, None


def _env_database(raw: str) -> tuple[str | None, str | None]:
    return check_database_url(raw.strip(), Path.cwd())


def _env_path(raw: str) -> tuple[Path | None, str | None]:
    return Path(raw).expanduser().absolute(), None


_ENV_PARSERS: dict[str, tuple[str, Any]] = {
    "PIPELINE_DATABASE_URL": ("database_url", _env_database),
    "PIPELINE_VOLUME": ("volume", _env_path),
    "PIPELINE_LOG_LEVEL": ("log_level", _env_choice(sections.LOG_LEVELS)),
    "PIPELINE_LOG_FORMAT": ("log_format", _env_choice(sections.LOG_FORMATS)),
    "PIPELINE_MAX_CONCURRENCY": ("max_concurrency", _env_int),
    "PIPELINE_MAX_QUEUE_DEPTH": ("max_queue_depth", _env_int),
    "PIPELINE_POLL_INTERVAL_S": ("poll_interval_s", _env_float),
    "PIPELINE_HTTP_LISTEN": ("http", _env_listen),
    "PIPELINE_RUN_MIGRATIONS": ("run_migrations", _env_bool),
}


def _load_for_command(path: Path | None, err: TextIO) -> Settings | None:
    try:
        return load_settings(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=err)
        return None


def check_command(path: Path | None, out: TextIO, err: TextIO) -> int:
    """``pipeline config check``: 0 and a summary, or 2 and one line per problem."""
    settings = _load_for_command(path, err)
    if settings is None:
        return 2
    source = settings.source if settings.source is not None else DEFAULTS_SOURCE
    print(f"OK: {source}: {len(settings.trackers)} trackers, {len(settings.repos)} repos", file=out)
    return 0


def show_command(path: Path | None, out: TextIO, err: TextIO, as_json: bool = False) -> int:
    """``pipeline config show``: the effective settings, secrets only described."""
    settings = _load_for_command(path, err)
    if settings is None:
        return 2
    settings = dataclasses.replace(settings, database_url=_redact(settings.database_url))
    out.write(render_json(settings) if as_json else render_toml(settings))
    return 0


__all__ = [
    "ENV_VARS",
    "ConfigError",
    "check_command",
    "load_settings",
    "show_command",
]
