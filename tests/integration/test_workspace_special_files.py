"""A warm slot that holds a FIFO its git would block on: swept, or rebuilt, never reused broken.

The daemon deletes the FIFOs, sockets and devices left in a run's tree after every
sandboxed command and before a slot is reset (``tests/e2e/test_special_files.py``
goes through ``pipeline run``). Here, on real git: the sweep itself, and the slot
reset that meets such a file anyway (git's time limit is short, so it ends soon).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from pipeline.config.settings import WorkspaceSettings
from pipeline.core.files import drop_special_files
from pipeline.git.mirror import checkout_repo
from pipeline.git.run import GitLimits, GitRunner
from pipeline.sandbox.jail import drop_special
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.slots import registered, reset_slot
from pipeline.workspace.workspaces import Workspaces

from .test_workspace import make_repo, prepare


def test_a_slot_reset_that_git_cannot_finish_rebuilds_the_slot(tmp_path: Path) -> None:
    """A FIFO ``.gitattributes`` in a slot (one no sweep saw) makes the reset's
    ``checkout --force`` hang until git's time limit; the slot is then rebuilt, its
    dependency dirs kept, instead of the reset failing (retryably) for every run that
    reuses it."""
    volume = tmp_path / "volume"
    volume.mkdir()
    workspaces = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path)
    first = prepare(workspaces, repo, 1)
    made = (first.path / ".venv" / "made").read_text()
    workspaces.release(first, succeeded=True)
    os.mkfifo(first.path / ".gitattributes")
    # A tracked file changed: the checkout must write it, so it reads the attributes (an
    # unchanged tree may be reset without reading them, and then the FIFO stays unread).
    (first.path / "README.md").write_text("changed by the agent\n")
    checkout = checkout_repo(workspaces.repo_dir(repo))
    runner = GitRunner(checkout, None, GitLimits(local_s=2.0, kill_grace_s=1.0))
    tree = reset_slot(checkout, first.path, repo, ("afk/2-2", first.base_sha), runner)
    assert registered(tree)
    assert not os.path.lexists(first.path / ".gitattributes")
    assert (first.path / ".venv" / "made").read_text() == made
    assert GitRunner(tree).ok("rev-parse", "HEAD").strip() == first.base_sha


def test_the_sweep_deletes_special_files_only_and_follows_no_link(tmp_path: Path) -> None:
    """FIFOs and sockets go at any depth, in a directory the agent made unreadable too;
    files, directories and symlinks stay, and a link to a FIFO outside the tree leaves
    that FIFO alone."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    os.mkfifo(outside / "fifo")
    os.mkfifo(tree / ".gitattributes")
    os.mkfifo(tree / "a" / "b" / ".gitignore")
    (tree / "a" / "file.txt").write_text("kept\n")
    (tree / "a" / "link").symlink_to(outside / "fifo")
    (tree / "a" / "dirlink").symlink_to(outside)
    cwd = os.getcwd()
    os.chdir(tree / "a")
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind("s.sock")
    finally:
        os.chdir(cwd)
    (tree / "locked").mkdir()
    os.mkfifo(tree / "locked" / ".gitignore")
    (tree / "locked").chmod(0o111)  # the agent's: git can open a name in it, not list it
    assert drop_special_files(tree) == [
        ".gitattributes",
        "a/b/.gitignore",
        "a/s.sock",
        "locked/.gitignore",
    ]
    assert (tree / "a" / "file.txt").read_text() == "kept\n"
    assert (tree / "a" / "link").is_symlink() and (tree / "a" / "dirlink").is_symlink()
    assert stat.S_ISFIFO(os.lstat(outside / "fifo").st_mode)
    assert drop_special_files(tree) == []


def test_the_timeline_names_a_few_removed_files_cut_and_escaped(tmp_path: Path) -> None:
    """The names are the agent's: five at most, each cut, control characters escaped."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for index in range(7):
        os.mkfifo(tree / f"f{index}\x1b[2J{'x' * 200}")
    sink = RecordingSink()
    assert len(drop_special(tree, sink)) == 7
    [(kind, message, data)] = sink.events
    assert kind == "sandbox" and data == {"removed": 7}
    assert "\x1b" not in message and "\\x1b" in message
    assert message.count("'f") == 5 and message.endswith(" and 2 more")
    assert "x" * 101 not in message
