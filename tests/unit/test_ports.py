"""Test ports: below the kernel's ephemeral range, a band per parallel worker."""

from __future__ import annotations

import socket

import pytest

from pipeline.testing import ports
from pipeline.testing.ports import ephemeral_floor, free_port, worker_band


def test_each_worker_draws_from_its_own_band_below_the_ephemeral_range() -> None:
    """Two workers never hand out the same port, and the kernel never picks theirs."""
    bands = [worker_band(f"gw{n}") for n in range(ports.BANDS)]
    assert all(band is not None for band in bands)
    seen: set[int] = set()
    for band in bands:
        assert band is not None and band.stop <= ephemeral_floor()
        assert seen.isdisjoint(band)
        seen.update(band)
    assert worker_band("master") == worker_band("gw0")


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next port of the band is taken by a listener: the one after it is handed out."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    band = worker_band()
    assert band is not None
    port = free_port()
    assert port in band
    with socket.socket() as held:
        held.bind(("127.0.0.1", port + 1 if port + 1 in band else band.start))
        held.listen()
        busy = held.getsockname()[1]
        handed = {free_port() for _ in range(len(band) - 1)}
    assert busy not in handed and handed <= set(band)
