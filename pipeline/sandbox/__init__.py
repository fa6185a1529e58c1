"""Confinement for everything that runs code from the repository or the agent.

The agent, setup commands and the test gate run in a bubblewrap sandbox
(``pipeline.sandbox.bwrap``): their own PID namespace, the host read-only, the
daemon's volume, config, database, secrets and HOME hidden, the run's tree and
caches writable, and the network reached only through an allowlisting proxy.
``build_sandbox`` decides at start-up; without a usable bwrap the daemon
refuses to run agents unless the operator chose ``[sandbox] mode = "none"``.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Iterator
from itertools import pairwise
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pipeline
from pipeline.config.settings import AgentPreset, SandboxSettings, SecretRef, Settings
from pipeline.sandbox.bwrap import Layout, SandboxUnavailable, find_bwrap, probe
from pipeline.sandbox.environment import DEFAULT_PASS_ENV, sandbox_environment
from pipeline.sandbox.jail import BwrapSandbox, Jail, Sandbox, Unconfined, tree_layout
from pipeline.sandbox.network import NetworkPolicy

__all__ = [
    "DEFAULT_PASS_ENV",
    "BwrapSandbox",
    "Jail",
    "Layout",
    "NetworkPolicy",
    "Sandbox",
    "SandboxUnavailable",
    "Unconfined",
    "agent_network",
    "build_sandbox",
    "sandbox_environment",
    "tree_layout",
]

# libpq's files that hold a password or a key: URL parameters and environment variables.
_LIBPQ_FILES = ("passfile", "sslkey", "servicefile")
_LIBPQ_ENV = ("PGPASSFILE", "PGSSLKEY", "PGSERVICEFILE")
# ssh's options that take an argument (its getopt string), for GIT_SSH_COMMAND's files.
_SSH_TAKES_ARGUMENT = frozenset("bceilmopBDEFIJLOPQRSwW")
# Directories whose hiding would hide the system itself: hide a file in them, not them.
_BROAD = frozenset(
    Path(p)
    for p in (
        "/",
        "/etc",
        "/usr",
        "/usr/local",
        "/opt",
        "/var",
        "/home",
        "/srv",
        "/mnt",
        "/media",
        "/tmp",
    )
)


def build_sandbox(settings: Settings, secret_refs: Iterable[SecretRef] = ()) -> Sandbox:
    """The sandbox ``settings`` ask for; SandboxUnavailable when bwrap cannot run here."""
    if settings.sandbox.mode == "none":
        return Unconfined()
    bwrap = find_bwrap(settings.sandbox.bwrap_path)
    version = probe(bwrap)
    hidden, hidden_files = daemon_places(settings, secret_refs)
    writable = tuple(_real(p) for p in settings.sandbox.writable_paths)
    check_writable(writable, hidden, hidden_files, _real(settings.volume))
    return BwrapSandbox(
        bwrap=bwrap,
        version=version,
        hidden=hidden,
        hidden_files=hidden_files,
        read_only=runtime_paths(settings.sandbox),
        writable=writable,
    )


def check_writable(
    writable: Iterable[Path], hidden: Iterable[Path], hidden_files: Iterable[Path], volume: Path
) -> None:
    """Refuse a ``writable_paths`` entry that would expose the daemon's own places."""
    places = [*hidden, *hidden_files]
    for path in writable:
        exposed = [p for p in places if p == path or path in p.parents]
        if exposed or path == volume or volume in path.parents:
            what = exposed[0] if exposed else volume
            raise SandboxUnavailable(
                f"[sandbox] writable_paths: {path} would expose {what} to every agent; name a "
                "directory that holds none of the daemon's volume, config, database, secrets "
                "or HOME"
            )


