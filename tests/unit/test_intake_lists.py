"""A poll cycle's list requests: concurrent up to the tracker's limit, never beyond."""

from __future__ import annotations

import threading
from typing import cast

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import FatalError, RetryableError
from pipeline.intake.lists import Listed, NotFetched, fetch_lists
from pipeline.trackers.base import Tracker, TrackerIssue

# A guard against a hang when requests never meet, not a speed limit.
BARRIER_GUARD_S = 60.0


def repos(count: int) -> list[RepoSettings]:
    return [
        RepoSettings(name=f"r{n}", tracker="gh", slug=f"acme/r{n}", remote_url="x")
        for n in range(count)
    ]


class MeetingTracker:
    """``list_ready`` returns only once ``group`` calls are in flight together."""

    def __init__(self, group: int) -> None:
        self.barrier = threading.Barrier(group, timeout=BARRIER_GUARD_S)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.slugs: list[str] = []

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.slugs.append(slug)
        try:
            self.barrier.wait()
            return None
        finally:
            with self.lock:
                self.in_flight -= 1


class ScriptedTracker:
    """Fails for the slugs it is told to, one request at a time."""

    def __init__(self, failures: dict[str, Exception]) -> None:
        self.failures = failures
        self.slugs: list[str] = []

    def list_ready(self, slug: str) -> list[TrackerIssue] | None:
        self.slugs.append(slug)
        if slug in self.failures:
            raise self.failures[slug]
        return []


@pytest.mark.parametrize("limit", [2, 4])
def test_requests_overlap_up_to_the_limit_and_never_beyond(limit: int) -> None:
    """Twelve lists at limit N: the requests meet N at a time (a barrier of N passes) and
    never more than N are in flight."""
    tracker = MeetingTracker(limit)
    lists = fetch_lists(cast(Tracker, tracker), repos(12), limit)
    assert lists == [Listed(issues=None)] * 12
    assert tracker.peak == limit
    assert sorted(tracker.slugs) == sorted(r.slug for r in repos(12))


def test_a_limit_of_one_asks_one_at_a_time_in_order() -> None:
    """poll_concurrency 1: one request after another, in the repos' order."""
    tracker = ScriptedTracker({})
    fetch_lists(cast(Tracker, tracker), repos(5), 1)
    assert tracker.slugs == [f"acme/r{n}" for n in range(5)]


def test_a_transient_error_stops_further_requests() -> None:
    """After a rate limit no further list is requested; its repo reports the error and the
    later ones say they were not fetched."""
    limited = RetryableError("forge_rate_limited", "429", retry_after_s=60.0)
    tracker = ScriptedTracker({"acme/r1": limited})
    lists = fetch_lists(cast(Tracker, tracker), repos(5), 1)
    assert tracker.slugs == ["acme/r0", "acme/r1"]
    assert lists[0] == Listed(issues=[])
    assert lists[1].error is limited
    with pytest.raises(NotFetched):
        lists[2].result()


def test_a_repo_scoped_error_stops_nothing() -> None:
    """A missing repo is that repo's error; the others are still requested."""
    missing = FatalError("missing_repo", "404")
    tracker = ScriptedTracker({"acme/r0": missing})
    lists = fetch_lists(cast(Tracker, tracker), repos(3), 2)
    assert sorted(tracker.slugs) == ["acme/r0", "acme/r1", "acme/r2"]
    with pytest.raises(FatalError):
        lists[0].result()
    assert [listed.result() for listed in lists[1:]] == [[], []]
