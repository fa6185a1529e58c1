"""Load a TOML file plus ``PIPELINE_*`` overrides into frozen ``Settings``.

The file is validated against the classes of ``pipeline.config.settings``; every problem
is collected, not just the first, and reported as one line ``FILE:key.path: what
is wrong`` inside a ``ConfigError``; a bad override names its variable instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from pipeline.config import values as v
from pipeline.config.build import build
from pipeline.config.settings import Settings, default_data_dir
from pipeline.core.errors import ConfigError

DEFAULTS_SOURCE = "<built-in defaults>"
# Keys that would put a secret in the file itself.
SECRET_KEYS = v.SECRETS | {"password"}
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
    from_env = path is None and bool(env.get("PIPELINE_CONFIG"))
    if from_env:
        path = Path(env["PIPELINE_CONFIG"])
    source = DEFAULTS_SOURCE if path is None else str(path)
    try:
        data = {} if path is None else read_toml(path)
    except ConfigError as exc:
        if not from_env:
            raise
        # A file nobody named on the command line: say where its name came from.
        raise ConfigError([f"PIPELINE_CONFIG: {p}" for p in exc.problems]) from None
    applied = _apply_env(data, env)
    base = Path.cwd() if path is None else path.absolute().parent
    context = {"base": base, "env": set(applied.values())}
    data_dir = default_data_dir(env).absolute()
    data.setdefault("database_url", f"sqlite:///{data_dir / 'history.db'}")
    data.setdefault("volume", str(data_dir / "volume"))
    if hidden := sorted(_hidden(data)):
        raise ConfigError([f"{source}:{key}: unknown key" for key in hidden])
    try:
        settings = _SETTINGS.validate_python(data, context=context)
    except ValidationError as exc:
        raise ConfigError([_line(error, source, applied) for error in exc.errors()]) from None
    problems: list[tuple[str, str]] = []
    settings = dataclasses.replace(build(settings, problems), source=path)
    if problems:
        raise ConfigError([f"{source}:{key}: {message}" for key, message in problems])
    return settings


def _hidden(data: object, where: str = "") -> Iterator[str]:
    """The keys a file holds that start like the loader's own (``values.HIDE``)."""
    items = data.items() if isinstance(data, dict) else ()
    for key, value in enumerate(data) if isinstance(data, list) else items:
        if str(key).startswith(v.HIDE):
            yield f"{where}{key}"
        yield from _hidden(value, f"{where}{key}.")


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


_SETTINGS = TypeAdapter(Settings)
_DATABASE_URL = TypeAdapter(Annotated[str, AfterValidator(v.database)])


def database_url(raw: str, where: str) -> str:
    """A database URL given outside the file (``--database-url``), checked as
    ``PIPELINE_DATABASE_URL`` is: a relative SQLite path is relative to the working
    directory, a password is allowed; a ``ConfigError`` naming ``where`` otherwise."""
    context = {"base": Path.cwd(), "env": {"PIPELINE_DATABASE_URL"}}
    try:
        return _DATABASE_URL.validate_python(raw.strip(), context=context)
    except ValidationError as exc:
        raise ConfigError([f"{where}: {_message(e, ())}" for e in exc.errors()]) from None


@functools.cache
def file_schema() -> dict[str, Any]:
    """The file's JSON Schema: the settings' without the keys no file may set."""
    schema = _SETTINGS.json_schema()
    schema.pop("required")  # database_url and volume default to the data directory
    for table in (schema, *schema["$defs"].values()):
        hidden = [key for key in table.get("properties", {}) if key.startswith(v.HIDE)]
        for key in hidden:
            del table["properties"][key]
            if key[1:] in v.SECRETS:
                table["properties"] |= {
                    f"{key[1:]}_{p}": {"type": "string"} for p in ("env", "file")
                }
        if "required" in table:
            table["required"] = [key for key in table["required"] if key not in hidden]
    return schema


_RANGES = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
_WANT = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean (true or false)",
    "list_type": "an array",
    "tuple_type": "an array",
    "dict_type": "a table",
    "dataclass_type": "a table",
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
        elif parts and parts[-1].startswith(v.HIDE):  # a SecretRef's env or file
            parts[-1] = f"{parts[-1][1:]}_{part}"
        elif part != "[key]":
            parts.append(str(part))
    return ".".join(parts)


def _message(error: ErrorDetails, loc: tuple[str | int, ...]) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error["input"]
    if kind == "missing":
        return "missing required value"
    if kind == "unexpected_keyword_argument":
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
    if kind in ("string_too_long", "too_long") and isinstance(value, str):  # a column's width
        return f"must be at most {ctx['max_length']} characters, got {len(str(value))}"
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
    schema = file_schema()
    node: Any = schema
    for part in (*loc[:-1], None):
        while "$ref" in node or "anyOf" in node:
            kinds = node.get("anyOf", [node])
            node = next((k for k in kinds if k.get("type") != "null"), {})
            if "$ref" in node:
                node = schema["$defs"].get(node["$ref"].rsplit("/", 1)[-1], {})
        if part is None:
            return list(node.get("properties", {}))
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part) or node.get("additionalProperties") or {}
    return []
