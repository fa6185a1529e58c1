"""Files on the host: removing a tree git, caches or tools left read-only; reading a
run's tree without following its links out of it; deleting the FIFOs, sockets and
devices an agent left in it."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


def remove_tree(path: Path) -> None:
    """Delete a file or directory, including read-only ones (the Go module cache)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    for dirpath, _dirnames, _files in os.walk(path):
        mode = os.lstat(dirpath).st_mode
        if mode & stat.S_IRWXU != stat.S_IRWXU:
            os.chmod(dirpath, mode | stat.S_IRWXU)
    shutil.rmtree(path)


class UnsafeFile(OSError):
    """A file of a tree the daemon will not read: a link out of the tree, or no regular file."""


def read_inside(root: Path, path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``, a regular file inside ``root``.

    For a file of a run's tree (which the repository and the agent wrote) that the
    daemon reads itself, outside the sandbox. Symlinks inside the tree are followed;
    one that leads out of it (to a secret file the sandbox hides, to
    ``/proc/self/environ``) raises ``UnsafeFile``, and so does anything but a regular
    file (a FIFO that would block the read, a device that never ends). The caller
    reads while nothing of the agent's runs, so the checked file is the one opened.
    ``FileNotFoundError`` when there is nothing at ``path``.
    """
    base = root.resolve()
    real = resolved(root, path)
    if real != base and base not in real.parents:
        raise UnsafeFile(f"{path.relative_to(root)} is a link to outside the repository")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(real, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(f"{path.relative_to(root)} is not a regular file")
        chunks: list[bytes] = []
        left = limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def resolved(root: Path, path: Path) -> Path:
    """``path`` with every symlink followed; ``UnsafeFile`` for a loop of links."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # a loop: RuntimeError before Python 3.13
        raise UnsafeFile(f"{path.relative_to(root)} is a loop of symlinks") from exc


def links_on_the_way(root: Path, relative: Path) -> Path | None:
    """The first part of ``root / relative`` (below ``root``) that is a symlink, if any."""
    current = root
    for part in relative.parts:
        current = current / part
        if current.is_symlink():
            return current.relative_to(root)
    return None


def drop_special_files(root: Path) -> list[str]:
    """Delete every FIFO, socket and device node under ``root``; their paths from ``root``.

    For a run's tree once a command of the agent's (or the repository's) ended: git
    opens ``.gitignore`` and ``.gitattributes`` wherever it looks, and one that is a
    FIFO blocks the daemon's git (``add``, ``status``, ``checkout``) until its time
    limit. Git keeps none of them in a commit. One pass of ``os.scandir``: nothing is
    opened, no link followed, and only what is neither a directory, a regular file nor
    a symlink by its directory entry is looked at further. A directory the agent made
    unreadable is made readable (its mode is no part of a commit) and walked too.
    """
    dropped: list[str] = []
    stack = [str(root)]
    while stack:
        current = stack.pop()
        for entry in _entries(current):
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif not entry.is_file(follow_symlinks=False) and _special(entry):
                    os.unlink(entry.path)
                    dropped.append(os.path.relpath(entry.path, root))
            except FileNotFoundError:
                continue
    return sorted(dropped)


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as found:
            return list(found)
    except PermissionError:
        pass
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        os.chmod(directory, os.lstat(directory).st_mode | stat.S_IRWXU)
        with os.scandir(directory) as found:
            return list(found)
    except OSError:  # not the daemon's to change: its git cannot read it either
        return []


def _special(entry: os.DirEntry[str]) -> bool:
    """A FIFO, socket or device: git opens what it should not, or refuses it."""
    if entry.is_symlink():
        return False
    mode = entry.stat(follow_symlinks=False).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
