"""Typed, problem-collecting access to one TOML table of the configuration.

Every getter records its key as known, checks the value's type and range, and
on a problem appends one ``FILE:key.path: what is wrong`` line instead of
raising, so a single ``config check`` reports everything at once.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.config.settings import SecretRef

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
_MISSING = object()


def describe_value(value: object) -> str:
    """Name a TOML value's type and show it, for "got ..." in messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"{type(value).__name__} {value}"


class Problems:
    """The list of problems found so far, each prefixed with the source."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.source}:{key}: {message}")

    def add_raw(self, line: str) -> None:
        self.items.append(line)


class Table:
    """One TOML table being read; remembers which keys it was asked for."""

    def __init__(self, data: Mapping[str, Any], where: str, problems: Problems, base: Path) -> None:
        self.data = data
        self.where = where
        self.problems = problems
        self.base = base
        self.known: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def error(self, name: str, message: str) -> None:
        self.problems.add(self.key(name), message)

    def has(self, name: str) -> bool:
        self.known.add(name)
        return name in self.data

    def _get(self, name: str) -> Any:
        self.known.add(name)
        return self.data.get(name, _MISSING)

    def _bad(self, name: str, want: str, value: object) -> None:
        self.error(name, f"must be {want}, got {describe_value(value)}")

    def _absent(self, name: str, value: object, required: bool) -> bool:
        if value is _MISSING:
            if required:
                self.error(name, "missing required value")
            return True
        return False

    def string(self, name: str, default: str | None = None, required: bool = False) -> str | None:
        value = self._get(name)
        if self._absent(name, value, required):
            return default
        if not isinstance(value, str) or not value.strip():
            self._bad(name, "a non-empty string", value)
            return default
        return value

    def text(self, name: str, default: str) -> str:
        """A required-with-default non-empty string."""
        return self.string(name, default) or default

    def choice(
        self, name: str, choices: Sequence[str], default: str | None = None, required: bool = False
    ) -> str | None:
        value = self.string(name, None, required)
        if value is None:
            return default
        if value not in choices:
            self.error(
                name,
                f"must be one of {', '.join(choices)}; got {value!r}" + suggest(value, choices),
            )
            return default
        return value

    def integer(
        self, name: str, default: int, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self._get(name)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self._bad(name, "an integer" + _range_text(minimum, maximum), value)
            return default
        if not _in_range(value, minimum, maximum, strict_min=False):
            self._bad(name, "an integer" + _range_text(minimum, maximum), value)
            return default
        return value

    def number(
        self,
        name: str,
        default: float,
        minimum: float | None = 0.0,
        strict: bool = True,
        maximum: float | None = None,
    ) -> float:
        """A float (integers accepted); ``strict`` makes the minimum exclusive."""
        value = self._get(name)
        if value is _MISSING:
            return default
        want = "a number" + _range_text(minimum, maximum, strict)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._bad(name, want, value)
            return default
        if not _in_range(float(value), minimum, maximum, strict_min=strict):
            self._bad(name, want, value)
            return default
        return float(value)

    def optional_number(self, name: str, minimum: float = 0.0) -> float | None:
        if not self.has(name):
            return None
        value = self.number(name, -1.0, minimum)
        return None if value == -1.0 else value

    def optional_integer(self, name: str, minimum: int) -> int | None:
        if not self.has(name):
            return None
        value = self.integer(name, minimum - 1, minimum)
        return None if value == minimum - 1 else value

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self._bad(name, "a boolean (true or false)", value)
            return default
        return value

    def strings(self, name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self._get(name)
        if value is _MISSING:
            return default
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self._bad(name, "an array of non-empty strings", value)
            return default
        return tuple(value)

    def command(self, name: str, required: bool = False) -> tuple[str, ...]:
        """A command as a string (split like a shell would) or an array of strings."""
        value = self._get(name)
        if self._absent(name, value, required):
            return ()
        if isinstance(value, str) and value.strip():
            try:
                return tuple(shlex.split(value))
            except ValueError as exc:
                self.error(name, f"cannot split command: {exc}")
                return ()
        if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            return tuple(value)
        self._bad(name, "a non-empty string or array of strings", value)
        return ()

    def path(self, name: str) -> Path | None:
        """A file path; relative paths resolve against the config file's directory."""
        value = self.string(name)
        return None if value is None else self.resolve(value)

    def resolve(self, value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path

    def relative(self, name: str, default: str) -> str:
        """A path inside a checkout: relative and without ``..``."""
        value = self.string(name)
        if value is None:
            return default
        return self.check_relative(name, value) or default

    def check_relative(self, name: str, value: str) -> str | None:
        parts = Path(value).parts
        if Path(value).is_absolute() or ".." in parts:
            self.error(name, f"must be a relative path without '..', got {value!r}")
            return None
        return value

    def secret(self, name: str) -> SecretRef:
        """``NAME_env`` / ``NAME_file``; an inline ``NAME`` is an error (see finish)."""
        self.has(name)
        env = self.string(f"{name}_env")
        if env is not None and not ENV_NAME.match(env):
            self.error(f"{name}_env", f"must be an environment variable name, got {env!r}")
            env = None
        return SecretRef(env=env, file=self.path(f"{name}_file"))

    def table(self, name: str) -> Table:
        """A sub-table (empty when absent); a non-table value is reported."""
        value = self._get(name)
        if value is _MISSING:
            value = {}
        elif not isinstance(value, dict):
            self._bad(name, "a table", value)
            value = {}
        return Table(value, self.key(name), self.problems, self.base)

    def tables(self, name: str) -> list[Table]:
        """An array of tables, each with an indexed key path like ``probes[0]``."""
        value = self._get(name)
        if value is _MISSING:
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self._bad(name, "an array of tables", value)
            return []
        return [
            Table(v, f"{self.key(name)}[{i}]", self.problems, self.base)
            for i, v in enumerate(value)
        ]

    def named(self) -> list[tuple[str, Table]]:
        """Every entry of a ``[section.NAME]`` table, each a sub-table."""
        return [(name, self.table(name)) for name in self.data]

    def finish(self) -> None:
        """Report keys nobody asked for: inline secrets and unknown keys."""
        for name in self.data:
            if name in SECRET_KEYS:
                self.error(
                    name,
                    "secrets must not be written in the file; put it in an "
                    f"environment variable and set {name}_env, or in a file and "
                    f"set {name}_file",
                )
            elif name not in self.known:
                self.error(name, "unknown key" + suggest(name, sorted(self.known)))


def suggest(value: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _range_text(minimum: float | None, maximum: float | None, strict: bool = False) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if strict else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return (" " + " and ".join(parts)) if parts else ""


def _in_range(value: float, minimum: float | None, maximum: float | None, strict_min: bool) -> bool:
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        return False
    return maximum is None or value <= maximum
