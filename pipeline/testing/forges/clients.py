"""Clients wired to a served fake forge, and a manual clock, for tracker tests."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pipeline.config.settings import TrackerSettings
from pipeline.testing.forges.base import FakeForge
from pipeline.trackers import GiteaTracker, GitHubTracker, GitLabTracker, HttpOptions

RemoteTracker = GitHubTracker | GiteaTracker | GitLabTracker


@dataclass
class ManualClock:
    """Wall time that moves only when told; ``sleep`` advances it and is recorded."""

    now: float = 1_800_000_000.0
    sleeps: list[float] = field(default_factory=list)

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


def client_for(
    fake: FakeForge,
    *,
    token: str | None = None,
    options: HttpOptions | None = None,
    clock: ManualClock | None = None,
    **overrides: Any,
) -> RemoteTracker:
    """A tracker client of the fake's kind pointed at its served URL.

    ``overrides`` are ``TrackerSettings`` fields (``trusted_actors``,
    ``ready_label``...). Mutations are not spaced unless ``options`` says so.
    """
    base_url = fake.url + fake.api_prefix
    settings = TrackerSettings(name=fake.forge, kind=fake.forge, base_url=base_url)
    settings = replace(settings, **overrides)
    opts = options or HttpOptions(mutation_spacing_s=0.0, timeout_s=5.0)
    if clock is not None:
        opts = replace(opts, clock=clock.time, sleep=clock.sleep)
    classes: dict[str, type[RemoteTracker]] = {
        "github": GitHubTracker,
        "gitea": GiteaTracker,
        "gitlab": GitLabTracker,
    }
    client = classes[fake.forge](settings, token or fake.token, options=opts)
    fake.on_stop(client.close_client)  # its connections close when the fake stops
    return client
