"""Clients wired to a served fake forge, for tracker tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pipeline.config.settings import SecretRef, TrackerSettings
from pipeline.testing.clock import ManualClock
from pipeline.testing.forges.base import FakeForge
from pipeline.trackers import GiteaTracker, GitHubTracker, GitLabTracker, HttpOptions

RemoteTracker = GitHubTracker | GiteaTracker | GitLabTracker
__all__ = ["ManualClock", "RemoteTracker", "client_for"]


def client_for(
    fake: FakeForge,
    *,
    token: str | None = None,
    token_source: SecretRef | None = None,
    options: HttpOptions | None = None,
    clock: ManualClock | None = None,
    **overrides: Any,
) -> RemoteTracker:
    """A tracker client of the fake's kind pointed at its served URL.

    ``overrides`` are ``TrackerSettings`` fields (``trusted_actors``,
    ``ready_label``...); ``token_source`` is where the client reads the token again after
    a 401. Mutations are not spaced unless ``options`` says so.
    """
    base_url = fake.url + fake.api_prefix
    settings = TrackerSettings(name=fake.forge, kind=fake.forge, base_url=base_url)
    settings = replace(settings, token=token_source or SecretRef(), **overrides)
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
