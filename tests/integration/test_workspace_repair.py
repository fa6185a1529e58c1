"""A persistent checkout the agent damaged is rebuilt from the mirror at the next prepare.

What must survive the rebuild: frozen evidence (its worktree registration and the
commit it holds), the run branches of failed runs with their unpushed commits, and
the warm slot's dependency dirs. Damage is done as an agent's shell would: by
writing the checkout's git directory directly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.settings import WorkspaceSettings
from pipeline.testing.gitrepos import git
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.workspaces import Workspaces

from .test_workspace import make_repo, prepare

REBUILT = "rebuilt the repo's checkout from the daemon's mirror"


def _rebuilds(sink: RecordingSink) -> list[str]:
    return [message for _, message, _ in sink.events if message.startswith(REBUILT)]


def test_a_rebuild_keeps_evidence_and_unpushed_run_branches(tmp_path: Path) -> None:
    """Junk in ``packed-refs`` (the run branches packed in it): the next prepare rebuilds
    the checkout; the frozen tree still shows its commit, the failed run's branch still
    holds its own, and discarding the evidence still unregisters it."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    frozen_run = prepare(ws, repo, 1)
    (frozen_run.path / "README.md").write_text("half done\n")
    git(frozen_run.path, "commit", "-qam", "frozen work")
    frozen_head = git(frozen_run.path, "rev-parse", "HEAD").strip()
    evidence = ws.keep_evidence(frozen_run, run_id=1, repo="app", reason="r", head_sha=None)
    failed = prepare(ws, repo, 2)
    (failed.path / "src" / "new.py").write_text("X = 1\n")
    git(failed.path, "add", "-A")
    git(failed.path, "commit", "-qm", "unpushed work")
    failed_head = git(failed.path, "rev-parse", "HEAD").strip()
    ws.release(failed, succeeded=False)
    checkout = ws.repo_dir(repo) / "checkout"
    git(checkout, "pack-refs", "--all")
    with (checkout / ".git" / "packed-refs").open("a") as refs:
        refs.write("junk an agent appended\n")

    sink = RecordingSink()
    third = prepare(ws, repo, 3, events=sink)

    assert len(_rebuilds(sink)) == 1, sink.events
    assert "unexpected line" in _rebuilds(sink)[0]
    assert (third.path / "README.md").read_text() == "hello\n"
    assert (third.path / ".venv" / "made").is_file()  # the warm slot stayed warm
    tree = evidence / "worktree"
    assert git(tree, "rev-parse", "HEAD").strip() == frozen_head
    assert git(tree, "status", "--porcelain").strip() == ""
    assert git(checkout, "rev-parse", failed.branch).strip() == failed_head
    assert git(checkout, "show", f"{failed_head}:src/new.py") == "X = 1\n"
    ws.discard_evidence(evidence)
    assert "frozen" not in git(checkout, "worktree", "list", "--porcelain")


def test_a_missing_object_of_the_base_is_found_before_the_worktree_needs_it(
    tmp_path: Path,
) -> None:
    """A deleted object file that the feed from the mirror does not notice (its refs are
    up to date): the probe does, and the checkout is rebuilt, so the slot can be put
    back on the base. Before, that checkout failed on the missing object. An intact
    checkout is not rebuilt."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    sink = RecordingSink()
    first = prepare(ws, repo, 1, events=sink)
    (first.path / "src" / "app.py").write_text("print('changed')\n")
    git(first.path, "commit", "-qam", "a failed run's change")
    ws.release(first, succeeded=False)
    assert _rebuilds(sink) == []
    checkout = ws.repo_dir(repo) / "checkout"
    blob = git(checkout, "rev-parse", f"{first.base_sha}:src/app.py").strip()
    loose = checkout / ".git" / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()  # a small feed stays loose
    loose.chmod(0o644)
    loose.unlink()

    sink = RecordingSink()
    second = prepare(ws, repo, 2, events=sink)

    assert len(_rebuilds(sink)) == 1, sink.events
    assert f"objects of {first.base_sha[:12]} are missing" in _rebuilds(sink)[0]
    assert (second.path / "src" / "app.py").read_text() == "print('app')\n"
    assert git(checkout, "fsck", "--connectivity-only").strip() == ""
    assert git(checkout, "log", "-1", "--format=%s", first.branch).strip() == (
        "a failed run's change"
    )


def test_an_object_the_probe_cannot_see_is_corrupt_fails_the_reset_and_is_repaired(
    tmp_path: Path,
) -> None:
    """A loose object whose header reads but whose content is garbage: the probe (which
    decompresses nothing) passes, putting the slot back on the base fails on it, and the
    checkout is rebuilt and the reset done again."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    big = "".join(f"line {n} of the data\n" for n in range(20_000))
    repo = make_repo(tmp_path, "app", files={"README.md": "hello\n", "data.txt": big})
    first = prepare(ws, repo, 1)
    (first.path / "data.txt").write_text("changed\n")
    git(first.path, "commit", "-qam", "a failed run's change")
    ws.release(first, succeeded=False)
    checkout = ws.repo_dir(repo) / "checkout"
    blob = git(checkout, "rev-parse", f"{first.base_sha}:data.txt").strip()
    loose = checkout / ".git" / "objects" / blob[:2] / blob[2:]
    data = bytearray(loose.read_bytes())
    for index in range(len(data) - 400, len(data) - 200):
        data[index] ^= 0x55
    loose.chmod(0o644)
    loose.write_bytes(bytes(data))

    sink = RecordingSink()
    second = prepare(ws, repo, 2, events=sink)

    assert len(_rebuilds(sink)) == 1, sink.events
    assert "corrupt" in _rebuilds(sink)[0], _rebuilds(sink)
    assert (second.path / "data.txt").read_text() == big