def daemon_places(
    settings: Settings, secret_refs: Iterable[SecretRef]
) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """``(directories, files)`` of the daemon that no sandbox may see."""
    directories = [settings.volume, Path.home()]
    files: list[Path] = []
    for named in settings.sandbox.hidden_paths:  # a file named there is hidden alone
        (directories if _real(named).is_dir() else files).append(named)
    candidates = [*database_files(settings.database_url)]
    candidates += [settings.source] if settings.source is not None else []
    candidates += [ref.file for ref in secret_refs if ref.file is not None]
    candidates += list(key_files(settings))
    for path in candidates:
        path = path.absolute()
        files.append(path)
        if path.parent not in _BROAD:
            directories.append(path.parent)
    return tuple(_real(p) for p in directories), tuple(_real(p) for p in files)


def key_files(settings: Settings) -> Iterator[Path]:
    """Files of key material the daemon's git uses: SSH keys and git-crypt keys.

    A git-crypt key is a file either way: ``git_crypt_key_file`` names it, or the
    variable ``git_crypt_key_env`` names holds its path (``pipeline.workspace.gitcrypt``).
    """
    for repo in settings.repos:
        if repo.push.ssh_key_file is not None:
            yield repo.push.ssh_key_file
        key = repo.git_crypt_key
        if key.file is not None:
            yield key.file
        elif key.env is not None and os.environ.get(key.env):
            yield Path(os.environ[key.env])
    yield from ssh_command_files(os.environ.get("GIT_SSH_COMMAND", ""))


def ssh_command_files(command: str) -> list[Path]:
    """The key and config files an operator's own ``GIT_SSH_COMMAND`` names: ``-i``,
    ``-F`` and ``-o IdentityFile=`` (the daemon's git keeps it when no key is set)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    named: list[str] = []
    for word, following in pairwise([*words, ""]):
        flag, value = _ssh_option(word, following)
        if flag == "o":
            option, _, value = value.replace("=", " ", 1).partition(" ")
            value = value.strip() if option.lower() == "identityfile" else ""
        if flag in ("i", "F", "o") and value:
            named.append(value)
    return _regular_files(named)


def _ssh_option(word: str, following: str) -> tuple[str, str]:
    """``(flag, argument)`` of the option in ``word`` that takes one (ssh's getopt:
    ``-vi key`` is ``-v -i key``); ``("", "")`` when there is none."""
    if not word.startswith("-") or word.startswith("--"):
        return "", ""
    for at, flag in enumerate(word[1:], start=2):
        if flag in _SSH_TAKES_ARGUMENT:
            return flag, word[at:] or following
    return "", ""


def runtime_paths(sandbox: SandboxSettings) -> tuple[Path, ...]:
    """Read-only paths every sandbox needs even if a hidden directory holds them."""
    interpreter = Path(sys.executable).resolve().parent
    package = Path(pipeline.__file__).resolve().parent
    paths = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        interpreter,
        package,
        *sandbox.read_only_paths,
    ]
    return tuple(_real(p) for p in paths)


def agent_network(
    sandbox: SandboxSettings, preset: AgentPreset, extra: Iterable[str] = ()
) -> NetworkPolicy:
    """The preset's policy: its mode (or the default) and its hosts plus the sandbox's."""
    mode = preset.network or sandbox.network
    hosts = dict.fromkeys((*sandbox.allow_hosts, *preset.allow_hosts, *extra))
    return NetworkPolicy(mode=mode, allow_hosts=tuple(hosts))


def database_files(url: str) -> list[Path]:
    """The history's files: a SQLite database, or libpq's password file and client key
    (named in the URL or in the daemon's environment), which open a PostgreSQL one."""
    if url.startswith("sqlite:///"):
        return [Path(url[len("sqlite:///") :])]
    query = parse_qs(urlsplit(url).query)
    named = [value for key in _LIBPQ_FILES for value in query.get(key, ())]
    named += [os.environ[name] for name in _LIBPQ_ENV if os.environ.get(name)]
    return _regular_files(named)


def _regular_files(named: Iterable[str]) -> list[Path]:
    """The regular files among ``named``: ``-F /dev/null`` must not hide ``/dev``."""
    return [path for path in (Path(value).expanduser() for value in named) if path.is_file()]


def _real(path: Path) -> Path:
    return path.expanduser().resolve()
