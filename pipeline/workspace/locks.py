"""The per-repo lock: threads of this process first, then other processes (``flock``).

Every change to a repo's directory (its mirror, checkout, slots, clone) happens
under it, held briefly: fetching and resetting a tree, never while an agent works.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class RepoLocks:
    """One lock per repo directory, shared by every thread of the daemon."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._thread_locks: dict[Path, threading.Lock] = {}

    @contextmanager
    def hold(self, repo_dir: Path) -> Iterator[None]:
        """Hold ``repo_dir``'s lock for the block (the directory is created if missing)."""
        with self._guard:
            thread_lock = self._thread_locks.setdefault(repo_dir, threading.Lock())
        with thread_lock:
            repo_dir.mkdir(parents=True, exist_ok=True)
            with open(repo_dir / ".lock", "a+b") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
