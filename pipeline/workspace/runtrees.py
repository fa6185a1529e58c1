"""Picking and clearing a run's tree inside a repo's ``worktrees/`` directory.

Called under the repo lock (``pipeline.workspace.locks``), before anything is
fetched: processes an earlier run left behind are killed, and what that run
left in the slot is deleted, so a disk it filled has room again.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.files import remove_tree
from pipeline.core.printable import shown_names
from pipeline.core.proc import kill_stragglers
from pipeline.git.mirror import checkout_repo
from pipeline.git.run import GitLimits, GitRunner
from pipeline.sandbox.jail import drop_special
from pipeline.workspace.gitcrypt import save_kept
from pipeline.workspace.slots import SLOT_PREFIX, clean_slot, registered, slot_tree

log = logging.getLogger(__name__)
CLONE = "clone"


def stop_stragglers(repo: RepoSettings, worktrees: Path) -> None:
    """Kill processes still running in the repo's trees: an agent orphaned by a killed daemon."""
    stragglers = kill_stragglers(worktrees)
    if stragglers:
        log.warning(
            "%s: killed %d leftover process(es) of an earlier run: %s",
            repo.name,
            len(stragglers),
            stragglers,
        )


def free_slot(worktrees: Path, busy: Collection[Path]) -> Path:
    """The first ``slot-N`` no running run holds."""
    index = 0
    while (worktrees / f"{SLOT_PREFIX}{index}") in busy:
        index += 1
    return worktrees / f"{SLOT_PREFIX}{index}"


def clear_leftovers(
    repo: RepoSettings, tree: Path, limits: GitLimits, events: EventSink
) -> list[str]:
    """Delete what an earlier run left in ``tree`` (a slot, or the clone), before any fetch.

    A slot loses its untracked and ignored files (``keep_dirs`` stay); a leftover
    clone goes (its ``keep_dirs`` put aside), as its next run makes a new one
    anyway. Staging directories of a clone or checkout cut short go too. Says on
    the run's timeline what went: the names are the agent's, a few are shown, each cut
    and escaped. FIFOs, sockets and devices go first, from the slot
    and the kept dependency dirs: the daemon removes them after every command of a run,
    but one a run killed with the daemon left would block the slot's reset for good.
    """
    repo_dir = tree.parent.parent
    for place in (tree, repo_dir / "kept"):
        if place.name != CLONE:
            drop_special(place, events)
    removed = [p.name for p in _staging_leftovers(repo_dir)]
    if tree.name == CLONE:
        if tree.exists():
            save_kept(tree, repo_dir / "kept", repo.keep_dirs)
            remove_tree(tree)
            removed.append(tree.name)
    else:
        removed += _clean_slot(repo, tree, limits)
    if removed:
        events(
            "setup",
            f"removed {len(removed)} path(s) an earlier run left in {tree.name}: "
            f"{shown_names(removed)}",
            {"removed": len(removed)},
        )
    return removed


def _clean_slot(repo: RepoSettings, slot: Path, limits: GitLimits) -> list[str]:
    checkout = checkout_repo(slot.parent.parent)
    tree = slot_tree(checkout, slot)
    if not checkout.common_dir.is_dir() or not registered(tree):
        return []
    try:
        return clean_slot(GitRunner(tree, None, limits), repo.keep_dirs)
    except FatalError as exc:  # a broken slot: reset_slot rebuilds it
        log.info("%s: could not clean %s before reuse: %s", repo.name, slot, exc)
        return []


def _staging_leftovers(repo_dir: Path) -> list[Path]:
    """``mirror.git.tmp-*`` and ``checkout.tmp-*``: a clone cut short (a full disk, a kill)."""
    found = sorted([*repo_dir.glob("mirror.git.tmp-*"), *repo_dir.glob("checkout.tmp-*")])
    for path in found:
        remove_tree(path)
    return found
