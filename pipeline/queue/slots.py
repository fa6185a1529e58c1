"""This process's share of the global cap: which workers hold a slot now.

A worker holds its slot from its launch until its run's outcome is written
(and its repo frozen if it must be); it then gives the slot up and, on the
same thread, tells the issue and the humans how the run ended. Those threads
are tracked apart ("finishing") so a stop and ``wait_idle`` still wait for
them, while the claim loop may already fill the slot again.
"""

from __future__ import annotations

import threading
import time

from pipeline.queue.worker import Worker


class Slots:
    """The workers holding a slot, and the threads finishing an ending without one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # Keyed by (run id, attempt): a run recovered and claimed again by this same
        # process must not hide the superseded worker, which still has an agent to stop.
        self._workers: dict[tuple[int, int], Worker] = {}
        self._finishing: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def take(self, worker: Worker) -> None:
        with self._lock:
            self._workers[(worker.run.id, worker.run.attempt)] = worker

    def free(self) -> int:
        with self._lock:
            return self.capacity - len(self._workers)

    def give_up(self, worker: Worker, *, finishing: bool = False) -> None:
        """Free ``worker``'s slot; ``finishing``: the calling thread goes on to announce."""
        with self._lock:
            key = (worker.run.id, worker.run.attempt)
            if self._workers.get(key) is worker:
                del self._workers[key]
            if finishing:
                self._finishing.add(threading.current_thread())

    def finished(self) -> None:
        """The calling thread is done announcing."""
        with self._lock:
            self._finishing.discard(threading.current_thread())

    def workers(self) -> list[Worker]:
        with self._lock:
            return list(self._workers.values())

    def idle(self) -> bool:
        with self._lock:
            return not self._workers and not self._finishing

    def join_workers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for worker in self.workers():
            if worker.thread is not None:
                worker.thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def join_finishing(self, timeout_s: float) -> None:
        """Endings being announced get ``timeout_s``; one cut short is announced at the
        next start (``Endings`` catches up on what it has not marked done)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._finishing)
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
