"""Periodic jobs under APScheduler 3: ticks run, failures do not stop them, run_once works."""

from __future__ import annotations

import logging
import re
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


def _skips(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in list(caplog.records) if "is still running" in r.getMessage()]


def _wait_for_skips(caplog: pytest.LogCaptureFixture, count: int) -> None:
    deadline = time.monotonic() + 20
    while len(_skips(caplog)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} ticks were skipped"
        time.sleep(0.02)


def test_a_long_tick_is_told_once_at_info_and_its_later_skips_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ticks skipped during one long tick are told once at INFO (job, since when), then at DEBUG;
    the next long tick of the job is told at INFO again; nothing is a warning."""
    gates = [threading.Event(), threading.Event()]
    started = [threading.Event(), threading.Event()]
    ticks = 0

    def endings() -> None:
        nonlocal ticks  # one tick at a time (max_instances=1), so no lock is needed
        n, ticks = ticks, ticks + 1
        if n < len(gates):
            started[n].set()
            gates[n].wait(20)

    caplog.set_level(logging.DEBUG, logger="pipeline.queue.periodic")
    periodic = Periodic()
    periodic.add("endings", endings, 0.05, run_now=True)
    periodic.start()
    try:
        assert started[0].wait(20)
        _wait_for_skips(caplog, 4)
        gates[0].set()
        assert started[1].wait(20)
        _wait_for_skips(caplog, len(_skips(caplog)) + 4)
        during = _skips(caplog)
    finally:
        for gate in gates:
            gate.set()
        periodic.shutdown()
    told = [r.getMessage() for r in during if r.levelno == logging.INFO]
    assert len(told) == 2, told
    for message in told:
        assert re.fullmatch(
            r'periodic job "endings": its last tick \(since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)'
            r" is still running; ticks are skipped until it ends",
            message,
        ), message
    assert {r.levelno for r in during} == {logging.INFO, logging.DEBUG}
    assert len(during) >= 8
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_invalid_interval_and_misfire_grace() -> None:
    """A non-positive interval is refused; the misfire grace is one interval, at least 1 s."""
    with pytest.raises(ValueError, match="interval_s"):
        Periodic().add("x", lambda: None, 0)
    assert misfire_grace_s(0.2) == 1 and misfire_grace_s(60) == 60
