"""What the daemon needs from the host, checked before it starts.

Every ``*_env`` names a set variable, every ``*_file`` a readable file, and
the volume and the SQLite database's directory exist or can be created. Each
problem is one ``FILE:key.path: problem`` line, like the file's own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.config.load import DEFAULTS_SOURCE, SECRET_KEYS
from pipeline.config.render import to_file
from pipeline.config.settings import Settings


def door_problems(
    settings: Settings, environ: Mapping[str, str] | None = None, create: bool = False
) -> list[str]:
    """Problems that would stop the daemon; with ``create``, a missing volume is made."""
    env = os.environ if environ is None else environ
    source = str(settings.source) if settings.source is not None else DEFAULTS_SOURCE
    found: list[tuple[str, str]] = []
    _secrets(to_file(settings), "", env, found)
    directories = {"volume": settings.volume}
    if settings.database_url.startswith("sqlite:///") and not settings.database_url.endswith(
        ":memory:"
    ):
        directories["database_url"] = Path(settings.database_url[len("sqlite:///") :]).parent
    for key, directory in directories.items():
        problem = _directory_problem(directory)
        if problem is not None:
            found.append((key, problem))
    if create and not found:
        try:
            settings.volume.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # access() can say yes where mkdir fails (root, /proc, NFS)
            found.append(("volume", f"cannot create {settings.volume}: {exc.strerror}"))
    return [f"{source}:{key}: {problem}" for key, problem in found]


def _secrets(table: dict[str, Any], where: str, env: Mapping[str, str], found: list[Any]) -> None:
    """Walk the file's tables; a secret is missing when none of its references resolves."""
    for key, value in table.items():
        if isinstance(value, dict):
            _secrets(value, f"{where}{key}.", env, found)
    for name in sorted(SECRET_KEYS | {"ssh_key"}):
        refs = [(f"{name}_{kind}", table.get(f"{name}_{kind}")) for kind in ("env", "file")]
        problems = [(f"{where}{key}", _missing(key, ref, env)) for key, ref in refs if ref]
        if problems and all(problem is not None for _, problem in problems):
            found.extend(problems)


def _missing(key: str, ref: str, env: Mapping[str, str]) -> str | None:
    if key.endswith("_env"):
        return None if env.get(ref) else f"the environment variable {ref} is not set"
    path = Path(ref)
    if path.is_dir():
        return f"{path} is a directory, not a file"
    try:
        with path.open("rb") as handle:
            empty = not handle.read(1)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    return f"{path} is empty" if empty else None


def _directory_problem(path: Path) -> str | None:
    """None when ``path`` is a writable directory or could be created as one."""
    if path.exists():
        if not path.is_dir():
            return f"{path} is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else f"{path} is not writable"
    parent = next(p for p in path.parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} does not exist and cannot be created in {parent}"
    return None
