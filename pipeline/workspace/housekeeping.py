"""Volume accounting and package-cache eviction, least recently used first.

Usage is measured like ``du``: the allocated blocks of every file under the
volume, hard links counted once. Eviction only ever deletes inside
``<volume>/cache``; frozen evidence and worktrees are never candidates. Every
repository's caches (``<volume>/cache/repos/<repo>/<tool>``) and shared ones
(``<volume>/cache/<tool>``) compete alike, least recently used first.

A cache is evicted in *units*: usually a single file (pip, uv, npm, yarn,
the pnpm store and the Go build cache are content-addressed and refetch a
missing entry), but an extracted Go module (``go-mod/**/name@version``) or
a Cargo source or git checkout directory is removed whole, since a partly
deleted one would look present and be broken.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from pipeline.config.settings import WorkspaceSettings
from pipeline.core.errors import ConfigError
from pipeline.core.files import remove_tree
from pipeline.git.mirror import checkout_repo, drop_checkout_index
from pipeline.git.run import GitRunner
from pipeline.git.util import RUN_BRANCH_PREFIX
from pipeline.workspace.prepared import REPO_CACHES

# Directories that are one unit of eviction, as glob patterns relative to a cache root.
_TOOL_UNITS: tuple[str, ...] = (
    "go-mod/*@*",
    "go-mod/*/*@*",
    "go-mod/*/*/*@*",
    "go-mod/*/*/*/*@*",
    "cargo/registry/src/*/*",
    "cargo/git/checkouts/*/*",
)
# ... relative to <volume>/cache: each repository's caches (<volume>/cache/repos/<repo>/),
# and the shared ones ([workspace] cache_scope = "shared", or left by an older daemon).
ATOMIC_DIR_PATTERNS: tuple[str, ...] = (
    *_TOOL_UNITS,
    *(f"{REPO_CACHES}/*/{pattern}" for pattern in _TOOL_UNITS),
)


@dataclass
class HousekeepingReport:
    """What one housekeeping pass did; ``errors`` holds problems it stepped over."""

    checkouts: int = 0
    pruned: int = 0
    gc_runs: int = 0
    orphans_removed: list[Path] = field(default_factory=list)
    branches_removed: list[str] = field(default_factory=list)
    evicted: list[Path] = field(default_factory=list)
    evicted_bytes: int = 0
    usage_before: int = 0
    usage_after: int = 0
    capacity: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def over_high_watermark_after(self) -> bool:
        return self.capacity > 0 and self.usage_after > self.capacity


@dataclass(frozen=True)
class CacheUnit:
    path: Path
    size: int
    last_used: float  # max(atime, mtime) of anything in the unit


def disk_usage(root: Path) -> int:
    """Bytes allocated under ``root`` (files, dirs and links; hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for entry_stat in _walk_stats(root):
        key = (entry_stat.st_dev, entry_stat.st_ino)
        if entry_stat.st_nlink > 1:
            if key in seen:
                continue
            seen.add(key)
        total += entry_stat.st_blocks * 512
    return total


def _walk_stats(root: Path) -> Iterator[os.stat_result]:
    stack = [root]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            try:
                entry_stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield entry_stat
            if stat.S_ISDIR(entry_stat.st_mode):
                stack.append(Path(entry.path))


def volume_capacity(volume: Path, configured: int | None) -> int:
    """The configured capacity, else the size of the filesystem holding ``volume``."""
    if configured is not None:
        return configured
    fs = os.statvfs(volume)
    return fs.f_blocks * fs.f_frsize


def volume_usage(volume: Path, configured_capacity: int | None) -> int:
    """Bytes in use: the volume's own files when a capacity is configured.

    With no configured capacity the whole filesystem is the budget, so what
    counts is what the filesystem reports as used (other tenants included).
    """
    if configured_capacity is not None:
        return disk_usage(volume)
    fs = os.statvfs(volume)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


def cache_units(cache_root: Path) -> list[CacheUnit]:
    """Every eviction unit under ``cache_root``, least recently used first."""
    units: list[CacheUnit] = []
    stack = [cache_root]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                rel = path.relative_to(cache_root).as_posix()
                if any(fnmatch(rel, pattern) for pattern in ATOMIC_DIR_PATTERNS):
                    units.append(_dir_unit(path))
                else:
                    stack.append(path)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            units.append(CacheUnit(path, st.st_blocks * 512, max(st.st_atime, st.st_mtime)))
    units.sort(key=lambda unit: (unit.last_used, str(unit.path)))
    return units


def _dir_unit(path: Path) -> CacheUnit:
    """A directory unit: its size, and the last use of any file in it."""
    size = 0
    last: float | None = None
    for st in _walk_stats(path):
        size += st.st_blocks * 512
        if not stat.S_ISDIR(st.st_mode):
            last = max(last or 0.0, st.st_atime, st.st_mtime)
    own = path.lstat()
    return CacheUnit(path, size + own.st_blocks * 512, own.st_mtime if last is None else last)


def evict_caches(
    cache_root: Path,
    *,
    usage: int,
    capacity: int,
    high_watermark: float,
    low_watermark: float,
    protected: Collection[Path] = (),
) -> tuple[list[Path], int]:
    """Delete cache units, oldest first, until ``usage`` is under the low watermark.

    Does nothing unless ``usage`` is over the high watermark. Returns the
    evicted paths and the bytes freed. ``protected`` paths (and anything
    inside them) are never deleted.
    """
    if capacity <= 0 or usage <= high_watermark * capacity:
        return [], 0
    target = low_watermark * capacity
    guarded = [p.resolve() for p in protected]
    evicted: list[Path] = []
    freed = 0
    for unit in cache_units(cache_root):
        if usage - freed <= target:
            break
        resolved = unit.path.resolve()
        if any(resolved == g or g in resolved.parents for g in guarded):
            continue
        remove_tree(unit.path)
        evicted.append(unit.path)
        freed += unit.size
    _remove_empty_dirs(cache_root)
    return evicted, freed


def evict_volume(
    volume: Path,
    cache_root: Path,
    settings: WorkspaceSettings,
    report: HousekeepingReport,
    protected: Collection[Path] = (),
) -> HousekeepingReport:
    """Evict package caches, oldest first, from the high down to the low watermark."""
    capacity = volume_capacity(volume, settings.capacity_bytes)
    usage = volume_usage(volume, settings.capacity_bytes)
    evicted, freed = evict_caches(
        cache_root,
        usage=usage,
        capacity=capacity,
        high_watermark=settings.high_watermark,
        low_watermark=settings.low_watermark,
        protected=protected,
    )
    report.capacity, report.usage_before = capacity, usage
    report.evicted.extend(evicted)
    report.evicted_bytes += freed
    report.usage_after = volume_usage(volume, settings.capacity_bytes)
    return report


def _remove_empty_dirs(root: Path) -> None:
    """Remove directories emptied by eviction, keeping each tool's top directory
    (shared, and each repository's: a running sandbox may have it bound)."""
    for dirpath, _dirnames, _files in sorted(os.walk(root), key=lambda t: -len(t[0])):
        path = Path(dirpath)
        parts = path.relative_to(root).parts
        if len(parts) <= 1 or (parts[0] == REPO_CACHES and len(parts) <= 3):
            continue
        try:
            path.rmdir()
        except OSError:
            pass


def check_volume(volume: Path) -> Path:
    """The volume, resolved, after checking it exists and is writable."""
    if not volume.exists():
        raise ConfigError(
            f"volume {volume}: does not exist; create it or set `volume` to an existing directory"
        )
    if not volume.is_dir():
        raise ConfigError(f"volume {volume}: is not a directory")
    probe = volume / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"volume {volume}: is not writable ({exc.strerror})") from exc
    return volume.resolve()


