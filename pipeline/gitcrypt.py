"""The ``clone`` workspace strategy, for git-crypt repos.

Editing git-crypt files from a worktree of a shared checkout is unsafe (the
unlock state and filters live in the common git dir), so such repos get a
throwaway ``git clone --local`` of the persistent checkout (objects are hard
links, so it is cheap), its ``origin`` pointed at the real remote, unlocked
with the repo's key file. The clone always lives at the same path so that
dependency directories put aside after one run (``kept/``) still work when
moved back for the next.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from pipeline.errors import FatalError
from pipeline.gitutil import git, run_tool
from pipeline.housekeeping import remove_tree
from pipeline.settings import RepoSettings


def git_crypt_key_path(repo: RepoSettings) -> Path | None:
    """The key file for ``repo``: ``git_crypt_key.file``, or the path held in ``.env``."""
    ref = repo.git_crypt_key
    if ref.file is not None:
        return ref.file
    if ref.env is not None:
        value = os.environ.get(ref.env)
        if not value:
            raise FatalError("config", f"repos.{repo.name}.git_crypt_key: environment "
                             f"variable {ref.env} (the key file's path) is not set")
        return Path(value)
    return None


def prepare_clone(
    checkout: Path, path: Path, repo: RepoSettings, branch: str, base_sha: str, kept: Path
) -> None:
    """A fresh clone at ``path`` on ``branch`` at ``base_sha``, unlocked, deps restored."""
    if path.exists():
        save_kept(path, kept, repo.keep_dirs)
        remove_tree(path)
    git(["clone", "--local", "--no-checkout", "--quiet", str(checkout), str(path)],
        cwd=path.parent)
    try:
        _point_at_base(path, repo, branch, base_sha)
        unlock_git_crypt(path, repo)
    except BaseException:
        remove_tree(path)
        raise
    restore_kept(kept, path, repo.keep_dirs)


def _point_at_base(path: Path, repo: RepoSettings, branch: str, base_sha: str) -> None:
    """Origin is the real remote; only origin/<default> is known, at ``base_sha``."""
    git(["remote", "set-url", "origin", repo.remote_url], cwd=path)
    stale = git(["for-each-ref", "--format=delete %(refname)", "refs/remotes/origin"], cwd=path)
    if stale.strip():
        git(["update-ref", "--no-deref", "--stdin"], cwd=path, input_data=stale.encode())
    default_ref = f"refs/remotes/origin/{repo.default_branch}"
    git(["update-ref", default_ref, base_sha], cwd=path)
    git(["symbolic-ref", "refs/remotes/origin/HEAD", default_ref], cwd=path)
    git(["checkout", "--quiet", "-B", branch, base_sha], cwd=path)
    if branch != repo.default_branch:  # the clone's own default branch is stale otherwise
        git(["branch", "--quiet", "--force", "--no-track", repo.default_branch, base_sha],
            cwd=path)


def unlock_git_crypt(path: Path, repo: RepoSettings) -> None:
    """``git-crypt unlock <keyfile>`` in the clone, when the repo has a key."""
    key = git_crypt_key_path(repo)
    if key is None:
        return
    if not key.is_file():
        raise FatalError("config", f"repos.{repo.name}.git_crypt_key: key file {key} "
                         "does not exist")
    if shutil.which("git-crypt") is None:
        raise FatalError("git_crypt", f"repo {repo.name} needs git-crypt, which is not "
                         "installed (Debian/Ubuntu: apt-get install git-crypt)")
    run_tool(["git-crypt", "unlock", str(key)], cwd=path, kind="git_crypt")


def _kept_paths(keep_dirs: Iterable[str]) -> list[str]:
    return [k.strip("/") for k in keep_dirs if k.strip("/") and ".." not in Path(k).parts]


def save_kept(root: Path, kept: Path, keep_dirs: Iterable[str]) -> None:
    """Move the clone's dependency dirs aside to ``kept/`` for the next run."""
    for keep in _kept_paths(keep_dirs):
        source = root / keep
        if source.is_dir() and not source.is_symlink():
            target = kept / keep
            if target.exists():
                remove_tree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)


def restore_kept(kept: Path, root: Path, keep_dirs: Iterable[str]) -> None:
    """Move dependency dirs saved by ``save_kept`` back into a fresh clone."""
    for keep in _kept_paths(keep_dirs):
        source = kept / keep
        target = root / keep
        if source.is_dir() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)
