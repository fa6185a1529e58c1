"""Warm worktree slots: reset in place for the next run, or rebuilt when broken.

A slot is ``<repo_dir>/worktrees/slot-N``, a worktree of the persistent
checkout whose admin dir is ``checkout/.git/worktrees/slot-N``. The daemon runs
git in a slot only through that admin dir (``GitRepo.worktree``), never through
the slot's ``.git`` file, which the agent can rewrite.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError, RetryableError
from pipeline.core.files import remove_tree
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.git.util import unquoted
from pipeline.workspace.gitcrypt import restore_kept, save_kept

SLOT_PREFIX = "slot-"
# Per-worktree state of a stopped rebase, am, cherry-pick or revert sequence, or a bisect.
STOPPED_OPERATIONS = (
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "REBASE_HEAD",
    "refs/bisect",
    "BISECT_START",
    "BISECT_LOG",
    "BISECT_TERMS",
    "BISECT_NAMES",
    "BISECT_EXPECTED_REV",
    "BISECT_ANCESTORS_OK",
    "BISECT_RUN",
    "BISECT_HEAD",
)


def reset_slot(
    checkout: GitRepo,
    slot: Path,
    repo: RepoSettings,
    target: tuple[str, str],
    in_checkout: GitRunner,
) -> GitRepo:
    """``slot`` on ``target`` (branch, SHA): reset in place, or rebuilt when broken.

    ``in_checkout`` runs git in ``checkout`` (with the run's stop token and limits).
    """
    branch, base_sha = target
    tree = slot_tree(checkout, slot)
    run = GitRunner(tree, in_checkout.stop, in_checkout.limits)
    if registered(tree):
        try:
            _reset_in_place(run, tree, repo.keep_dirs, target)
            return tree
        except FatalError:
            pass  # a broken slot (e.g. its registration was pruned): rebuild it below
        except RetryableError as exc:
            if exc.kind != "git_timeout":
                raise
            # git hung in the slot (on something left in it): a new slot, not this one again
    kept = slot.parent.parent / "kept"
    if slot.exists():
        save_kept(slot, kept, repo.keep_dirs)
        remove_tree(slot)
    _make_room(tree.git_dir)
    in_checkout.ok("worktree", "prune")
    in_checkout.ok("worktree", "add", "--quiet", "--force", "-B", branch, str(slot), base_sha)
    if not registered(tree):
        raise FatalError(
            "git",
            f"git worktree add did not register {slot} as "
            f"{tree.git_dir}; the checkout's worktrees need a look",
        )
    restore_kept(kept, slot, repo.keep_dirs)
    return tree


def _reset_in_place(
    run: GitRunner, tree: GitRepo, keep_dirs: Sequence[str], target: tuple[str, str]
) -> None:
    """Put a registered slot on ``target`` (branch, SHA) with only ``keep_dirs`` left over."""
    # Clean first: deleting needs no space, so a full disk has room for the
    # checkout. ``checkout --force`` resets index and tree (unmerged entries and
    # a stopped merge or cherry-pick too): no ``reset --hard`` is needed.
    clean_slot(run, keep_dirs)
    drop_stopped_operations(tree)
    run.ok("checkout", "--force", "--quiet", "-B", *target)
    clean_slot(run, keep_dirs)


def drop_stopped_operations(tree: GitRepo) -> None:
    """Forget a rebase, ``am``, multi-commit cherry-pick/revert or bisect a run left stopped.

    ``checkout`` keeps their state in the slot's admin dir; the next run's own
    rebase (publish) or cherry-pick would otherwise refuse to start, or resume it,
    and its agent would find itself told it is bisecting.
    """
    for name in STOPPED_OPERATIONS:
        remove_tree(tree.git_dir / name)


def clean_slot(run: GitRunner, keep_dirs: Sequence[str]) -> list[str]:
    """Remove the untracked and ignored files of a slot, ``keep_dirs`` excepted.

    Works on a full disk (it only deletes). Returns the paths removed, as they are named
    (git quotes a name with a control character, a quote or a non-ASCII byte in it).
    """
    excludes = [arg for keep in keep_dirs for arg in ("-e", keep_pattern(keep))]
    result = run.run("clean", "-ffdx", *excludes)
    if not result.ok:
        raise FatalError("git", run.failure(result))
    prefix = "Removing "
    lines = result.stdout.splitlines()
    return [unquoted(line[len(prefix) :]) for line in lines if line.startswith(prefix)]


def slot_tree(checkout: GitRepo, slot: Path) -> GitRepo:
    """The pinned repository of worktree ``slot`` of ``checkout``."""
    return GitRepo.worktree(checkout.common_dir.parent, slot, checkout.config_source)


def registered(tree: GitRepo) -> bool:
    """True when ``tree``'s admin dir is the live, unlocked registration of its work tree."""
    gitdir = tree.git_dir / "gitdir"
    if tree.work_tree is None or not tree.work_tree.is_dir() or not gitdir.is_file():
        return False
    if (tree.git_dir / "locked").exists():
        return False
    recorded = Path(gitdir.read_text(encoding="utf-8", errors="replace").strip())
    return recorded.resolve() == (tree.work_tree / ".git").resolve()


def _make_room(admin: Path) -> None:
    """Free a slot's admin dir name: a broken registration goes, frozen evidence moves aside.

    Evidence frozen before ADR 0010 kept its slot's admin dir name; it is renamed,
    and its worktree's ``.git`` file (found from the admin dir, so written only
    if it really points at this admin dir) is pointed at the new name.
    """
    if not admin.is_dir() or admin.is_symlink():
        if admin.exists() or admin.is_symlink():
            admin.unlink()
        return
    gitfile = _registered_path(admin)
    frozen = gitfile is not None and (gitfile.parent.parent / "manifest.json").is_file()
    if not (admin / "locked").exists() or not frozen or gitfile is None:
        remove_tree(admin)
        return
    aside = admin.with_name(f"frozen-{admin.name}-{time.time_ns()}")
    admin.rename(aside)
    if gitfile.read_text(encoding="utf-8", errors="replace").strip() == f"gitdir: {admin}":
        gitfile.write_text(f"gitdir: {aside}\n", encoding="utf-8")


def _registered_path(admin: Path) -> Path | None:
    """The worktree ``.git`` file an admin dir says it belongs to, if it is a plain file."""
    try:
        path = Path((admin / "gitdir").read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return None
    return path if path.is_file() and not path.is_symlink() else None


def keep_pattern(keep_dir: str) -> str:
    """A ``git clean -e`` pattern: bare names match at any depth, paths from the root."""
    keep = keep_dir.strip("/")
    return f"/{keep}/" if "/" in keep else f"{keep}/"