def drop_stray_branches(checkout: GitRunner, keep_prefix: str) -> list[str]:
    """Delete the branches agents made in the shared checkout; returns their names.

    Stray: a branch outside ``keep_prefix`` (the daemon's run branches) that no
    worktree has checked out. Tags need no sweep: every feed from the mirror
    prunes the ones upstream does not have.
    """
    listing = checkout.ok("for-each-ref", "--format=%(refname) %(worktreepath)", "refs/heads")
    stray = []
    for line in listing.splitlines():
        name, _, worktree = line.partition(" ")
        if not worktree and not name.startswith(f"refs/heads/{keep_prefix}"):
            stray.append(name)
    for name in stray:
        checkout.ok("update-ref", "-d", name)
    return stray


def tidy_repo(
    repo_dir: Path,
    active: set[Path],
    report: HousekeepingReport,
    *,
    keep_prefix: str,
    gits: Sequence[GitRunner],
) -> None:
    """Drop orphaned run trees, crashed clones and stray branches, prune worktrees, ``gc --auto``.

    ``gits`` are the checkout (first, its worktrees are pruned) and the mirror.
    The caller holds the repo's lock. Entries named ``keep_prefix*`` (the
    warm slots) and anything in or around an ``active`` path are left alone.
    """
    report.checkouts += 1
    for stale in [*repo_dir.glob("checkout.tmp-*"), *repo_dir.glob("mirror.git.tmp-*")]:
        remove_tree(stale)
    worktrees = repo_dir / "worktrees"
    for entry in sorted(worktrees.iterdir()) if worktrees.is_dir() else []:
        resolved = entry.resolve()
        if entry.name.startswith(keep_prefix) or resolved in active:
            continue
        if any(resolved in a.parents for a in active):
            continue
        remove_tree(entry)
        report.orphans_removed.append(entry)
    drop_checkout_index(checkout_repo(repo_dir))  # gc would fail reading the agent's
    gits[0].ok("worktree", "prune")
    report.pruned += 1
    idle = not any(repo_dir.resolve() in a.parents for a in active)
    if idle:  # an agent at work may still need a branch it made
        report.branches_removed += drop_stray_branches(gits[0], RUN_BRANCH_PREFIX)
    for git in gits:
        git.ok("gc", "--auto", "--quiet")
    report.gc_runs += 1
