"""Frozen evidence: a run's tree kept as it was, with a manifest, outside housekeeping.

``<volume>/frozen/<run-id>/worktree`` is the run's worktree (moved with
``git worktree move`` and ``git worktree lock``ed, so ``prune`` and ``gc`` in
the persistent checkout respect it) or its throwaway clone (renamed).
``manifest.json`` beside it says what it is. Only an explicit
``discard_evidence`` (after a human unfreezes the repo) deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from pipeline.errors import FatalError
from pipeline.gitutil import git
from pipeline.housekeeping import remove_tree
from pipeline.masking import mask_data

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


def freeze_tree(tree: Path, *, strategy: str, checkout: Path, target: Path, run_id: int) -> None:
    """Move a run's tree to ``target`` so nothing will clean it up."""
    if strategy == "clone":
        tree.rename(target)
        return
    git(["worktree", "move", str(tree), str(target)], cwd=checkout)
    git(["worktree", "lock", "--reason", f"frozen evidence of run {run_id}", str(target)],
        cwd=checkout)


def write_manifest(evidence: Path, fields: Mapping[str, object]) -> None:
    """Write ``manifest.json`` with ``fields`` plus the freezing time, secrets masked."""
    manifest = {**fields, "frozen_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "worktree": TREE}
    text = json.dumps(mask_data(manifest), indent=2, default=str)
    (evidence / MANIFEST).write_text(text + "\n", encoding="utf-8")


def discard_evidence(frozen_root: Path, evidence: Path) -> None:
    """Delete one frozen run's evidence, unregistering its worktree from the checkout."""
    resolved = evidence.resolve()
    if resolved.parent != frozen_root.resolve() or not (resolved / MANIFEST).is_file():
        raise FatalError("evidence", f"{evidence} is not a frozen run's evidence directory "
                         f"under {frozen_root}")
    tree = resolved / TREE
    if (tree / ".git").is_file():  # a worktree: unlock and unregister it first
        git(["worktree", "unlock", str(tree)], cwd=tree)
        git(["worktree", "remove", "--force", "--force", str(tree)], cwd=tree)
    remove_tree(resolved)
