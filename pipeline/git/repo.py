"""Where a daemon git command runs: a repository pinned to paths the daemon knows.

The agent can write every repository but the mirror: the checkout's config,
hooks, objects and refs, a worktree's admin dir (``commondir``, ``gitdir``,
``config.worktree``) and the worktree's ``.git`` file. So the daemon never
lets git find a repository by itself: ``GitRepo.pins`` names ``GIT_DIR``,
``GIT_COMMON_DIR`` and ``GIT_WORK_TREE``, and ``GitRepo.reclaim`` puts the
daemon's config and links back before each command, and deletes the symlinks
and special files the agent left in the git directory (ADR 0010).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

_LOOSE = re.compile(r"[0-9a-f]{2}")


@dataclass(frozen=True)
class GitRepo:
    """A repository a daemon git command runs in, pinned to paths the daemon knows.

    ``owned`` marks the daemon's mirror, which nothing else can write. Every
    other repository (checkout, worktree slot, git-crypt clone) is treated as
    written by the agent; ``config_source`` is the daemon's own copy of its
    config, restored before every command.
    """

    git_dir: Path
    common_dir: Path
    work_tree: Path | None = None
    owned: bool = False
    config_source: Path | None = None

    @classmethod
    def mirror(cls, path: Path) -> GitRepo:
        return cls(path, path, None, owned=True)

    @classmethod
    def plain(cls, root: Path, config_source: Path | None = None) -> GitRepo:
        """A repository with its ``.git`` directory in ``root`` (checkout, clone)."""
        return cls(root / ".git", root / ".git", root, config_source=config_source)

    @classmethod
    def worktree(cls, checkout: Path, tree: Path, config_source: Path | None = None) -> GitRepo:
        """Worktree ``tree`` of ``checkout``: its admin dir is named after the tree."""
        common = checkout / ".git"
        return cls(common / "worktrees" / tree.name, common, tree, config_source=config_source)

    @property
    def where(self) -> Path:
        return self.work_tree if self.work_tree is not None else self.git_dir

    def pins(self) -> dict[str, str]:
        pins = {"GIT_DIR": str(self.git_dir), "GIT_COMMON_DIR": str(self.common_dir)}
        if self.work_tree is not None:
            pins["GIT_WORK_TREE"] = str(self.work_tree)
        return pins

    def reclaim(self) -> None:
        """Undo what the agent may have written into git's own files of this repository."""
        if self.owned or not self.common_dir.is_dir():
            return
        drop_links(self.common_dir)  # a worktree's admin dir is inside it
        if self.config_source is not None:
            _write(self.common_dir / "config", self.config_source.read_bytes())
        for planted in (
            "config.worktree",
            "objects/info/alternates",
            "objects/info/http-alternates",
        ):
            _remove(self.common_dir / planted)
        if self.git_dir == self.common_dir or not self.git_dir.is_dir():
            return
        _remove(self.git_dir / "config.worktree")
        _write(self.git_dir / "commondir", b"../..\n")
        if self.work_tree is not None and self.work_tree.is_dir():
            _write(self.git_dir / "gitdir", f"{self.work_tree / '.git'}\n".encode())
            _write(self.work_tree / ".git", f"gitdir: {self.git_dir}\n".encode())


def drop_links(git_dir: Path) -> list[Path]:
    """Delete the symlinks, FIFOs, sockets and devices git would meet in ``git_dir``.

    Git makes none there, and the daemon's git follows what it finds: it opens
    ``FETCH_HEAD`` and the reflogs to write them, walks ``worktrees/``, ``objects/``
    and ``refs/`` to read, write and delete. A link the agent left would carry
    those writes outside its sandbox; a FIFO would hang them. Only what git itself
    walks is looked at (a directory of a million the agent made elsewhere costs
    nothing). A symlinked ``HEAD`` of the repository or of a worktree stays: git
    only reads one (a legacy symbolic ref) and replaces it to write.
    """
    dropped: list[Path] = []
    stack: list[tuple[Path, tuple[str, ...]]] = [(git_dir, ())]
    while stack:
        current, parts = stack.pop()
        try:
            entries = list(os.scandir(current))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            inner = (*parts, entry.name)
            if entry.is_dir(follow_symlinks=False):
                if _git_walks(inner):
                    stack.append((Path(entry.path), inner))
            elif not entry.is_file(follow_symlinks=False):
                if inner[-1] == "HEAD" and entry.is_symlink() and len(_own_part(inner)) == 1:
                    continue
                Path(entry.path).unlink(missing_ok=True)
                dropped.append(Path(entry.path))
    return dropped


def _own_part(parts: tuple[str, ...]) -> tuple[str, ...]:
    """``parts`` relative to its git dir: a worktree's admin dir is one of its own."""
    return parts[2:] if parts[:1] == ("worktrees",) and len(parts) > 2 else parts


def _git_walks(parts: tuple[str, ...]) -> bool:
    """Whether git reads or writes in the directory at ``parts`` (from the git dir)."""
    if parts in (("worktrees",), ("worktrees", parts[-1])):
        return True
    own = _own_part(parts)
    if own[0] in ("refs", "logs"):
        return True
    if own[0] != "objects" or len(own) > 2:
        return False
    return len(own) == 1 or own[1] == "pack" or _LOOSE.fullmatch(own[1]) is not None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write(path: Path, data: bytes) -> None:
    """Replace ``path`` (a file, a symlink or a planted directory) with ``data``."""
    _remove(path)
    staging = path.with_name(f".{path.name}.afk-{os.getpid()}")
    staging.write_bytes(data)
    os.replace(staging, path)
