"""A ``command`` agent that looks for the daemon's git credentials, then makes a change.

Run by the daemon as ``python cred_agent.py {workdir}``. It reads everything it
can reach that could hold a credential: its environment, every process's
``environ`` and ``cmdline`` under ``/proc``, its HOME, its tree and that tree's
git directories, ``/tmp`` and the places named in ``CRED_LOOK`` (colon-separated:
where the config, the key file and the daemon's HOME are). All it read goes into
``loot-<n>.txt`` in the tree, so the run pushes it and a test can search it for
the secrets the agent was never told. It also adds ``notes-<n>.txt``, ``n`` being
one more than the notes it finds (what earlier runs pushed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MAX_FILE_BYTES = 512 * 1024
MAX_FILES = 5000


def read_processes() -> list[str]:
    seen = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            for name in ("environ", "cmdline"):
                try:
                    seen.append((entry / name).read_bytes().decode("utf-8", "replace"))
                except OSError:
                    continue
    return seen


def read_tree(root: Path, seen: list[str], budget: list[int]) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            if budget[0] <= 0:
                return
            path = Path(directory) / name
            try:
                if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                    seen.append(f"== {path}\n" + path.read_bytes().decode("utf-8", "replace"))
                    budget[0] -= 1
            except OSError:
                continue


def git_dirs(workdir: Path) -> list[Path]:
    """The tree's admin dir and the checkout's common dir, from the ``.git`` file."""
    dot_git = workdir / ".git"
    if dot_git.is_dir():
        return [dot_git]
    try:
        admin = Path(dot_git.read_text().split("gitdir:", 1)[1].strip())
    except (OSError, IndexError):
        return []
    return [admin, admin.parent.parent]


def main() -> int:
    workdir = Path(sys.argv[1])
    seen = [f"{key}={value}" for key, value in os.environ.items()]
    seen += read_processes()
    roots = [Path.home(), workdir, *git_dirs(workdir), Path("/tmp")]
    roots += [Path(p) for p in os.environ.get("CRED_LOOK", "").split(":") if p]
    budget = [MAX_FILES]
    for root in roots:
        read_tree(root, seen, budget)
    count = len(list(workdir.glob("notes-*.txt"))) + 1
    (workdir / f"loot-{count}.txt").write_text("\n".join(seen), encoding="utf-8")
    (workdir / f"notes-{count}.txt").write_text(f"note {count}\n", encoding="utf-8")
    print(f"read {len(seen)} places; wrote notes-{count}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
