"""Files on the host: removing a tree git, caches or tools left read-only."""

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
