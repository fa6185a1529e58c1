"""Frozen evidence: a run's tree kept as it was, with a manifest, outside housekeeping.

``<volume>/frozen/<run-id>/worktree`` is the run's worktree (moved, its admin
dir renamed ``frozen-<dir>`` so the slot's name is free again, and locked, so
``prune`` and ``gc`` in the persistent checkout respect it) or its throwaway
clone (renamed).
``manifest.json`` beside it says what it is. Only an explicit
``discard_evidence`` (after a human unfreezes the repo) deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from pipeline.core.errors import FatalError
from pipeline.core.files import remove_tree
from pipeline.core.masking import mask_data
from pipeline.git.mirror import checkout_repo
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.workspace.prepared import PreparedWorkspace

MANIFEST = "manifest.json"
TREE = "worktree"


def new_evidence_dir(frozen_root: Path, run_id: int) -> Path:
    """``frozen/<run-id>`` (or ``<run-id>-N`` if that run was frozen before), created."""
    base = frozen_root / str(int(run_id))
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{int(run_id)}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def freeze_tree(tree: GitRepo, *, strategy: str, target: Path, run_id: int) -> None:
    """Move a run's tree to ``target`` so nothing will clean it up.

    A worktree is moved and locked by hand rather than by ``git worktree move`` and
    ``lock``: its agent could write the admin dir and the one beside it, and what it
    left there (a ``locked`` or ``modules`` entry, a second registration of the same
    tree, a directory under the kept tree's admin name) made git refuse, or pick the
    wrong entry, and the human lost the evidence.
    """
    if strategy == "clone":
        tree.where.rename(target)
        return
    tree.reclaim()  # a ``worktrees`` link of the agent's must not take what follows elsewhere
    admin = tree.git_dir.with_name(f"frozen-{target.parent.name}")
    remove_tree(admin)  # ``target``'s name is new, so no kept tree owns this one: planted
    tree.where.rename(target)
    tree.git_dir.rename(admin)
    frozen = GitRepo(admin, tree.common_dir, target, config_source=tree.config_source)
    frozen.reclaim()  # the admin dir's gitdir and the tree's .git name each other again
    _let_go_of_branch(GitRunner(frozen))
    remove_tree(admin / "locked")
    (admin / "locked").write_text(f"frozen evidence of run {run_id}\n", encoding="utf-8")


def _let_go_of_branch(in_tree: GitRunner) -> None:
    """Detach the kept tree's HEAD at its commit (files and index untouched).

    A branch checked out in one worktree cannot be checked out in another: a run
    retried after its tree was kept (the daemon died, or the history refused the
    escalation, before the ending was recorded) could never make its tree again.
    The manifest names the branch; the tree's HEAD keeps the commit from ``gc``.
    """
    head = in_tree.ok("rev-parse", "--verify", "HEAD").strip()
    in_tree.ok("update-ref", "--no-deref", "-m", "frozen evidence", "HEAD", head)


def run_manifest(
    ws: PreparedWorkspace, *, run_id: int, repo: str, reason: str, head_sha: str
) -> dict[str, object]:
    """What ``manifest.json`` says about the run whose tree ``ws`` is frozen."""
    return {
        "run_id": run_id,
        "repo": repo,
        "reason": reason,
        "strategy": ws.strategy,
        "branch": ws.branch,
        "base_sha": ws.base_sha,
        "head_sha": head_sha,
        "original_path": str(ws.path),
        "checkout": str(ws.path.parent.parent / "checkout"),
    }


def write_manifest(evidence: Path, fields: Mapping[str, object]) -> None:
    """Write ``manifest.json`` with ``fields`` plus the freezing time, secrets masked."""
    manifest = {
        **fields,
        "frozen_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "worktree": TREE,
    }
    text = json.dumps(mask_data(manifest), indent=2, default=str)
    (evidence / MANIFEST).write_text(text + "\n", encoding="utf-8")


def discard_evidence(frozen_root: Path, evidence: Path) -> None:
    """Delete one frozen run's evidence, unregistering its worktree from the checkout."""
    resolved = evidence.resolve()
    if resolved.parent != frozen_root.resolve() or not (resolved / MANIFEST).is_file():
        raise FatalError(
            "evidence", f"{evidence} is not a frozen run's evidence directory under {frozen_root}"
        )
    tree = resolved / TREE
    manifest = json.loads((resolved / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("strategy") != "clone":  # a worktree: unlock and unregister it first
        checkout = Path(
            manifest.get("checkout") or Path(manifest["original_path"]).parent.parent / "checkout"
        )
        git = GitRunner(checkout_repo(checkout.parent))
        git.run("worktree", "unlock", str(tree))
        git.run("worktree", "remove", "--force", "--force", str(tree))
    remove_tree(resolved)
