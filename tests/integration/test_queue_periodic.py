"""Periodic jobs under APScheduler 3: ticks run, failures do not stop them, run_once works."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from pipeline.queue.periodic import Periodic, misfire_grace_s


def test_run_once_calls_jobs_in_this_thread() -> None:
    """run_once runs one named job, or all of them, synchronously."""
    calls: list[str] = []
    periodic = Periodic()
    periodic.add("a", lambda: calls.append("a"), 60)
    periodic.add("b", lambda: calls.append("b"), 60)
    periodic.run_once("a")
    periodic.run_once()
    assert calls == ["a", "a", "b"] and periodic.names == ["a", "b"]


def test_failing_job_keeps_ticking_and_never_overlaps() -> None:
    """A job that raises runs again next tick; a slow job never runs twice at once."""
    running = 0
    overlaps = 0
    ticks = 0
    lock = threading.Lock()

    def slow_and_failing() -> None:
        nonlocal running, overlaps, ticks
        with lock:
            running += 1
            ticks += 1
            overlaps += running > 1
        time.sleep(0.15)
        with lock:
            running -= 1
        raise RuntimeError("tick failed")

    periodic = Periodic()
    periodic.add("slow", slow_and_failing, 0.05, run_now=True)
    periodic.start()
    deadline = time.monotonic() + 20
    while ticks < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    periodic.shutdown()
    assert ticks >= 3 and overlaps == 0


def test_a_skipped_tick_is_told_at_info_not_warned(caplog: pytest.LogCaptureFixture) -> None:
    """A tick skipped because the last one still runs (a paced poll) is no warning."""
    release = threading.Event()
    periodic = Periodic()
    periodic.add("poll", lambda: release.wait(20), 0.05, run_now=True)
    caplog.set_level(logging.INFO)
    periodic.start()
    deadline = time.monotonic() + 20
    while not any("skipped" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "no tick was skipped"
        time.sleep(0.05)
    release.set()
    periodic.shutdown()
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert {r.levelno for r in skipped} == {logging.INFO}
    assert skipped[0].getMessage() == (
        'periodic job "poll": the last tick is still running; this one is skipped'
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_invalid_interval_and_misfire_grace() -> None:
    """A non-positive interval is refused; the misfire grace is one interval, at least 1 s."""
    with pytest.raises(ValueError, match="interval_s"):
        Periodic().add("x", lambda: None, 0)
    assert misfire_grace_s(0.2) == 1 and misfire_grace_s(60) == 60
