"""Periodic jobs (poll, sweep, housekeeping) under APScheduler 3.

The job store stays in memory: the durable queue is ours, in the database
(docs/adr/0002). Every job coalesces missed ticks into one, never runs twice
at once, and tolerates a late start up to its misfire grace, so a busy
machine neither loses ticks nor doubles them. ``run_once`` calls jobs
directly so tests need no clock.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-untyped]
from apscheduler.jobstores.memory import MemoryJobStore  # type: ignore[import-untyped]
from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-untyped]

log = logging.getLogger(__name__)
# APScheduler logs every tick at INFO; a sweep every few seconds would drown the log.
logging.getLogger("apscheduler.executors.default").setLevel(logging.WARNING)

MIN_MISFIRE_GRACE_S = 1


class _SkippedTickFilter(logging.Filter):
    """A tick skipped while the last one still runs is the coalescing asked for below (a poll
    paced by a forge's rate limit outlasts its interval), not a problem. APScheduler warned at
    every skipped tick; instead the first skip during one long tick is told at INFO (which job,
    since when that tick runs) and the later skips of the same tick at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "maximum number of running instances" not in str(record.msg):
            return True
        job = next(iter(record.args or ("?",)))
        tick = getattr(job, "func", None)
        level, started = tick.skipped() if isinstance(tick, _Tick) else (logging.INFO, None)
        running = f"since {started:%Y-%m-%d %H:%M:%S} UTC" if started else "waiting for a thread"
        then = "ticks are skipped until it ends" if level == logging.INFO else "this one is skipped"
        log.log(
            level,
            'periodic job "%s": its last tick (%s) is still running; %s',
            getattr(job, "name", job),
            running,
            then,
        )
        return False


logging.getLogger("apscheduler.scheduler").addFilter(_SkippedTickFilter())


@dataclass(frozen=True)
class PeriodicJob:
    name: str
    func: Callable[[], object]
    interval_s: float


def misfire_grace_s(interval_s: float) -> int:
    """A late tick still runs if it is at most one interval (at least 1 s) late."""
    return max(MIN_MISFIRE_GRACE_S, math.ceil(interval_s))


class Periodic:
    """A named set of interval jobs on one background APScheduler."""

    def __init__(self, name: str = "periodic", max_workers: int = 4) -> None:
        self.name = name
        self._jobs: dict[str, PeriodicJob] = {}
        self._lock = threading.Lock()
        self._scheduler = BackgroundScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": ThreadPoolExecutor(max_workers)},
            job_defaults={"coalesce": True, "max_instances": 1},
            timezone=UTC,
        )

    def add(
        self, name: str, func: Callable[[], object], interval_s: float, *, run_now: bool = False
    ) -> None:
        """Run ``func`` every ``interval_s``; ``run_now`` also runs it right after start."""
        if interval_s <= 0:
            raise ValueError(f"periodic job {name!r}: interval_s must be > 0, got {interval_s}")
        job = PeriodicJob(name, func, interval_s)
        with self._lock:
            self._jobs[name] = job
        options: dict[str, object] = {}
        if run_now:
            options["next_run_time"] = datetime.now(UTC)
        self._scheduler.add_job(
            _Tick(job),
            "interval",
            seconds=interval_s,
            id=name,
            name=name,
            replace_existing=True,
            misfire_grace_time=misfire_grace_s(interval_s),
            **options,
        )

    def start(self) -> None:
        if not self._scheduler.running:
            self._scheduler.start()

    def shutdown(self, wait: bool = True) -> None:
        """Stop ticking; with ``wait`` the jobs running now finish first."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)

    def run_once(self, name: str | None = None) -> None:
        """Run one job (or all) now, in this thread (tests, burst mode)."""
        with self._lock:
            jobs = [self._jobs[name]] if name is not None else list(self._jobs.values())
        for job in jobs:
            _Tick(job)()

    @property
    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._jobs)


class _Tick:
    """The job with its errors logged, so one failing tick never stops the next; it also knows
    since when its current tick runs and whether a skip during that tick was told yet."""

    def __init__(self, job: PeriodicJob) -> None:
        self.job = job
        self._lock = threading.Lock()
        self._started: datetime | None = None
        self._told = False

    def __call__(self) -> None:
        with self._lock:
            self._started, self._told = datetime.now(UTC), False
        try:
            self.job.func()
        except Exception:
            log.exception("periodic job %s failed; it runs again next tick", self.job.name)

    def skipped(self) -> tuple[int, datetime | None]:
        """A tick was skipped: INFO for the first skip of the running tick, DEBUG after (and
        while the first tick still waits for a thread, as there is no long tick to tell of)."""
        with self._lock:
            if self._started is None:
                return logging.DEBUG, None
            first, self._told = not self._told, True
            return (logging.INFO if first else logging.DEBUG), self._started
