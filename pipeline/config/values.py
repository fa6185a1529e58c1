"""The value types of the configuration file: what one key may hold, and the message if not.

Each is an ``Annotated`` type: a base type, its range, and checks that raise a
``problem`` with the exact text ``config check`` prints. ``table`` makes a settings
dataclass one TOML table; ``named``, ``changed`` and ``via`` map the file's spelling.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, dataclass_transform
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AliasGenerator,
    BeforeValidator,
    ConfigDict,
    Field,
    GetPydanticSchema,
    Strict,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
    with_config,
)
from pydantic_core import PydanticCustomError, core_schema

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|PASSWD)", re.IGNORECASE)
_HOST = re.compile(
    r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$"
)
# A branch name git accepts and never reads as an option (git check-ref-format, simplified).
_REF = re.compile(r"^(?![-./])(?!.*(\.\.|@\{|//|/\.|\.lock$|[./]$))[^\s~^:?*\[\\\x00-\x1f\x7f]+$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
DAY_S = 86400.0
_NETWORK_SCHEMES = ("https", "http", "ssh", "git")
# Fields holding a ``SecretRef``: the file sets ``NAME_env`` and ``NAME_file`` instead.
SECRETS = frozenset("token webhook_secret api_key git_crypt_key api_token read_token urls".split())
# Fields no file may set (filled in by the loader, or from ``*_env``/``*_file``): their key
# starts with a NUL (a file's own such keys are refused first); ``config schema`` omits them.
HIDE = "\0"
HIDDEN = SECRETS | {"name", "source", "repo_prompt", "listen_host", "listen_port"}
# A TOML table: unknown keys are refused, and so are non-finite numbers; leaf types are
# strict (``"3"`` is no integer), tables and arrays lax (they become dataclasses, tuples).
_TABLE = ConfigDict(
    extra="forbid",
    allow_inf_nan=False,
    alias_generator=AliasGenerator(validation_alias=lambda n: HIDE + n if n in HIDDEN else n),
)
T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def table(cls: type[T]) -> type[T]:
    """A frozen dataclass that pydantic validates as one TOML table of the file."""
    made: Any = with_config(_TABLE)(dataclasses.dataclass(frozen=True)(cls))
    secrets = [f.name for f in dataclasses.fields(made) if f.name in SECRETS]
    if secrets:
        made._secrets = model_validator(mode="before")(functools.partial(_fold, secrets))
    return made  # type: ignore[no-any-return]


def _fold(secrets: list[str], data: Any) -> Any:
    """``NAME_env`` and ``NAME_file`` into the (hidden) ``SecretRef`` field NAME."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for name in secrets:
        ref = {
            part: data.pop(f"{name}_{part}") for part in ("env", "file") if f"{name}_{part}" in data
        }
        if ref:
            data[HIDE + name] = ref
    return data


def problem(message: str) -> PydanticCustomError:
    """A validation error whose text is ``message`` exactly."""
    return PydanticCustomError("config", "{message}", {"message": message})


def keyed(key: str, message: str) -> PydanticCustomError:
    """A problem of one key, raised by a check of its whole table."""
    return PydanticCustomError("config", "{message}", {"message": message, "key": key})


def check(ok: Callable[[Any], object], message: str) -> AfterValidator:
    """Refuse a value for which ``ok`` is falsy, with ``message`` and the value."""

    def run(value: Any) -> Any:
        if not ok(value):
            raise problem(f"{message}, got {value!r}")
        return value

    return AfterValidator(run)


def _path(value: object, info: ValidationInfo) -> Path:
    """A path; relative ones resolve against the config file's directory."""
    if not isinstance(value, str) or not value.strip():
        raise problem("must be a non-empty path string")
    path = Path(value).expanduser()
    base = (info.context or {}).get("base", Path.cwd())
    return path if path.is_absolute() else base / path


def remote(value: str, info: ValidationInfo) -> str:
    """URLs and scp-like ``git@host:path`` as written, local paths resolved."""
    parts = urlsplit(value)
    if value.startswith("-") or (parts.scheme in _NETWORK_SCHEMES and not parts.hostname):
        raise problem(f"must be a git URL with a host or a path, got {value!r}")
    if re.match(r"^[\w.-]+@[\w.-]+:.+$", value) or parts.scheme in (*_NETWORK_SCHEMES, "file"):
        return value
    if len(parts.scheme) > 1:
        raise problem(
            f"unsupported scheme {parts.scheme!r}; use https, ssh, file, git@host:path or a path"
        )
    return str(_path(value, info))


def database(value: str, info: ValidationInfo) -> str:
    """``sqlite:///PATH`` (relative to the file) or ``postgresql://`` without a password."""
    context = info.context or {}
    if urlsplit(value).password and "PIPELINE_DATABASE_URL" not in context.get("env", ()):
        raise problem(
            "must not carry a password in the file; "
            "set PIPELINE_DATABASE_URL or use a ~/.pgpass file"
        )
    parts, rest = urlsplit(value), value.removeprefix("sqlite:///")
    if value.startswith("sqlite:///") and rest:
        absolute = rest == ":memory:" or rest.startswith("/")
        return value if absolute else f"sqlite:///{context.get('base', Path.cwd()) / rest}"
    if parts.scheme in ("postgresql", "postgresql+psycopg") and parts.hostname:
        return value
    raise problem(f"must start with sqlite:/// or postgresql://, got {redact(value)!r}")


def redact(url: str) -> str:
    """The URL with any password replaced, safe to print."""
    password = urlsplit(url).password
    return url.replace(f":{password}@", ":***@", 1) if password else url


