"""A watcher that polls the database for breaches of the queue's guarantees.

Used by the stress and crash tests and by the scheduler benchmark: at every
poll, no repo may have more than one busy run and no more than ``cap`` runs
may be busy in total.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pipeline.store import Store


@dataclass
class Observations:
    polls: int = 0
    max_busy: int = 0
    violations: list[str] = field(default_factory=list)


class InvariantMonitor:
    """Polls ``busy_by_repo`` in a thread until stopped; use as a context manager."""

    def __init__(self, database_url: str, cap: int, interval_s: float = 0.01) -> None:
        self.store = Store(database_url)
        self.cap = cap
        self.interval_s = interval_s
        self.seen = Observations()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="invariants", daemon=True)

    def __enter__(self) -> InvariantMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> Observations:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.store.close()
        return self.seen

    def check_once(self) -> None:
        busy = self.store.busy_by_repo()
        total = sum(busy.values())
        self.seen.polls += 1
        self.seen.max_busy = max(self.seen.max_busy, total)
        for repo_id, count in busy.items():
            if count > 1:
                self.seen.violations.append(f"repo {repo_id} has {count} busy runs")
        if total > self.cap:
            self.seen.violations.append(f"{total} busy runs exceed the cap {self.cap}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check_once()
