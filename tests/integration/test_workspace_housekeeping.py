"""Housekeeping on a real volume: LRU cache eviction, evidence and active runs untouched."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.errors import FatalError
from pipeline.testing.gitrepos import git, make_remote
from pipeline.testing.sinks import RecordingSink
from pipeline.workspace.housekeeping import disk_usage
from pipeline.workspace.workspaces import PreparedWorkspace, Workspaces

UNIT = 256 * 1024
DAY = 86400.0


def tree_digest(root: Path) -> str:
    """A digest of every file's path and content under ``root``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def make_repo(tmp_path: Path, name: str) -> RepoSettings:
    """A repo on a fresh bare remote, with a dependency dir made by setup."""
    url = make_remote(tmp_path, {"README.md": "hi\n", ".gitignore": ".venv/\n"}, name=name)
    return RepoSettings(
        name=name,
        tracker="gh",
        slug=f"acme/{name}",
        remote_url=url,
        setup_commands=("mkdir -p .venv && echo warm > .venv/state",),
    )


def prepare(ws: Workspaces, repo: RepoSettings, run_id: int) -> PreparedWorkspace:
    """Prepare one run with the test's environment."""
    return ws.prepare(
        repo,
        run_id=run_id,
        issue_ref=str(run_id),
        base_env=dict(os.environ),
        events=RecordingSink(),
    )


def fill(path: Path, when: float, atime: float | None = None) -> Path:
    """A UNIT-sized cache file last modified at ``when`` (and read at ``atime``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(UNIT))
    os.utime(path, (atime if atime is not None else when, when))
    return path


def unit_size(path: Path) -> int:
    """Allocated bytes of a file or a whole directory, like du."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return disk_usage(path) + path.stat().st_blocks * 512


