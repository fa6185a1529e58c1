"""The composition root: builds every part from settings and runs them together.

One process: migrations, intake (polling under APScheduler and webhooks),
the scheduler and its workers, housekeeping, and the HTTP server. SIGTERM
stops claiming, gives running agents a grace period, then leaves their leases
to recovery by any replica.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.agents import Agent, apply_overrides, build_agent
from pipeline.config.settings import AgentPreset, RepoSettings, Settings, default_data_dir
from pipeline.core.errors import ConfigError
from pipeline.core.masking import redact_url, register_settings_secrets, settings_secret_refs
from pipeline.http.links import link_base
from pipeline.intake.frozen import FrozenWaits
from pipeline.intake.lifecycle import Lifecycle
from pipeline.intake.service import Intake
from pipeline.notify.apprise import Notifier
from pipeline.queue.periodic import Periodic
from pipeline.queue.scheduler import Scheduler
from pipeline.run.budget import DailyBudget
from pipeline.run.endings import Endings
from pipeline.run.flow import FlowDeps, RunFlow
from pipeline.run.progress_final import ProgressFinals
from pipeline.run.recovery import Recovery, unhealed_freeze
from pipeline.sandbox import (
    NetworkPolicy,
    Sandbox,
    SandboxUnavailable,
    agent_network,
    build_sandbox,
)
from pipeline.sandbox.jail import Jailer
from pipeline.store import RetentionPolicy, RunFilter, Store
from pipeline.store.models import BUSY_STATES
from pipeline.trackers import build_tracker
from pipeline.trackers.base import Tracker
from pipeline.trackers.local import LocalTracker
from pipeline.workspace.workspaces import Workspaces

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 30.0
SIGNAL_CHECK_S = 0.5  # how often the main thread looks for a SIGTERM or SIGINT
FINAL_WRITES_S = 10.0  # at a stop, for the progress comments of runs that just ended


def build_trackers(settings: Settings, store: Store) -> dict[str, Tracker]:
    """A client per tracker that an enrolled repo uses, plus the local one."""
    used = {repo.tracker for repo in settings.repos} | {"local"}
    trackers: dict[str, Tracker] = {}
    for tracker in settings.trackers:
        if tracker.name not in used:
            continue
        if tracker.kind == "local":
            names = {r.slug: r.name for r in settings.repos if r.tracker == tracker.name}
            trackers[tracker.name] = LocalTracker(tracker, store, names)
        else:
            trackers[tracker.name] = build_tracker(tracker)
    return trackers


def _open_store(settings: Settings) -> Store:
    """The store with its schema current (migrated unless run_migrations is off), repos synced."""
    store = Store(settings.database_url)
    if settings.run_migrations:
        store.upgrade()
    elif (problem := store.schema_problem()) is not None:
        raise ConfigError(f"{redact_url(settings.database_url)}: {problem} (run_migrations is off)")
    store.sync_repos(settings.repos)
    return store


class Daemon:
    """Every part of the pipeline, wired."""

    def __init__(self, settings: Settings, *, http: bool = True) -> None:
        self.settings = settings
        for warning in register_settings_secrets(settings):
            log.warning("%s", warning)
        self.sandbox = self._sandbox()  # before the database: refuse early, touch nothing
        self.store = _open_store(settings)
        if settings.volume == default_data_dir() / "volume":
            settings.volume.mkdir(parents=True, exist_ok=True)  # embedded default: zero setup
        self.trackers = build_trackers(settings, self.store)
        self.workspaces = self._workspaces()
        self.notifier = Notifier(settings.notify, store=self.store)
        self.http_enabled = http
        self.dashboard_url = f"http://{settings.http.listen_host}:{settings.http.listen_port}"
        self.lifecycle = Lifecycle(
            self.store,
            self.trackers,
            {t.name: t for t in settings.trackers},
            dashboard_url=link_base(settings.http) if http else None,
            stale_s=settings.scheduler.lease_s,
        )
        self.recovery = Recovery(settings, self.store, self.lifecycle)
        self.endings = Endings(settings, self.store, self.lifecycle, self.recovery, self.notifier)
        self.budget = DailyBudget(settings, self.store, self.notifier)
        self.finals = ProgressFinals(settings, self.store, self.trackers)
        self.frozen_waits = FrozenWaits(self.store, settings, self.lifecycle)
        self.flow = self._flow()
        self.scheduler = self._scheduler()
        self.intake = Intake(
            self.store, settings, self.trackers, self.lifecycle, notifier=self.notifier
        )
        self.periodic = Periodic(name="daemon")
        self.server: Any = None
        self._stopped = threading.Event()

    def _workspaces(self) -> Workspaces:
        """The volume's workspaces, running repository commands in the sandbox."""
        jailer = Jailer(
            self.sandbox,
            host_env=dict(os.environ),
            homes_root=self.settings.volume / "homes",
            pass_env=self.settings.sandbox.pass_env,
            network_for=self.repo_network,
        )
        return Workspaces(self.settings.volume, self.settings.workspace, jailer=jailer)

    def _flow(self) -> RunFlow:
        """One run from claim to verdict, wired to the daemon's parts."""
        deps = FlowDeps(
            settings=self.settings,
            store=self.store,
            trackers=self.trackers,
            lifecycle=self.lifecycle,
            workspaces=self.workspaces,
            recovery=self.recovery,
            agent_factory=self.agent_for,
            base_env=dict(os.environ),
            finals=self.finals,
        )
        return RunFlow(deps)

    def _scheduler(self) -> Scheduler:
        """The claim loop: runs the flow, skips repos over budget, announces every ending."""
        scheduler = Scheduler(
            self.store,
            self.flow,
            settings=self.settings.scheduler,
            max_concurrency=self.settings.max_concurrency,
            on_finished=self.endings.announce,
        )
        scheduler.excluded_repos = self.budget.over_budget
        scheduler.freeze_policy = unhealed_freeze
        scheduler.on_settled = self.endings.settle
        return scheduler

    def _sandbox(self) -> Sandbox:
        try:
            refs = (ref for _, ref in settings_secret_refs(self.settings))
            sandbox = build_sandbox(self.settings, refs)
        except SandboxUnavailable as exc:
            raise ConfigError(f"sandbox: {exc}") from exc
        if sandbox.mode == "none":
            log.warning(
                "sandbox: %s; any issue author can reach this host's secrets through the agent",
                sandbox.description,
            )
        return sandbox

    def preset_for(self, repo: RepoSettings) -> AgentPreset:
        preset = self.settings.agent(repo.agent)
        if preset is None:
            raise ConfigError(f"repos.{repo.name}.agent: no agent preset named {repo.agent!r}")
        return apply_overrides(preset, repo.agent_overrides)

    def agent_for(self, repo: RepoSettings) -> Agent:
        return build_agent(self.preset_for(repo))

    def repo_network(self, repo: RepoSettings) -> NetworkPolicy:
        """The policy for the repo's setup and tests: its agent's, without the model API."""
        return agent_network(self.settings.sandbox, self.preset_for(repo))

    def active_paths(self) -> list[Path]:
        paths: list[Path] = []
        for state in BUSY_STATES:
            for run in self.store.list_runs(RunFilter(state=state, limit=1000)):
                if run.worktree:
                    paths.append(Path(run.worktree))
        return paths

    def summary(self) -> str:
        lines = [
            f"history: {redact_url(self.settings.database_url)}",
            f"volume: {self.settings.volume}",
            f"capacity: {self.settings.max_concurrency} concurrent runs, "
            f"queue depth {self.settings.max_queue_depth}",
            f"sandbox: {self.sandbox.description}",
        ]
        for repo in self.settings.repos:
            lines.append(
                f"repo {repo.name}: {repo.tracker}:{repo.slug} -> {repo.default_branch}, "
                f"agent {repo.agent}, ci {repo.ci.kind}, {len(repo.deploy.probes)} deploy probe(s)"
            )
        if not self.settings.repos:
            lines.append("no repos enrolled: add [repos.NAME] tables to the config")
        return "\n".join(lines)

    def start(self) -> None:
        for name in self.trackers:
            cfg = self.settings.tracker(name)
            interval = (cfg.poll_interval_s if cfg else None) or self.settings.poll_interval_s
            # The first poll runs at once, under the same guard as every later one.
            self.periodic.add(f"poll:{name}", self._poller(name), interval, run_now=True)
        self.periodic.add(
            "housekeeping",
            lambda: self.workspaces.housekeeping(self.active_paths()),
            self.settings.workspace.housekeeping_interval_s,
        )
        self.periodic.add("endings", self.endings.sweep, self.settings.scheduler.sweep_interval_s)
        self.periodic.add("progress", self.finals.sweep, self.settings.scheduler.sweep_interval_s)
        self.periodic.add(
            "frozen-waits", self.frozen_waits.sweep, self.settings.scheduler.sweep_interval_s
        )
        self.periodic.add(
            "retention", self.prune_history, self.settings.workspace.housekeeping_interval_s
        )
        if self.http_enabled:
            self._start_http()
        self.scheduler.start()
        self.periodic.start()
        self.notifier.start()

    def prune_history(self) -> None:
        """Apply the ``[history]`` retention policy (batched; a no-op when nothing is old)."""
        keep = self.settings.history
        policy = RetentionPolicy(keep.keep_events_days, keep.keep_runs_days)
        report = self.store.prune_history(policy)
        if report.removed_anything:
            log.info(
                "history: pruned %d runs, %d events, %d notifications (retention %d/%d days)",
                report.runs,
                report.events,
                report.notifications,
                policy.keep_events_days,
                policy.keep_runs_days,
            )

    def _poller(self, name: str) -> Callable[[], object]:
        return lambda: self.intake.poll(name)

    def _start_http(self) -> None:
        from pipeline.http.server import start_listeners

        self.server = start_listeners(
            self.store, self.settings, self.intake.handle_webhook, self._health
        )
        self.intake.on_poll_error = self.server.metrics.poll_error
        self.intake.on_webhook_rejected = self.server.metrics.webhook_rejected
        self.dashboard_url = self.server.url
        log.info("dashboard and API: %s/", self.dashboard_url)  # the port bound, were it 0
        self.lifecycle.dashboard_url = link_base(self.settings.http, self.server.main.port)
        if self.lifecycle.dashboard_url is None:
            log.warning("[http] public_url is not set: issue comments link to no dashboard")

    def _health(self) -> dict[str, object]:
        """The sandbox, and every repo whose tracker refuses its ready list (then ``degraded``)."""
        health: dict[str, object] = {
            "sandbox": self.sandbox.mode,
            "sandbox_detail": self.sandbox.description,
        }
        refused = [
            {
                "tracker": r.tracker,
                "repo": r.repo,
                "slug": r.slug,
                "status": r.status,
                "since": r.since,
                "failures": r.failures,
                "error": r.error,
            }
            for r in self.intake.access.refusals()
        ]
        health["trackers_refused"] = refused
        if refused:
            health["status"] = "degraded"
        return health

    def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("stopping: no new claims; giving running agents %.0fs", grace_s)
        self.periodic.shutdown(wait=False)
        self.scheduler.stop(grace_s)
        self.finals.finish(FINAL_WRITES_S)  # runs that ended just before: their final state
        self.notifier.stop()
        if self.server is not None:
            self.server.stop()
        self.store.close()
        log.info("stopped")

    def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT."""
        received: list[str] = []

        def on_signal(signum: int, _frame: object) -> None:
            received.append(signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        log.info(
            "started: SIGTERM or Ctrl-C stops it, running agents given %.0fs", SHUTDOWN_GRACE_S
        )
        # A signal the kernel hands to another of our threads does not wake a main
        # thread blocked on a lock: its handler runs only when this thread next runs
        # Python code. So the wait is a short tick, never an unbounded wait.
        while not received and not self._stopped.is_set():
            time.sleep(SIGNAL_CHECK_S)
        if received:
            log.info("received %s", received[0])
        self.stop()
