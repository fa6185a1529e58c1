"""What the daemon needs from the host, checked before it starts.

Every ``*_env`` names a set variable, every ``*_file`` a readable file, the
program of every agent a repository uses is an executable (on ``PATH``, which the
sandbox passes on), every local remote (a path or ``file://``) is a git repository,
and the volume and the SQLite database's directory exist or can be created. Each
problem is one ``FILE:key.path: problem`` line, like the file's own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pipeline.config.load import DEFAULTS_SOURCE, SECRET_KEYS
from pipeline.config.render import to_file
from pipeline.config.settings import Settings, default_data_dir


def door_problems(
    settings: Settings, environ: Mapping[str, str] | None = None, create: bool = False
) -> list[str]:
    """Problems that would stop the daemon; with ``create``, a missing volume is made."""
    env = os.environ if environ is None else environ
    source = str(settings.source) if settings.source is not None else DEFAULTS_SOURCE
    found: list[tuple[str, str]] = []
    _secrets(to_file(settings), "", env, found)
    found.extend(_agent_programs(settings, env.get("PATH") or os.defpath))
    for repo in settings.repos:
        if problem := _remote_problem(repo.remote_url):
            found.append((f"repos.{repo.name}.remote_url", problem))
    directories = {"volume": settings.volume}
    if settings.database_url.startswith("sqlite:///") and not settings.database_url.endswith(
        ":memory:"
    ):
        directories["database_url"] = Path(settings.database_url[len("sqlite:///") :]).parent
    for key, directory in directories.items():
        problem = _directory_problem(directory)
        if problem is not None:
            found.append((key, problem + data_dir_hint(key, directory, env)))
    if create and not found:
        try:
            settings.volume.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # access() can say yes where mkdir fails (root, /proc, NFS)
            hint = data_dir_hint("volume", settings.volume, env)
            found.append(("volume", f"cannot create {settings.volume}: {exc.strerror}{hint}"))
    return [f"{source}:{key}: {problem}" for key, problem in found]


def data_dir_hint(key: str, directory: Path, env: Mapping[str, str]) -> str:
    """Where a directory nobody set came from: the data directory, which a user sets as
    ``PIPELINE_DATA_DIR`` rather than as ``key``."""
    data_dir = default_data_dir(env).absolute()
    if directory.absolute() != (data_dir / "volume" if key == "volume" else data_dir):
        return ""
    origin = "PIPELINE_DATA_DIR" if env.get("PIPELINE_DATA_DIR") else "the default data directory"
    return f" (under {origin}; set PIPELINE_DATA_DIR or {key} to a writable place)"


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


def _agent_programs(settings: Settings, path: str) -> Iterator[tuple[str, str]]:
    """The agents' programs that cannot be started, each named once where it is set."""
    users: dict[tuple[str, str], list[str]] = {}
    for repo in settings.repos:
        preset = settings.agent(repo.agent)
        own = dict(repo.agent_overrides).get("command")
        command = own if isinstance(own, tuple) else (preset.command if preset else ())
        program = command[0] if command else ""
        if not program or "{" in program or ("/" in program and not program.startswith("/")):
            continue  # a template, or relative to the worktree: only the run can tell
        if shutil.which(program, path=path) is None:
            key = f"repos.{repo.name}.agent_options" if own else f"agents.{repo.agent}"
            users.setdefault((f"{key}.command", program), []).append(repo.name)
    for (key, program), repos in sorted(users.items()):
        where = "is not an executable file" if "/" in program else "is not found on PATH"
        yield (
            key,
            (
                f"{program!r} {where}; install it or set the command to its absolute path "
                f"(used by {', '.join(f'repos.{name}' for name in sorted(repos))})"
            ),
        )


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


def _remote_problem(remote: str) -> str | None:
    """A local remote that is no git repository where ``git clone`` looks (PATH, PATH.git,
    each bare or holding ``.git``); a network remote only a clone can reach."""
    if not remote.startswith(("/", "file:")):
        return None
    path = Path(unquote(urlsplit(remote).path) if remote.startswith("file:") else remote)
    for where in (path, Path(f"{path}.git")):
        if (where / ".git").exists() or (
            (where / "HEAD").is_file() and (where / "objects").is_dir()
        ):
            return None
    return f"local remote {path} {'is not a git repository' if path.exists() else 'does not exist'}"


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