def test_eviction_is_lru_from_high_to_low_watermark_sparing_evidence_and_active(
    tmp_path: Path,
) -> None:
    """Over the high watermark, oldest cache entries go first until under the low one."""
    volume = tmp_path / "volume"
    volume.mkdir()
    probe = Workspaces(volume, WorkspaceSettings())
    frozen_repo, active_repo = make_repo(tmp_path, "frozen"), make_repo(tmp_path, "active")
    to_freeze = prepare(probe, frozen_repo, 1)
    (to_freeze.path / "README.md").write_text("the broken edit\n")
    evidence = probe.keep_evidence(
        to_freeze, run_id=1, repo="frozen", reason="deploy broken", head_sha=None
    )
    active = prepare(probe, active_repo, 2)
    (active.path / "work-in-progress.py").write_text("x = 1\n")

    now = 2_000_000_000.0
    cache = probe.cache_root
    go_module = cache / "go-mod" / "example.com" / "lib@v1.2.3"
    fill(go_module / "lib.go", now - 30 * DAY)
    os.utime(go_module, (now - 30 * DAY, now - 30 * DAY))
    go_module.chmod(0o555)  # the Go module cache is read-only
    aged = [
        go_module,
        fill(cache / "pip" / "http" / "a", now - 20 * DAY),
        fill(cache / "npm" / "_cacache" / "b", now - 10 * DAY),
        fill(cache / "cargo" / "registry" / "cache" / "c.crate", now - 5 * DAY),
        fill(cache / "uv" / "d", now - 4 * DAY),
        fill(cache / "yarn" / "e", now - 3 * DAY),
        fill(cache / "gradle" / "f", now - 2 * DAY),
        fill(cache / "go-build" / "g", now - 1 * DAY),
    ]
    # Written long ago but read a minute ago: recently used, so kept.
    recently_read = fill(cache / "pip" / "http" / "old-but-read", now - 40 * DAY, now - 60)

    frozen_before = tree_digest(evidence)
    active_before = tree_digest(active.path)
    usage = disk_usage(volume)
    sizes = [unit_size(p) for p in aged]
    settings = WorkspaceSettings(high_watermark=0.9, low_watermark=0.8)
    capacity = int((usage - sum(sizes[:4]) + sizes[4] // 2) / settings.low_watermark)
    assert usage > settings.high_watermark * capacity
    ws = Workspaces(
        volume, WorkspaceSettings(capacity_bytes=capacity, high_watermark=0.9, low_watermark=0.8)
    )

    report = ws.housekeeping(active_paths=[active.path])

    assert report.evicted == aged[:4]
    assert all(not p.exists() for p in aged[:4])
    assert all(p.exists() for p in [*aged[4:], recently_read])
    assert report.usage_after <= 0.8 * capacity < report.usage_before
    assert tree_digest(evidence) == frozen_before
    assert tree_digest(active.path) == active_before
    manifest = json.loads((evidence / "manifest.json").read_text())
    assert manifest["reason"] == "deploy broken" and manifest["run_id"] == 1


def test_under_the_high_watermark_nothing_is_evicted(tmp_path: Path) -> None:
    """Usage below the high watermark evicts nothing, however old the caches."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings(capacity_bytes=100 * UNIT))
    old = fill(ws.cache_root / "pip" / "ancient", 1_000_000.0)
    report = ws.housekeeping(active_paths=[])
    assert report.evicted == [] and old.exists()
    assert report.usage_before < 0.9 * report.capacity


def test_housekeeping_removes_orphans_and_keeps_slots_active_runs_and_evidence(
    tmp_path: Path,
) -> None:
    """Orphaned run trees go; the warm slot, an active tree and frozen evidence stay."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    first = prepare(ws, repo, 1)
    evidence = ws.keep_evidence(first, run_id=1, repo="app", reason="escalated", head_sha=None)
    second = prepare(ws, repo, 2)
    ws.release(second, succeeded=True)
    worktrees = ws.repo_dir(repo) / "worktrees"
    orphan = worktrees / "clone-from-a-crashed-run"
    (orphan / "sub").mkdir(parents=True)
    (orphan / "sub" / "secret").write_text("decrypted")
    active_elsewhere = worktrees / "run-42"
    active_elsewhere.mkdir()

    fresh = Workspaces(volume, WorkspaceSettings())  # a restarted daemon: nothing busy
    report = fresh.housekeeping(active_paths=[active_elsewhere])

    assert report.orphans_removed == [orphan] and not orphan.exists()
    assert active_elsewhere.is_dir()
    assert (worktrees / "slot-0" / ".venv" / "state").read_text() == "warm\n"
    assert (evidence / "worktree" / "README.md").exists()
    listed = git(ws.repo_dir(repo) / "checkout", "worktree", "list", "--porcelain")
    assert str((evidence / "worktree").resolve()) in listed
    assert report.errors == [] and report.gc_runs == 1 and report.pruned == 1


def test_evidence_keeps_edits_and_the_next_run_gets_a_fresh_slot(tmp_path: Path) -> None:
    """Kept evidence holds the run's edits and SHAs; the repo's next run starts clean."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    run = prepare(ws, repo, 5)
    (run.path / "README.md").write_text("half done\n")
    git(run.path, "commit", "-qam", "wip")
    head = git(run.path, "rev-parse", "HEAD").strip()
    evidence = ws.keep_evidence(
        run, run_id=5, repo="app", reason="tests never green", head_sha=None, extra={"attempt": 2}
    )
    assert evidence == volume.resolve() / "frozen" / "5"
    manifest = json.loads((evidence / "manifest.json").read_text())
    assert manifest["base_sha"] == run.base_sha and manifest["head_sha"] == head
    assert manifest["extra"] == {"attempt": 2} and manifest["branch"] == run.branch
    assert (evidence / "worktree" / "README.md").read_text() == "half done\n"
    nxt = prepare(ws, repo, 6)
    assert (nxt.path / "README.md").read_text() == "hi\n"


def test_discarding_evidence_unregisters_its_worktree(tmp_path: Path) -> None:
    """discard_evidence deletes the frozen tree and its worktree registration, nothing else."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    evidence = ws.keep_evidence(
        prepare(ws, repo, 3), run_id=3, repo="app", reason="r", head_sha=None
    )
    with pytest.raises(FatalError, match="not a frozen run's evidence"):
        ws.discard_evidence(ws.repo_dir(repo))
    ws.discard_evidence(evidence)
    assert not evidence.exists()
    checkout = ws.repo_dir(repo) / "checkout"
    assert "frozen" not in git(checkout, "worktree", "list", "--porcelain")
    git(checkout, "branch", "-D", "afk/3-3")  # no longer checked out anywhere


def test_branches_and_tags_an_agent_made_do_not_pile_up_in_the_checkout(tmp_path: Path) -> None:
    """An agent's own branches go at housekeeping and its tags at the next prepare; run
    branches, upstream tags and what an agent still at work made stay."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo, busy_repo = make_repo(tmp_path, "app"), make_repo(tmp_path, "busy")
    upstream = tmp_path / "upstream"
    git(tmp_path, "clone", "-q", repo.remote_url, str(upstream))
    git(upstream, "tag", "v1.0")
    git(upstream, "push", "-q", "origin", "v1.0")
    failed, working = prepare(ws, repo, 1), prepare(ws, busy_repo, 2)
    for tree in (failed.path, working.path):
        git(tree, "branch", "agent-scratch")
        git(tree, "tag", "agent-tag")
    ws.release(failed, succeeded=False)  # a failed run keeps its branch
    checkout, busy_checkout = (ws.repo_dir(r) / "checkout" for r in (repo, busy_repo))

    def refs(where: Path) -> set[str]:
        return set(git(where, "for-each-ref", "--format=%(refname)").split())

    assert {"refs/heads/agent-scratch", "refs/tags/agent-tag"} <= refs(checkout)
    report = Workspaces(volume, WorkspaceSettings()).housekeeping(active_paths=[working.path])
    assert report.branches_removed == ["refs/heads/agent-scratch"] and report.errors == []
    assert "refs/heads/agent-scratch" not in refs(checkout)
    assert f"refs/heads/{failed.branch}" in refs(checkout)
    assert "refs/heads/agent-scratch" in refs(busy_checkout)  # its agent is still at work
    ws.release(prepare(ws, repo, 3), succeeded=True)
    assert "refs/tags/agent-tag" not in refs(checkout) and "refs/tags/v1.0" in refs(checkout)
    ws.release(working, succeeded=True)
    Workspaces(volume, WorkspaceSettings()).housekeeping(active_paths=[])
    assert "refs/heads/agent-scratch" not in refs(busy_checkout)


def test_a_run_whose_tree_was_kept_can_prepare_again(tmp_path: Path) -> None:
    """A run retried after its tree was kept as evidence (the daemon died, or the history
    refused the escalation, between keeping and recording it) gets a fresh tree on its
    branch; the evidence keeps its commit and its edits. The evidence held the branch, so
    every later attempt of the run failed for good on ``git worktree add``."""
    volume = tmp_path / "volume"
    volume.mkdir()
    ws = Workspaces(volume, WorkspaceSettings())
    repo = make_repo(tmp_path, "app")
    run = prepare(ws, repo, 7)
    (run.path / "README.md").write_text("blocked halfway\n")
    git(run.path, "commit", "-qam", "wip")
    (run.path / "notes.txt").write_text("not committed\n")
    head = git(run.path, "rev-parse", "HEAD").strip()
    evidence = ws.keep_evidence(run, run_id=7, repo="app", reason="blocked", head_sha=None)
    again = prepare(ws, repo, 7)
    assert again.branch == run.branch
    assert (again.path / "README.md").read_text() == "hi\n"
    kept = evidence / "worktree"
    assert git(kept, "rev-parse", "HEAD").strip() == head
    assert (kept / "notes.txt").read_text() == "not committed\n"
    assert git(kept, "status", "--porcelain").strip() == "?? notes.txt"
