"""One poll cycle's ready lists, fetched with bounded concurrency.

An unchanged cycle is one conditional request per repo (a 304) and nothing
else, so its time is the forge's round trip times the number of repos when
the requests go one by one. ``fetch_lists`` keeps up to the tracker's
``poll_concurrency`` of them in flight on the client's kept-alive connections;
the lists are then processed one by one, in order, by the caller.

The client's rate-limit handling applies to each request as before: once the
forge signals a limit, the client refuses every further call without touching
the network, and no list not yet requested is requested. A transient error
(a rate limit, a 5xx, a timeout) ends the cycle at that repo's turn, as it
would one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import ConfigError, FatalError, RetryableError
from pipeline.trackers.base import Tracker, TrackerIssue

T = TypeVar("T")


class NotFetched(RetryableError):
    """A list not requested because an earlier one in the cycle hit a transient error."""


@dataclass(frozen=True)
class Listed:
    """One repo's ready list as fetched: the issues (``None``: unchanged), or why not."""

    issues: list[TrackerIssue] | None = None
    error: Exception | None = None
    skipped: bool = False

    def result(self) -> list[TrackerIssue] | None:
        """The issues, raising the fetch's error if it failed."""
        if self.error is not None:
            raise self.error
        if self.skipped:
            raise NotFetched("network", "not requested: an earlier list request failed")
        return self.issues


def fetch_lists(tracker: Tracker, repos: Sequence[RepoSettings], limit: int) -> list[Listed]:
    """Each repo's ready list, in ``repos`` order, at most ``limit`` requests at once."""
    halted = threading.Event()

    def fetch(repo: RepoSettings) -> Listed:
        if halted.is_set():
            return Listed(skipped=True)
        try:
            return Listed(issues=tracker.list_ready(repo.slug))
        except RetryableError as exc:
            halted.set()
            return Listed(error=exc)
        except (FatalError, ConfigError) as exc:
            return Listed(error=exc)

    workers = min(limit, len(repos))
    if workers <= 1:
        return [fetch(repo) for repo in repos]
    with ThreadPoolExecutor(workers, thread_name_prefix="poll") as pool:
        return list(pool.map(fetch, repos))


class Lazy(Generic[T]):
    """A value computed on first use, at most once."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._value: T | None = None
        self._loaded = False

    @property
    def value(self) -> T:
        if not self._loaded:
            self._value, self._loaded = self._load(), True
        return self._value  # type: ignore[return-value]
