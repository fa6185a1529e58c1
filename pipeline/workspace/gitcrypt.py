"""The ``clone`` workspace strategy, for git-crypt repos.

Editing git-crypt files from a worktree of a shared checkout is unsafe (the
unlock state and filters live in the common git dir), so such repos get a
throwaway ``git clone --local`` of the persistent checkout (objects are hard
links, so it is cheap), its ``origin`` pointed at the real remote, unlocked
with the repo's key file. The clone always lives at the same path so that
dependency directories put aside after one run (``kept/``) still work when
moved back for the next.

The whole clone is the agent's to write, its config included; the daemon keeps
its own copy (``<repo_dir>/clone.gitconfig``, taken right after the unlock, so
git-crypt's filters are in it) and restores it before each of its commands.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.core.files import remove_tree
from pipeline.core.proc import StopToken
from pipeline.git.mirror import Mirror
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner

CLONE_CONFIG = "clone.gitconfig"


def git_crypt_key_path(repo: RepoSettings) -> Path | None:
    """The key file for ``repo``: ``git_crypt_key.file``, or the path held in ``.env``."""
    ref = repo.git_crypt_key
    if ref.file is not None:
        return ref.file
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise FatalError(
                "config",
                f"repos.{repo.name}.git_crypt_key: environment "
                f"variable {ref.env} (the key file's path) is not set",
            )
        return Path(value)
    return None


def prepare_clone(
    mirror: Mirror, path: Path, branch: str, base_sha: str, stop: StopToken | None
) -> GitRepo:
    """A fresh clone at ``path`` on ``branch`` at ``base_sha``, unlocked, deps restored."""
    repo, repo_dir = mirror.repo, path.parent.parent
    kept = repo_dir / "kept"
    if path.exists():
        save_kept(path, kept, repo.keep_dirs)
        remove_tree(path)
    checkout = mirror.checkout()
    assert checkout.config_source is not None  # prepare_checkout wrote it
    config = repo_dir / CLONE_CONFIG
    shutil.copyfile(checkout.config_source, config)
    GitRunner(None, stop, mirror.limits, cwd=path.parent).ok(
        "clone", "--local", "--no-checkout", "--quiet", str(checkout.common_dir), str(path)
    )
    clone = GitRepo.plain(path, config_source=config)
    try:
        git = GitRunner(clone, stop, mirror.limits)
        _point_at_base(git, repo, branch, base_sha)
        unlock_git_crypt(git, repo)
        shutil.copyfile(clone.common_dir / "config", config)  # now with git-crypt's filters
    except BaseException:
        remove_tree(path)
        raise
    restore_kept(kept, path, repo.keep_dirs)
    return clone


def _point_at_base(git: GitRunner, repo: RepoSettings, branch: str, base_sha: str) -> None:
    """Origin is the real remote (the daemon's config says so); only origin/<default> is known."""
    stale = git.ok("for-each-ref", "--format=delete %(refname)", "refs/remotes/origin")
    if stale.strip():
        git.ok("update-ref", "--no-deref", "--stdin", input_data=stale.encode())
    default_ref = f"refs/remotes/origin/{repo.default_branch}"
    git.ok("update-ref", default_ref, base_sha)
    git.ok("symbolic-ref", "refs/remotes/origin/HEAD", default_ref)
    git.ok("checkout", "--quiet", "-B", branch, base_sha)
    if branch != repo.default_branch:  # the clone's own default branch is stale otherwise
        git.ok("branch", "--quiet", "--force", "--no-track", repo.default_branch, base_sha)


def unlock_git_crypt(git: GitRunner, repo: RepoSettings) -> None:
    """``git-crypt unlock <keyfile>`` in the clone, when the repo has a key."""
    key = git_crypt_key_path(repo)
    if key is None:
        return
    if not key.is_file():
        raise FatalError(
            "config", f"repos.{repo.name}.git_crypt_key: key file {key} does not exist"
        )
    if shutil.which("git-crypt") is None:
        raise FatalError(
            "git_crypt",
            f"repo {repo.name} needs git-crypt, which is not "
            "installed (Debian/Ubuntu: apt-get install git-crypt)",
        )
    result = git.tool("git-crypt", "unlock", str(key))
    if not result.ok:
        raise FatalError("git_crypt", git.failure(result))


def _kept_paths(keep_dirs: Iterable[str]) -> list[str]:
    return [k.strip("/") for k in keep_dirs if k.strip("/") and ".." not in Path(k).parts]


def save_kept(root: Path, kept: Path, keep_dirs: Iterable[str]) -> None:
    """Move the tree's dependency dirs aside to ``kept/`` for the next run.

    Only a real directory inside ``root`` moves: a symlink the agent planted on its
    way (``vendor`` of ``vendor/bundle``) would have the daemon move a directory
    from anywhere on the volume into the next run's tree.
    """
    for keep in _kept_paths(keep_dirs):
        source = _real_path(root, keep)
        if source is not None and source.is_dir():
            target = kept / keep
            if target.exists():
                remove_tree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)


def restore_kept(kept: Path, root: Path, keep_dirs: Iterable[str]) -> None:
    """Move dependency dirs saved by ``save_kept`` back into a fresh tree.

    Not through a symlink the tree holds (a committed ``vendor`` link): the
    directory stays in ``kept/`` rather than land outside the tree.
    """
    for keep in _kept_paths(keep_dirs):
        source = kept / keep
        target = _real_path(root, keep)
        if source.is_dir() and target is not None and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)


def _real_path(root: Path, relative: str) -> Path | None:
    """``root / relative`` when nothing on the way below ``root`` is a symlink or a
    file (parts that do not exist yet are fine); None otherwise.

    Called only while nothing of the agent runs (its sandbox is gone), so the
    answer still holds when the caller moves the directory.
    """
    path = root
    for part in Path(relative).parts:
        path = path / part
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            return None
    return path
