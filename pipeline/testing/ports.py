"""Loopback ports for servers a test or the demo starts.

A port is handed out here and bound later, often by another process. One the
kernel picks (``bind(("127.0.0.1", 0))``) comes from its ephemeral range, which
every outgoing connection and every other ``bind(0)`` on the machine draws from
too, so it can be taken in between. These come from just below that range
instead, and each test worker process (``PYTEST_XDIST_WORKER=gwN``) draws from a
band of its own, in turn from a random start.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

BAND = 1000  # ports per worker
BANDS = 8  # workers with a band of their own; more share them
_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_next = itertools.count(random.randrange(BAND))


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on right now."""
    band = worker_band()
    if band is not None:
        for _ in band:
            port = band.start + next(_next) % BAND
            if _bindable(port):
                return port
    with socket.socket() as sock:  # no band, or every port of it busy: the kernel's pick
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker_band(worker: str | None = None) -> range | None:
    """This worker's ports, below the ephemeral range; None where that range is unusual."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0") if worker is None else worker
    number = name.removeprefix("gw")
    index = int(number) % BANDS if number.isdigit() else 0
    start = ephemeral_floor() - (BANDS - index) * BAND
    return range(start, start + BAND) if start >= 10_000 else None


def ephemeral_floor() -> int:
    """The lowest port the kernel hands out on its own (32768 where it does not say)."""
    try:
        return int(_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
