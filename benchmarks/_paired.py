"""Helpers shared by the paired benchmarks: summaries and the machine description."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from collections.abc import Sequence
from typing import Any

from sqlalchemy import event


def spread(values: Sequence[float], digits: int = 4) -> dict[str, float]:
    """min / median / max of ``values``."""
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


def show_round(n: int, samples: dict[str, list[float]], digits: int) -> None:
    """One progress line: round ``n``'s latest sample of each side."""
    latest = ", ".join(f"{k} {v[-1]:.{digits}f}s" for k, v in samples.items())
    print(f"round {n + 1}: {latest}", flush=True)


def sized_parser(name: str, files: int, rounds: int) -> argparse.ArgumentParser:
    """The options of a benchmark over a tree of ``--files`` files, ``--rounds`` times."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {name}")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--files", type=int, default=files)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": load,
    }


class StatementCounter:
    """Counts the SQL statements an engine sends while the block runs."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.count = 0

    def __enter__(self) -> StatementCounter:
        event.listen(self.engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1
