"""Load a TOML file plus ``PIPELINE_*`` overrides into frozen ``Settings``.

The file is validated by the models of ``pipeline.config.models``; every problem
is collected, not just the first, and reported as one line ``FILE:key.path: what
is wrong`` inside a ``ConfigError``; a bad override names its variable instead.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from pipeline.config.build import build
from pipeline.config.models import ConfigFile
from pipeline.config.settings import Settings, default_data_dir
from pipeline.core.errors import ConfigError

DEFAULTS_SOURCE = "<built-in defaults>"
# Keys that would put a secret in the file itself.
SECRET_KEYS = frozenset(
    {
        "token",
        "api_key",
        "webhook_secret",
        "password",
        "urls",
        "api_token",
        "read_token",
        "git_crypt_key",
    }
)
_SECRET_HINT = (
    "secrets must not be written in the file; put it in an environment variable "
    "and set {0}_env, or in a file and set {0}_file"
)
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _number(kind: Callable[[str], object]) -> Callable[[str], object]:
    def parse(raw: str) -> object:
        try:
            return kind(raw)
        except ValueError:
            return raw

    return parse


def _flag(raw: str) -> object:
    lowered = raw.lower()
    return lowered in _TRUE if lowered in _TRUE + _FALSE else raw


def _database(raw: str) -> str:
    """A relative SQLite path in the variable is relative to the working directory."""
    rest = raw.removeprefix("sqlite:///")
    relative = raw.startswith("sqlite:///") and rest and not rest.startswith("/")
    return f"sqlite:///{Path.cwd() / rest}" if relative and rest != ":memory:" else raw


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
# Variable: the key path it overrides, and how its text becomes a TOML value.
_ENV: dict[str, tuple[tuple[str, ...], Callable[[str], object]]] = {
    "PIPELINE_DATABASE_URL": (("database_url",), _database),
    "PIPELINE_VOLUME": (("volume",), lambda raw: str(Path(raw).expanduser().absolute())),
    "PIPELINE_LOG_LEVEL": (("log_level",), str.lower),
    "PIPELINE_LOG_FORMAT": (("log_format",), str.lower),
    "PIPELINE_MAX_CONCURRENCY": (("max_concurrency",), _number(int)),
    "PIPELINE_MAX_QUEUE_DEPTH": (("max_queue_depth",), _number(int)),
    "PIPELINE_POLL_INTERVAL_S": (("poll_interval_s",), _number(float)),
    "PIPELINE_HTTP_LISTEN": (("http", "listen"), str),
    "PIPELINE_RUN_MIGRATIONS": (("run_migrations",), _flag),
}


def load_settings(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read ``path`` (or ``$PIPELINE_CONFIG``, or only defaults) and apply overrides.

    Raises ``ConfigError`` listing every problem found.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    if path is None and env.get("PIPELINE_CONFIG"):
        path = Path(env["PIPELINE_CONFIG"])
    source = DEFAULTS_SOURCE if path is None else str(path)
    data = {} if path is None else read_toml(path)
    applied = _apply_env(data, env)
    base = Path.cwd() if path is None else path.absolute().parent
    context = {"base": base, "env": set(applied.values())}
    try:
        file = ConfigFile.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError([_line(error, source, applied) for error in exc.errors()]) from None
    problems: list[tuple[str, str]] = []
    settings = build(file, path, default_data_dir(env), problems)
    if problems:
        raise ConfigError([f"{source}:{key}: {message}" for key, message in problems])
    return settings


def read_toml(path: Path) -> dict[str, Any]:
    """The file's tables; a ``ConfigError`` naming the file (and line) when it cannot be."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"{path}: cannot read the file: {reason}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
        if found is None:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
        where, message = f"{found[1]}:{found[2]}", str(exc)[: found.start()]
        raise ConfigError(f"{path}:{where}: invalid TOML: {message}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: values nested too deeply") from None


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """Put each set override into ``data``; which key path each variable replaced."""
    applied: dict[tuple[str, ...], str] = {}
    for name, (where, parse) in _ENV.items():
        raw = env.get(name, "").strip()
        table = data if len(where) == 1 else data.setdefault(where[0], {})
        if raw and isinstance(table, dict):
            table[where[-1]] = parse(raw)
            applied[where] = name
    return applied


_RANGES = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
_WANT = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean (true or false)",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "finite_number": "a finite number",
    "greater_than": "> {gt}",
    "greater_than_equal": ">= {ge}",
    "less_than": "< {lt}",
    "less_than_equal": "<= {le}",
    "too_short": "at least {min_length} long",
    "too_long": "at most {max_length} long",
}


def _line(error: ErrorDetails, source: str, applied: dict[tuple[str, ...], str]) -> str:
    ctx = error.get("ctx", {})
    loc = tuple(str(part) if isinstance(part, str) else part for part in error["loc"])
    loc = (*loc, ctx["key"]) if "key" in ctx else loc
    name = applied.get(loc)  # type: ignore[arg-type]
    where = name if name is not None else f"{source}:{_key(loc)}"
    return f"{where}: {_message(error, loc)}"


def _key(loc: tuple[str | int, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int) and parts:
            parts[-1] += f"[{part}]"
        elif part != "[key]":
            parts.append(str(part))
    return ".".join(parts)


def _message(error: ErrorDetails, loc: tuple[str | int, ...]) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error["input"]
    if kind == "missing":
        return "missing required value"
    if kind == "extra_forbidden":
        name = str(loc[-1])
        return (
            _SECRET_HINT.format(name)
            if name in SECRET_KEYS
            else "unknown key" + suggest(name, _known(loc))
        )
    if kind == "config":
        return str(ctx["message"])
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx["expected"]))
        got = f"; got {value!r}" if isinstance(value, str) else f", got {describe_value(value)}"
        return f"must be one of {', '.join(choices)}{got}" + suggest(str(value), choices)
    want = _WANT.get(kind)
    if want is None:
        return error["msg"]
    shown = {k: f"{v:g}" if isinstance(v, int | float) else v for k, v in ctx.items()}
    if kind in _RANGES:
        want = "a number " + want
    return f"must be {want.format(**shown)}, got {describe_value(value)}"


def describe_value(value: object) -> str:
    """Name a TOML value's type and show it, for "got ..." in messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    shown = {int: "integer {}", float: "float {}", str: "string {!r}", list: "an array"}
    return shown.get(type(value), "a table" if isinstance(value, dict) else "{!r}").format(value)


def suggest(value: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _known(loc: tuple[str | int, ...]) -> list[str]:
    """The keys the table holding ``loc``'s last key may have."""
    kind: Any = ConfigFile
    for part in (*loc[:-1], ""):
        kind = _inner(kind, part) if part else _bare(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return [str(field.validation_alias or name) for name, field in kind.model_fields.items()]
    return []


def _bare(kind: Any) -> Any:
    """``kind`` without ``Annotated`` and ``| None``."""
    while get_origin(kind) in (Annotated, Union, UnionType):
        kind = next(arg for arg in get_args(kind) if arg is not type(None))
    return kind


def _inner(kind: Any, part: str | int) -> Any:
    kind = _bare(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        fields = kind.model_fields.items()
        return next((f.annotation for n, f in fields if part in (n, f.validation_alias)), None)
    return get_args(kind)[-1] if get_origin(kind) in (dict, list) else None
