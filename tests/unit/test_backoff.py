"""Capped exponential backoff with full jitter, and the stop reasons' errors."""

from __future__ import annotations

import errno
import random

import pytest

from pipeline.core.errors import CancelRequested, LeaseLost, RetryableError
from pipeline.queue.worker import ShuttingDown, backoff_delay, stop_error, unexpected_kind


@pytest.mark.parametrize("failures", [0, 1, 2, 3, 10, 500])
def test_delay_is_within_the_capped_exponential_ceiling(failures: int) -> None:
    """Every delay lies in [0, min(max, base * 2**failures)]."""
    rng = random.Random(failures)
    ceiling = min(600.0, 10.0 * 2 ** min(failures, 30))
    delays = [backoff_delay(failures, base_s=10, max_s=600, rng=rng) for _ in range(200)]
    assert all(0.0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling / 2  # full jitter spreads over the whole range


def test_delay_grows_with_failures_on_average() -> None:
    """More failures mean a larger average delay until the cap."""
    rng = random.Random(1)

    def mean(failures: int) -> float:
        return sum(backoff_delay(failures, base_s=1, max_s=100, rng=rng) for _ in range(400)) / 400

    assert mean(0) < mean(2) < mean(4)


def test_retry_after_wins_when_longer() -> None:
    """A server's Retry-After longer than the jittered delay is honoured."""
    rng = random.Random(3)
    assert backoff_delay(0, base_s=1, max_s=2, retry_after_s=30, rng=rng) == 30
    assert backoff_delay(5, base_s=100, max_s=100, retry_after_s=0.0, rng=rng) >= 0.0


def test_stop_reasons_map_to_classified_errors() -> None:
    """Each stop reason raises the error that decides the run's outcome."""
    assert isinstance(stop_error("cancelled"), CancelRequested)
    assert isinstance(stop_error("lease_lost"), LeaseLost)
    timeout = stop_error("timeout")
    assert isinstance(timeout, RetryableError) and timeout.kind == "timeout"
    assert isinstance(stop_error("shutdown"), ShuttingDown)


def test_unclassified_errors_get_a_retry_kind() -> None:
    """Disk full and network errors nobody classified are labelled; the rest is internal."""
    assert unexpected_kind(OSError(errno.ENOSPC, "No space left on device")) == "disk_full"
    assert unexpected_kind(ConnectionResetError("reset by peer")) == "network"
    assert unexpected_kind(TimeoutError("read timed out")) == "network"
    assert unexpected_kind(KeyError("x")) == "internal"
