"""What a run gets from ``Workspaces.prepare``: its tree, branch, base and environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError
from pipeline.git.repo import GitRepo
from pipeline.git.util import safe_component
from pipeline.sandbox.jail import Jail

# Environment variable -> directory under a cache root: <volume>/cache/repos/<repo>
# (``[workspace] cache_scope = "repo"``, the default) or <volume>/cache ("shared").
CACHE_DIRS: tuple[tuple[str, str], ...] = (
    ("PIP_CACHE_DIR", "pip"),
    ("UV_CACHE_DIR", "uv"),
    ("npm_config_cache", "npm"),
    ("npm_config_store_dir", "pnpm-store"),
    ("PNPM_STORE_DIR", "pnpm-store"),
    ("YARN_CACHE_FOLDER", "yarn"),
    ("CARGO_HOME", "cargo"),
    ("GOMODCACHE", "go-mod"),
    ("GOCACHE", "go-build"),
    ("GRADLE_USER_HOME", "gradle"),
)
REPO_CACHES = "repos"  # <volume>/cache/repos/<repo>: one repository's caches
STRATEGIES = ("worktree", "clone")


@dataclass(frozen=True)
class PreparedWorkspace:
    """A worktree ready for the agent: on ``branch`` at ``base_sha``, set up."""

    repo: str
    path: Path  # the worktree (or clone) root
    workdir: Path  # where the agent and tests run: path / repo.workdir
    branch: str
    base_sha: str
    env: dict[str, str]  # the cache environment for agent, setup and test processes
    setup_s: float
    strategy: str  # worktree | clone
    git: GitRepo  # the tree's repository, pinned: how the daemon runs git in it
    mirror: Path  # the repo's daemon-owned mirror: find_pushed and publish use it
    prepare_s: float = 0.0
    keep_dirs: tuple[str, ...] = ()
    jail: Jail | None = None  # runs the agent, setup and tests confined to this tree


def cache_env(cache_root: Path) -> dict[str, str]:
    """Variables pointing every package manager's cache under ``cache_root``."""
    env: dict[str, str] = {}
    for variable, directory in CACHE_DIRS:
        path = cache_root / directory
        path.mkdir(parents=True, exist_ok=True)
        env[variable] = str(path)
    return env


def repo_cache_root(cache_root: Path, repo: RepoSettings, scope: str) -> Path:
    """Where ``repo``'s package caches live under ``cache_root``: its own directory
    (``scope`` ``repo``), or ``cache_root`` itself, shared by every repo (``shared``)."""
    if scope == "shared":
        return cache_root
    return cache_root / REPO_CACHES / safe_component(repo.name)


def check_strategy(repo: RepoSettings) -> None:
    """Refuse a workspace strategy this module does not know."""
    if repo.workspace not in STRATEGIES:
        raise FatalError(
            "config",
            f"repos.{repo.name}.workspace {repo.workspace!r}: "
            f"must be one of {', '.join(STRATEGIES)}",
        )