def parse_listen(value: str) -> tuple[str, int] | None:
    """``host:port`` (``[::1]:port`` for IPv6) into parts; None if malformed."""
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return None
    return host, int(port)


def _command(value: object) -> object:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise problem(f"cannot split command: {exc}") from None
    return value


def parse_size(value: object) -> int:
    """Bytes from an integer or a size like ``"10GiB"`` or ``"500MB"``."""
    found = _SIZE.match(value) if isinstance(value, str) else None
    if found is not None:
        value = int(float(found[1]) * _UNITS[(found[2] or "").lower()])
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        raise problem(
            f"must be a positive byte count or a size like '10GiB' or '500MB', got {value!r}"
        )
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise problem(f"is not a valid regular expression: {exc}") from None
    return value


def _http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("https", "http") and bool(parts.hostname)


def one_of(*choices: str) -> GetPydanticSchema:
    """A string that must be one of ``choices`` (a ``Literal`` that type checkers see as str)."""
    return GetPydanticSchema(lambda _type, _handler: core_schema.literal_schema(list(choices)))


def via(source: Any, convert: Callable[[Any], Any]) -> GetPydanticSchema:
    """Validated as ``source`` (also its JSON Schema), then ``convert``-ed."""
    return GetPydanticSchema(
        lambda _type, handler: core_schema.no_info_after_validator_function(
            convert, handler(source)
        )
    )


def named(key: Any, item: Any = None) -> GetPydanticSchema:
    """``tuple[Table, ...]`` from ``[section.NAME]`` tables: each gets ``name`` = NAME.

    ``item``: how each table validates, if not as ``Table`` itself.
    """

    def schema(kind: Any, handler: Any) -> core_schema.CoreSchema:
        tables = handler(dict[key, item or kind.__args__[0]])  # type: ignore[misc]
        inner = core_schema.no_info_after_validator_function(lambda d: tuple(d.values()), tables)
        return core_schema.no_info_before_validator_function(_name_tables, inner)

    return GetPydanticSchema(schema)


def changed(kind: Any, pick: Callable[[Any, set[str]], Any]) -> GetPydanticSchema:
    """Validated as ``kind``; ``pick`` gets the result and the keys the table set."""

    def run(value: Any, handler: Callable[[Any], Any]) -> Any:
        return pick(handler(value), set(value) if isinstance(value, dict) else set())

    return GetPydanticSchema(
        lambda _type, handler: core_schema.no_info_wrap_validator_function(run, handler(kind))
    )


def _name_tables(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: {**t, HIDE + "name": k} if isinstance(t, dict) else t for k, t in value.items()}


STRING_OR_LIST = WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
)
S = Strict()
Flag = Annotated[bool, S]
S_str = Annotated[str, S]
Text = Annotated[str, S, check(str.strip, "must be a non-empty string")]
Label = Annotated[
    str, S, check(lambda s: s and s == s.strip(), "must be a label without surrounding whitespace")
]
EnvName = Annotated[str, S, check(ENV_NAME.match, "must be an environment variable name")]
Host = Annotated[str, S, check(_HOST.match, "must be a host, host:port or *.domain")]
SafeEnv = Annotated[
    EnvName,
    check(
        lambda s: not SECRET_NAME.search(s),
        "looks like a secret; an agent gets only its own key (api_key_env/api_key_file)",
    ),
]
Pairs = Annotated[
    tuple[tuple[str, str], ...], via(dict[SafeEnv, S_str], lambda d: tuple(sorted(d.items())))
]
Ref = Annotated[str, S, check(_REF.match, "must be a branch name git accepts (no leading '-')")]
FilePath = Annotated[Path, BeforeValidator(_path), WithJsonSchema({"type": "string"})]
Command = Annotated[
    tuple[Text, ...], BeforeValidator(_command), Field(max_length=1000), STRING_OR_LIST
]
Size = Annotated[int, BeforeValidator(parse_size), WithJsonSchema({"type": ["integer", "string"]})]
Seconds = Annotated[float, S, Field(gt=0, le=30 * DAY_S)]
Delay = Annotated[float, S, Field(ge=0, le=30 * DAY_S)]
Count = Annotated[int, S, Field(ge=0, le=1000)]
Positive = Annotated[int, S, Field(ge=1, le=1000)]
Usd = Annotated[float, S, Field(ge=0, le=1e6)]
Fraction = Annotated[float, S, Field(gt=0, le=1)]
Network = Annotated[str, one_of("allowlist", "open")]
Regex = Annotated[str, S, AfterValidator(_regex)]
RepoId = Annotated[
    Text,
    BeforeValidator(lambda v: str(v) if type(v) is int else v),
    WithJsonSchema({"type": ["string", "integer"]}),
]
Listen = Annotated[str, S, check(parse_listen, "must be host:port with a port 0-65535")]
Names = Annotated[tuple[str, ...], via(tuple[S_str, ...], lambda h: tuple(n.lower() for n in h))]
HostPort = Annotated[tuple[str, int], via(Listen, parse_listen)]
HttpUrl = Annotated[str, S, check(_http_url, "must be a https or http URL with a host")]
Relative = Annotated[
    str,
    S,
    check(
        lambda p: not Path(p).is_absolute() and ".." not in Path(p).parts,
        "must be a relative path without '..'",
    ),
]
# Names the store keeps in columns of these widths (``pipeline.store.models``).
TrackerName = Annotated[Text, Field(max_length=100)]
RepoName = Annotated[
    str,
    S,
    Field(max_length=200),
    check(
        re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$").match,
        "a repository name may hold only letters, digits, '.', '_' and '-', "
        "starting with a letter or digit",
    ),
]
