"""What ``drop_links`` deletes in a git directory before the daemon's git runs there."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.git.repo import drop_links


def test_links_and_fifos_where_git_looks_go_and_a_symlinked_head_stays(tmp_path: Path) -> None:
    """Links and FIFOs where git reads or writes go; a symlinked HEAD (a legacy symbolic
    ref) stays; a directory git never walks is not walked (a million of them cost nothing)."""
    for directory in ("refs/heads/afk", "logs/refs/heads", "objects/ab", "objects/pack"):
        (tmp_path / directory).mkdir(parents=True)
    for directory in ("worktrees/slot-0/logs", "objects/junk/deep", "junk/deep"):
        (tmp_path / directory).mkdir(parents=True)
    planted = [
        "FETCH_HEAD",
        "logs/refs/heads/x",
        "objects/ab/cd",
        "objects/pack/p.pack",
        "refs/heads/afk/1",
        "worktrees/slot-0/logs/HEAD",
        "worktrees/slot-0/index",
        "worktrees/linked",
        "junk/deep/link",
        "objects/junk/deep/link",
    ]
    for name in planted:
        (tmp_path / name).symlink_to("/etc/passwd")
    (tmp_path / "HEAD").symlink_to("refs/heads/main")
    (tmp_path / "worktrees" / "slot-0" / "HEAD").symlink_to("refs/heads/afk/1")
    os.mkfifo(tmp_path / "ORIG_HEAD")

    dropped = {path.relative_to(tmp_path).as_posix() for path in drop_links(tmp_path)}

    assert dropped == {*planted[:8], "ORIG_HEAD"}
    left = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_symlink()}
    assert left == {"HEAD", "worktrees/slot-0/HEAD", "junk/deep/link", "objects/junk/deep/link"}
