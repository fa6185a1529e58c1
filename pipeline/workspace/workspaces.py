"""Workspaces on the volume: persistent checkouts, warm worktree slots, caches, evidence.

Layout (``docs/adr/0004-warm-worktree-slots.md`` and ``0010-daemon-owned-git-mirror.md``
say why)::

    <volume>/repos/<forge>/<owner>/<name>/mirror.git   daemon-owned bare mirror, fetch debounced
    <volume>/repos/<forge>/<owner>/<name>/checkout     persistent checkout, fed from the mirror
    <volume>/repos/<forge>/<owner>/<name>/worktrees/   slot-0 (reused worktree) or clone
    <volume>/repos/<forge>/<owner>/<name>/kept/        dependency dirs between clone runs
    <volume>/cache/repos/<name>/<tool>                 the repo's package caches (ADR 0037)
    <volume>/frozen/<run-id>/                          evidence, never touched again

A run gets the repo's reusable worktree slot cleaned (``git clean -ffdx -e
<keep_dir>``, first, before anything needs disk space), then reset to
``origin/<default>`` (``git checkout -f -B``, which also drops staged and unmerged
entries and a stopped merge or cherry-pick; a stopped rebase goes beforehand) and
cleaned again: the previous run's edits are gone, its ``.venv``/``node_modules`` stay. Only the
mirror talks to the remote, with the repo's credentials; every git command in
the checkout or a slot is pinned to daemon-known paths (``pipeline.git.run``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path

from pipeline.config.settings import RepoSettings, WorkspaceSettings
from pipeline.core.errors import FatalError
from pipeline.core.events import EventSink
from pipeline.core.files import remove_tree
from pipeline.core.proc import StopToken
from pipeline.git.mirror import MIRROR, Mirror, checkout_repo
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitLimits, GitRunner
from pipeline.git.util import DiskFull, branch_name, is_enospc, relative_inside, safe_component
from pipeline.sandbox.jail import Jail, Jailer
from pipeline.workspace.evidence import (
    TREE,
    discard_evidence,
    freeze_tree,
    new_evidence_dir,
    run_manifest,
    write_manifest,
)
from pipeline.workspace.gitcrypt import prepare_clone, save_kept
from pipeline.workspace.housekeeping import (
    HousekeepingReport,
    check_volume,
    evict_volume,
    tidy_repo,
)
from pipeline.workspace.locks import RepoLocks
from pipeline.workspace.prepared import (
    CACHE_DIRS,
    STRATEGIES,
    PreparedWorkspace,
    cache_env,
    check_strategy,
    repo_cache_root,
)
from pipeline.workspace.repair import reset_or_rebuild, sound_checkout
from pipeline.workspace.runtrees import CLONE, clear_leftovers, free_slot, stop_stragglers
from pipeline.workspace.setup import copy_files, run_setup
from pipeline.workspace.slots import SLOT_PREFIX, clean_slot, registered

__all__ = ["CACHE_DIRS", "STRATEGIES", "PreparedWorkspace", "Workspaces"]

log = logging.getLogger(__name__)


class Workspaces:
    """Checkouts, worktrees and caches of every repo on one volume."""

    def __init__(
        self,
        volume: Path,
        settings: WorkspaceSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        jailer: Jailer | None = None,
        git_limits: GitLimits | None = None,
    ) -> None:
        self.volume = check_volume(volume)
        self.jailer = jailer
        self.settings = settings
        self.git_limits = git_limits or GitLimits.configured(settings)
        self._clock = clock
        self.repos_root = self.volume / "repos"
        self.cache_root = self.volume / "cache"
        self.frozen_root = self.volume / "frozen"
        for directory in (self.repos_root, self.cache_root, self.frozen_root):
            directory.mkdir(exist_ok=True)
        self.fetches: dict[str, int] = {}  # repo name -> clones + fetches done
        self._last_fetch: dict[str, float] = {}
        self._locks = RepoLocks()
        self._busy: set[Path] = set()
        self.last_eviction: HousekeepingReport | None = None

    # -- layout -------------------------------------------------------------

    def repo_dir(self, repo: RepoSettings) -> Path:
        """``<volume>/repos/<forge>/<owner>/<name>``, every part sanitised (``acme/x``: hashed)."""
        parts = [p for p in repo.slug.strip("/").split("/") if p]
        name = parts[-1] if parts else repo.name
        owner = "/".join(parts[:-1]) or "_"
        return (
            self.repos_root
            / safe_component(repo.tracker)
            / safe_component(owner)
            / safe_component(name)
        )

    def cache_env(self, repo: RepoSettings) -> dict[str, str]:
        """Variables pointing every package manager's cache into ``repo``'s cache root."""
        return cache_env(repo_cache_root(self.cache_root, repo, self.settings.cache_scope))

    # -- checkout -----------------------------------------------------------

    def fetch_count(self, repo: RepoSettings) -> int:
        """Clones plus fetches done for ``repo`` by this instance."""
        return self.fetches.get(repo.name, 0)

    def mirror(self, repo: RepoSettings) -> Mirror:
        """The repo's daemon-owned mirror (it may not exist yet)."""
        return Mirror(self.repo_dir(repo) / MIRROR, repo, self.git_limits)

    def ensure_checkout(self, repo: RepoSettings, *, stop: StopToken | None = None) -> Path:
        """The repo's persistent checkout, fed from a mirror fetched at most once per debounce."""
        repo_dir = self.repo_dir(repo)
        with self._locks.hold(repo_dir):
            return self._ensure_checkout_locked(repo, stop).common_dir.parent

    def _ensure_checkout_locked(
        self, repo: RepoSettings, stop: StopToken | None, events: EventSink | None = None
    ) -> GitRepo:
        mirror = self.mirror(repo)
        if not mirror.exists():
            mirror.create(stop)
            self._fetched(repo)
        elif self._fetch_due(repo):
            mirror.fetch(stop)
            self._fetched(repo)
        return sound_checkout(mirror, events, stop)  # rebuilt if the agent damaged it

    def _fetch_due(self, repo: RepoSettings) -> bool:
        last = self._last_fetch.get(repo.name)
        return last is None or self._clock() - last >= self.settings.fetch_debounce_s

    def _fetched(self, repo: RepoSettings) -> None:
        self._last_fetch[repo.name] = self._clock()
        self.fetches[repo.name] = self.fetches.get(repo.name, 0) + 1

    # -- prepare ------------------------------------------------------------

    def prepare(
        self,
        repo: RepoSettings,
        *,
        run_id: int,
        issue_ref: str,
        base_env: Mapping[str, str],
        events: EventSink,
        stop: StopToken | None = None,
    ) -> PreparedWorkspace:
        """A clean, warm worktree for one run on ``afk/<issue>-<run>``, set up."""
        started = time.monotonic()
        check_strategy(repo)
        branch = branch_name(issue_ref, run_id)
        try:
            tree, base_sha = self._checkout_run_tree(repo, branch, stop, events)
            try:
                ws = self._set_up(repo, tree, (branch, base_sha), base_env, events, stop)
            except BaseException:
                self._abandon(repo, tree.where)
                raise
        except DiskFull as exc:
            raise self.disk_full(str(exc), events) from exc
        except OSError as exc:
            if is_enospc(exc):
                raise self.disk_full(f"no space left on device: {exc}", events) from exc
            raise
        prepare_s = time.monotonic() - started
        events(
            "setup",
            f"workspace ready on {branch} at {base_sha[:12]}",
            {
                "strategy": ws.strategy,
                "base_sha": base_sha,
                "setup_s": round(ws.setup_s, 3),
                "prepare_s": round(prepare_s, 3),
                "path": str(ws.path),
            },
        )
        return replace(ws, prepare_s=prepare_s)

    def _set_up(
        self,
        repo: RepoSettings,
        tree: GitRepo,
        target: tuple[str, str],
        base_env: Mapping[str, str],
        events: EventSink,
        stop: StopToken | None,
    ) -> PreparedWorkspace:
        """Run the repo's setup in its fresh tree (on ``target``: branch, base SHA)."""
        branch, base_sha = target
        workdir = self._workdir(repo, tree.where, base_sha)
        env = self.cache_env(repo)
        jail = self._jail(repo, tree.where, env, base_env)
        setup_s = run_setup(repo, workdir, jail, events, stop)
        return PreparedWorkspace(
            repo=repo.name,
            path=tree.where,
            workdir=workdir,
            branch=branch,
            base_sha=base_sha,
            env=env,
            setup_s=setup_s,
            strategy=repo.workspace,
            git=tree,
            mirror=self.mirror(repo).path,
            keep_dirs=repo.keep_dirs,
            jail=jail,
        )

    def _jail(
        self,
        repo: RepoSettings,
        tree: Path,
        cache_env: Mapping[str, str],
        base_env: Mapping[str, str],
    ) -> Jail:
        """The run's sandbox (unconfined when no jailer was given: tools and tests)."""
        if self.jailer is not None:
            return self.jailer.jail(repo, tree, cache_env)
        home = self.volume / "homes" / safe_component(repo.name)
        home.mkdir(parents=True, exist_ok=True)
        return Jail.unconfined(tree, base_env, home, cache_env)

    @staticmethod
    def _workdir(repo: RepoSettings, path: Path, base_sha: str) -> Path:
        workdir = relative_inside(path, repo.workdir, what=f"repos.{repo.name}.workdir")
        if not workdir.is_dir():
            raise FatalError(
                "config",
                f"repos.{repo.name}.workdir {repo.workdir!r} "
                f"does not exist at {base_sha[:12]} of {repo.slug}",
            )
        return workdir

    def _abandon(self, repo: RepoSettings, path: Path) -> None:
        """Free a tree whose preparation failed; a clone (maybe decrypted) is deleted."""
        with self._locks.hold(path.parent.parent):
            self._drop_tree(repo, path)

    def _drop_tree(self, repo: RepoSettings, path: Path) -> None:
        self._busy.discard(path)
        if repo.workspace == "clone" and path.exists():
            save_kept(path, path.parent.parent / "kept", repo.keep_dirs)
            remove_tree(path)

    def _checkout_run_tree(
        self, repo: RepoSettings, branch: str, stop: StopToken | None, events: EventSink
    ) -> tuple[GitRepo, str]:
        repo_dir = self.repo_dir(repo)
        with self._locks.hold(repo_dir):
            worktrees = repo_dir / "worktrees"
            worktrees.mkdir(exist_ok=True)
            stop_stragglers(repo, worktrees)
            checkout_repo(repo_dir).reclaim()  # no link of the agent's steers what follows
            clone = repo.workspace == "clone"
            path = worktrees / CLONE if clone else free_slot(worktrees, self._busy)
            clear_leftovers(repo, path, self.git_limits, events)  # before a fetch needs room
            checkout = self._ensure_checkout_locked(repo, stop, events)
            base_sha = self._base_sha(repo)
            if clone:
                tree = prepare_clone(self.mirror(repo), path, branch, base_sha, stop)
            else:
                runner = GitRunner(checkout, stop, self.git_limits)
                tree = reset_or_rebuild(self.mirror(repo), path, (branch, base_sha), runner, events)
            try:
                copy_files(repo, tree)
            except BaseException:
                self._drop_tree(repo, tree.where)
                raise
            self._busy.add(tree.where)
        return tree, base_sha

    def _base_sha(self, repo: RepoSettings) -> str:
        base_sha = self.mirror(repo).sha(f"refs/heads/{repo.default_branch}")
        if base_sha is None:
            raise FatalError(
                "git",
                f"repo {repo.name}: the remote has no branch "
                f"{repo.default_branch!r} (repos.{repo.name}.default_branch)",
            )
        return base_sha

    def disk_full(self, detail: str, events: EventSink) -> DiskFull:
        """Evict caches now and return the retryable ``disk_full`` error to raise.

        For any step of a run that hits ENOSPC (setup here; agent or tests in
        the caller): the message says where, and what eviction freed.
        """
        report = self.evict()
        message = (
            f"{detail} (volume {self.volume}); evicted {len(report.evicted)} cache "
            f"entries ({report.evicted_bytes} bytes); the run will be retried"
        )
        events("setup", "disk full: " + message, {"evicted_bytes": report.evicted_bytes})
        return DiskFull(message)

    # -- after the run ------------------------------------------------------

    def release(self, ws: PreparedWorkspace, *, succeeded: bool) -> None:
        """Free the run's tree; on success also delete its branch.

        A slot stays on disk (it is the next run's warm start); a throwaway
        clone is deleted after its dependency dirs are put aside.
        """
        repo_dir = ws.path.parent.parent
        with self._locks.hold(repo_dir):
            self._busy.discard(ws.path)
            if ws.strategy == "clone":
                save_kept(ws.path, repo_dir / "kept", ws.keep_dirs)
                remove_tree(ws.path)
                return
            if not registered(ws.git):
                return
            runner = GitRunner(ws.git, None, self.git_limits)
            if not succeeded:  # what it left goes now: space back, even on a full disk
                clean_slot(runner, ws.keep_dirs)
            # --force: an index the run left unmerged must not fail the release (and hide
            # the run's own outcome); the next prepare resets the tree anyway.
            runner.ok("checkout", "--force", "--quiet", "--detach")
            if succeeded:
                GitRunner(checkout_repo(repo_dir), None, self.git_limits).ok(
                    "branch", "-D", "--quiet", ws.branch
                )

    def keep_evidence(
        self,
        ws: PreparedWorkspace,
        *,
        run_id: int,
        repo: str,
        reason: str,
        head_sha: str | None,
        extra: Mapping[str, object] | None = None,
    ) -> Path:
        """Move the run's tree to ``<volume>/frozen/<run-id>/worktree`` with a manifest."""
        repo_dir = ws.path.parent.parent
        evidence = new_evidence_dir(self.frozen_root, run_id)
        with self._locks.hold(repo_dir):
            self._busy.discard(ws.path)
            if head_sha is None:
                head_sha = GitRunner(ws.git).ok("rev-parse", "HEAD").strip()
            freeze_tree(ws.git, strategy=ws.strategy, target=evidence / TREE, run_id=run_id)
        fields = run_manifest(ws, run_id=run_id, repo=repo, reason=reason, head_sha=head_sha)
        write_manifest(evidence, {**fields, "extra": dict(extra or {})})
        return evidence

    def discard_evidence(self, evidence: Path) -> None:
        """Delete frozen evidence (after a human unfroze the repo); nothing else does."""
        discard_evidence(self.frozen_root, evidence)

    # -- housekeeping -------------------------------------------------------

    def housekeeping(self, active_paths: Collection[Path]) -> HousekeepingReport:
        """Prune, gc, drop orphaned run trees, then evict caches if over the watermark."""
        active = {p.resolve() for p in active_paths} | {p.resolve() for p in self._busy}
        report = HousekeepingReport()
        for checkout in sorted(self.repos_root.glob("*/*/*/checkout")):
            repo_dir = checkout.parent
            gits = [GitRunner(checkout_repo(repo_dir), None, self.git_limits)]
            if (repo_dir / MIRROR).is_dir():
                gits.append(GitRunner(GitRepo.mirror(repo_dir / MIRROR), None, self.git_limits))
            try:
                with self._locks.hold(repo_dir):
                    tidy_repo(repo_dir, active, report, keep_prefix=SLOT_PREFIX, gits=gits)
            except (FatalError, OSError) as exc:
                report.errors.append(f"{checkout.parent}: {exc}")
        self.evict(report, protected=active)
        return report

    def evict(
        self, report: HousekeepingReport | None = None, *, protected: Collection[Path] = ()
    ) -> HousekeepingReport:
        """Evict package caches, oldest first, from the high down to the low watermark."""
        report = evict_volume(
            self.volume, self.cache_root, self.settings, report or HousekeepingReport(), protected
        )
        self.last_eviction = report
        return report
