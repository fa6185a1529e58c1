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
from typing import Any, TypedDict, Unpack

from pipeline.config.settings import RepoSettings, SecretRef, Settings, TrackerSettings
from pipeline.intake.lifecycle import Lifecycle
from pipeline.intake.service import Intake
from pipeline.store import Run, RunFilter, Store
from pipeline.testing.clock import ManualClock
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.forges.clients import RemoteTracker, client_for
from pipeline.trackers import HttpOptions
from pipeline.trackers.base import Tracker

REMOTE_URL = "https://git.invalid/unused.git"


def repo_name(tracker: str, slug: str) -> str:
    """The enrolled repo's name for ``slug`` on ``tracker`` (``github-acme-app``)."""
    return f"{tracker}-{slug.replace('/', '-')}"


class WorldKnobs(TypedDict, total=False):
    """What ``IntakeWorld.build`` can change.

    ``options``: the clients' HTTP options; ``poll_interval_s``: the global default;
    ``tracker_poll_interval_s``: each tracker's own; ``webhook_secret_env``: the variable
    holding the trackers' webhook secret; ``wall_clock``: intake and clients on real time
    (benchmarks) instead of the manual clock; ``trusted_actors``, ``untrusted_text``,
    ``poll_concurrency``: the trackers' settings of those names.
    """

    options: HttpOptions
    poll_interval_s: float
    tracker_poll_interval_s: float
    webhook_secret_env: str
    wall_clock: bool
    trusted_actors: tuple[str, ...]
    untrusted_text: str
    poll_concurrency: int


def _tracker(name: str, fake: FakeForge) -> TrackerSettings:
    return TrackerSettings(name=name, kind=fake.forge, base_url=fake.url + fake.api_prefix)


def _tracker_overrides(knobs: WorldKnobs) -> dict[str, Any]:
    """The ``TrackerSettings`` fields the knobs set."""
    overrides: dict[str, Any] = {}
    if "tracker_poll_interval_s" in knobs:
        overrides["poll_interval_s"] = knobs["tracker_poll_interval_s"]
    if "webhook_secret_env" in knobs:
        overrides["webhook_secret"] = SecretRef(env=knobs["webhook_secret_env"])
    if "trusted_actors" in knobs:
        overrides["trusted_actors"] = knobs["trusted_actors"]
    for name in ("untrusted_text", "poll_concurrency"):
        if name in knobs:
            overrides[name] = knobs[name]
    return overrides


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
        **knobs: Unpack[WorldKnobs],
    ) -> IntakeWorld:
        """Fakes must be served. ``repos`` are ``(tracker name, slug)`` pairs to enrol."""
        overrides = _tracker_overrides(knobs)
        settings = Settings(
            database_url=database_url,
            volume=volume,
            poll_interval_s=knobs.get("poll_interval_s", 60.0),
            max_queue_depth=10_000,
            trackers=tuple(
                replace(_tracker(name, fake), **overrides) for name, fake in fakes.items()
            ),
            repos=tuple(
                RepoSettings(name=repo_name(t, slug), tracker=t, slug=slug, remote_url=REMOTE_URL)
                for t, slug in repos
            ),
        )
        store = Store(database_url)
        store.upgrade()
        store.sync_repos(settings.repos)
        options = knobs.get("options") or HttpOptions(mutation_spacing_s=0.0, timeout_s=5.0)
        wall_clock = knobs.get("wall_clock", False)
        world = cls(store, settings, fakes, ManualClock(), options, overrides, wall_clock)
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