def test_an_index_the_agent_wrote_into_the_checkouts_git_dir_goes(tmp_path: Path) -> None:
    """The checkout's own work tree is never checked out, so an index there is the
    agent's: the next prepare and housekeeping delete it, and ``gc`` in the checkout
    works. Before, every ``gc`` of the checkout failed reading it."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    ws.release(prepare(ws, repo, 1), succeeded=True)
    checkout = ws.repo_dir(repo) / "checkout"
    assert not (checkout / ".git" / "index").exists()
    (checkout / ".git" / "index").write_bytes(b"DIRC garbage")
    ws.release(prepare(ws, repo, 2), succeeded=True)
    git(checkout, "gc", "--quiet")
    (checkout / ".git" / "index").write_bytes(b"DIRC garbage")
    assert ws.housekeeping(active_paths=[]).errors == []
    git(checkout, "gc", "--quiet")


@pytest.mark.parametrize("renamed", ["damaged aside only", "fresh in place too"])
def test_a_rebuild_the_daemon_was_killed_in_is_finished_at_the_next_prepare(
    renamed: str, tmp_path: Path
) -> None:
    """Killed between the renames that swap the checkouts: the next prepare moves the
    frozen evidence's registration into the checkout in place, or puts the damaged
    checkout back and rebuilds it again; the evidence stays a worktree of it."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    evidence = ws.keep_evidence(
        prepare(ws, repo, 1), run_id=1, repo="app", reason="r", head_sha=None
    )
    repo_dir = ws.repo_dir(repo)
    checkout = repo_dir / "checkout"
    with (checkout / ".git" / "packed-refs").open("a") as refs:
        refs.write("junk an agent appended\n")
    checkout.rename(repo_dir / "checkout.damaged-4242")
    if renamed == "fresh in place too":
        ws.mirror(repo).fresh_checkout(None).where.rename(checkout)

    sink = RecordingSink()
    prepare(ws, repo, 2, events=sink)

    assert not list(repo_dir.glob("checkout.damaged-*"))
    assert str((evidence / "worktree").resolve()) in git(
        checkout, "worktree", "list", "--porcelain"
    )
    assert git(evidence / "worktree", "status", "--porcelain").strip() == ""
    assert len(_rebuilds(sink)) == (1 if renamed == "damaged aside only" else 0), sink.events


def test_a_commit_the_agent_made_unreadable_is_named_and_the_others_kept(
    tmp_path: Path,
) -> None:
    """Two failed runs' branches; the commit of one is emptied and ``packed-refs`` has
    junk. The rebuild keeps the other branch and its commit, and names the lost one."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    heads = {}
    for run_id in (1, 2, 3):
        run = prepare(ws, repo, run_id)
        (run.path / f"run{run_id}.txt").write_text(f"{run_id}\n")
        git(run.path, "add", "-A")
        git(run.path, "commit", "-qm", f"run {run_id}")
        heads[run.branch] = git(run.path, "rev-parse", "HEAD").strip()
        ws.release(run, succeeded=False)
    checkout = ws.repo_dir(repo) / "checkout"
    lost, *kept = sorted(heads)
    loose = checkout / ".git" / "objects" / heads[lost][:2] / heads[lost][2:]
    loose.chmod(0o644)
    loose.write_bytes(b"")
    with (checkout / ".git" / "packed-refs").open("a") as refs:
        refs.write("junk an agent appended\n")

    sink = RecordingSink()
    prepare(ws, repo, 4, events=sink)

    (message,) = _rebuilds(sink)
    assert f"kept {len(kept)} run branch(es)" in message, message
    assert f"could not recover the commits of {lost}" in message, message
    for branch in kept:
        assert git(checkout, "rev-parse", branch).strip() == heads[branch]
    refs = git(checkout, "for-each-ref", "--format=%(refname:short)", "refs/heads/afk")
    assert lost not in refs.split()
