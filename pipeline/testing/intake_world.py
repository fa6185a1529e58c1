"""Intake wired to fake forges and a real store, for tests and the intake benchmark.

    world = IntakeWorld.build(url, tmp, {"github": fake}, [("github", "acme/app")])
    world.intake.poll_all()
    world.runs()  # what got queued

Everything polls through real tracker clients over loopback HTTP. One
``ManualClock`` drives both the intake's back-off and the clients' rate-limit
waits, so tests move time instead of sleeping. ``restart()`` is a new intake
with fresh clients (empty ETag caches) on the same database.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.config.settings import RepoSettings, SecretRef, Settings, TrackerSettings
from pipeline.intake.service import Intake
from pipeline.run.lifecycle import Lifecycle
from pipeline.store import Run, RunFilter, Store
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import ManualClock, RemoteTracker, client_for
from pipeline.trackers import HttpOptions
from pipeline.trackers.base import Tracker

REMOTE_URL = "https://git.invalid/unused.git"


def repo_name(tracker: str, slug: str) -> str:
    """The enrolled repo's name for ``slug`` on ``tracker`` (``github-acme-app``)."""
    return f"{tracker}-{slug.replace('/', '-')}"


@dataclass
class IntakeWorld:
    """A store, tracker clients on fake forges, and the intake over them."""

    store: Store
    settings: Settings
    fakes: Mapping[str, FakeForge]
    clock: ManualClock
    options: HttpOptions
    tracker_overrides: dict[str, Any] = field(default_factory=dict)
    wall_clock: bool = False
    trackers: dict[str, RemoteTracker] = field(default_factory=dict)
    intake: Intake = field(init=False)

    @classmethod
    def build(
        cls,
        database_url: str,
        volume: Path,
        fakes: Mapping[str, FakeForge],
        repos: Sequence[tuple[str, str]],
        *,
        clock: ManualClock | None = None,
        options: HttpOptions | None = None,
        poll_interval_s: float = 60.0,
        webhook_secret_env: str | None = None,
        wall_clock: bool = False,
        tracker_poll_interval_s: float | None = None,
        **tracker_overrides: Any,
    ) -> IntakeWorld:
        """Fakes must be served. ``repos`` are ``(tracker name, slug)`` pairs to enrol.

        ``wall_clock`` runs intake and clients on real time (benchmarks) instead
        of the manual clock; ``tracker_poll_interval_s`` is each tracker's own
        ``poll_interval_s`` (``poll_interval_s`` is the global default).
        """
        clock = clock or ManualClock()
        options = options or HttpOptions(mutation_spacing_s=0.0, timeout_s=5.0)
        if tracker_poll_interval_s is not None:
            tracker_overrides["poll_interval_s"] = tracker_poll_interval_s
        if webhook_secret_env:
            tracker_overrides["webhook_secret"] = SecretRef(env=webhook_secret_env)
        tracker_settings = tuple(
            replace(
                TrackerSettings(name=name, kind=fake.forge, base_url=fake.url + fake.api_prefix),
                **tracker_overrides,
            )
            for name, fake in fakes.items()
        )
        settings = Settings(
            database_url=database_url,
            volume=volume,
            poll_interval_s=poll_interval_s,
            max_queue_depth=10_000,
            trackers=tracker_settings,
            repos=tuple(
                RepoSettings(name=repo_name(t, slug), tracker=t, slug=slug, remote_url=REMOTE_URL)
                for t, slug in repos
            ),
        )
        store = Store(database_url)
        store.upgrade()
        store.sync_repos(settings.repos)
        world = cls(store, settings, fakes, clock, options, dict(tracker_overrides), wall_clock)
        world.restart()
        return world

    def restart(self) -> Intake:
        """A new intake with new clients (cold ETag caches), as after a daemon restart."""
        self.trackers = {
            name: client_for(
                fake,
                options=self.options,
                clock=None if self.wall_clock else self.clock,
                name=name,
                **self.tracker_overrides,
            )
            for name, fake in self.fakes.items()
        }
        trackers: dict[str, Tracker] = dict(self.trackers)
        lifecycle = Lifecycle(self.store, trackers, {t.name: t for t in self.settings.trackers})
        clock = time.monotonic if self.wall_clock else self.clock.time
        self.intake = Intake(self.store, self.settings, trackers, lifecycle, clock=clock)
        return self.intake

    def runs(self) -> list[Run]:
        return self.store.list_runs(RunFilter(limit=100_000))

    def close(self) -> None:
        for tracker in self.trackers.values():
            tracker.close_client()
        self.store.close()
