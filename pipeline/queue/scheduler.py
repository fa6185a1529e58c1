"""Scheduling policy: the claim loop, the worker pool, heartbeats, the sweeper.

The guarantees live in the database (``pipeline.store.claim``); this module
only decides *when* to claim and what to do with a claimed run:

- a claim loop takes runs while this process has free slots, woken at once
  when one of its runs ends, when a run is queued or a busy run ends anywhere
  (``pipeline.store.wake``: LISTEN/NOTIFY on PostgreSQL, in-process on
  SQLite), at the queue's next due time (a retry's or a delayed run's
  ``run_after``, a lease's end: it sweeps, then claims), and otherwise every
  ``claim_interval_s`` as a fallback while a run is queued; with nothing
  queued and the wake known to work, that fallback stretches to
  ``IDLE_RECHECK_S`` (on SQLite a commit by any process still ends it within
  one ``claim_interval_s``);
- each claimed run executes the run pipeline in its own thread, holding no
  database lock (agents are subprocesses; see docs/adr/0003);
- one monitor thread renews every lease, watches for cancel and for the
  execution deadline, and stops a run whose lease is lost or cannot be
  renewed for ``lease_s``;
- the sweeper runs every ``sweep_interval_s`` under APScheduler, on every
  replica.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection

from pipeline.config.settings import SchedulerSettings
from pipeline.core.proc import StopToken
from pipeline.core.states import Outcome
from pipeline.queue.periodic import Periodic
from pipeline.queue.slots import Slots
from pipeline.queue.worker import RunContext, Worker, stop_error, summarise_traceback, write_outcome
from pipeline.store.claim import SweepReport
from pipeline.store.records import Run
from pipeline.store.repos import FreezePolicy
from pipeline.store.roles import QueueStore
from pipeline.store.wake import QueueWake

log = logging.getLogger(__name__)

RunPipeline = Callable[[RunContext], Outcome | str | None]
# A stopped pipeline that has not returned this long after its kill grace is
# abandoned: the monitor writes the outcome and frees the slot.
STUCK_GRACE_S = 5.0
# With nothing queued, the claim loop looks at the queue at least this often even
# when no wake, commit or due time asks it to (a lost notification; an unfreeze).
IDLE_RECHECK_S = 30.0

__all__ = ["RunContext", "RunPipeline", "Scheduler"]


def default_owner() -> str:
    """A name unique to this process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Scheduler:
    """Claims runs from the store and executes them with the run pipeline."""

    def __init__(
        self,
        store: QueueStore,
        pipeline: RunPipeline,
        *,
        settings: SchedulerSettings,
        max_concurrency: int,
        owner: str | None = None,
        on_finished: Callable[[Run], None] | None = None,
    ) -> None:
        self.store = store
        self.pipeline = pipeline
        self.settings = settings
        self.max_concurrency = max_concurrency
        self.owner = owner or default_owner()
        # Called with a terminal run while it still holds its slot (what must happen
        # before this process claims again), then ``on_finished`` once the slot is free
        # (telling the issue and the humans, which may wait on a forge).
        self.on_settled: Callable[[Run], None] | None = None
        self.on_finished = on_finished
        # Whether an ending freezes its repo, written with the ending (a worker's or the sweep's).
        self.freeze_policy: FreezePolicy | None = None
        # Repos not to claim from now (e.g. over budget); set by the daemon.
        self.excluded_repos: Callable[[], Collection[int]] | None = None
        self.clock: Callable[[], float] = time.monotonic
        self._slots = Slots(max_concurrency)
        self._claiming = threading.Lock()  # one claimer per process: slots are counted locally
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._monitor_stop = threading.Event()
        self._has_work = threading.Event()  # the monitor sleeps on it while nothing runs
        self._threads: list[threading.Thread] = []
        self._periodic = Periodic(name=f"sweep-{self.owner}")
        self._beat_s = min(settings.heartbeat_s, settings.cancel_check_s)
        self._tick_s = max(0.02, min(0.25, self._beat_s / 2))
        engine = getattr(store, "engine", None)
        self.queue_wake = (
            QueueWake(engine, str(store.url), self._wake.set) if engine is not None else None
        )

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Start claiming, the monitor and the periodic sweep."""
        self._periodic.add("sweep", self.sweep_once, self.settings.sweep_interval_s, run_now=True)
        self._periodic.start()
        if self.queue_wake is not None:
            self.queue_wake.start()
        for name, target in (("claim", self._claim_loop), ("monitor", self._monitor_loop)):
            thread = threading.Thread(target=target, name=f"{name}-{self.owner}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, grace_s: float) -> None:
        """Stop claiming, give running work ``grace_s``, then stop it; leases go to recovery."""
        self._stopping.set()
        self._wake.set()
        if self.queue_wake is not None:
            self.queue_wake.stop()
        with self._claiming:
            pass  # a claim in flight finishes (and its worker is joined below); none starts after
        self._periodic.shutdown()
        graceful_until = time.monotonic() + grace_s
        self._slots.join_workers(grace_s)
        now, left = self.clock(), self._slots.workers()
        if left:
            ids = ", ".join(str(w.run.id) for w in left)
            log.warning("grace over: stopping run(s) %s; queued again once the lease expires", ids)
        for worker in left:
            worker.request_stop("shutdown", now)
        self._slots.join_workers(self.settings.kill_grace_s + 1.0)
        # Endings still being told share the same grace (a stopped run tells none).
        self._slots.join_finishing(max(0.0, graceful_until - time.monotonic()))
        self._monitor_stop.set()
        self._has_work.set()
        for thread in self._threads:
            thread.join(timeout=5.0)

    @property
    def running(self) -> list[int]:
        """Ids of the runs this scheduler is executing now."""
        return sorted(w.run.id for w in self._slots.workers())

    def wait_idle(self, timeout_s: float) -> bool:
        """True once no run of ours is executing and nothing is claimable (tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._slots.idle() and self.run_once() == 0 and self._slots.idle():
                return True
            time.sleep(0.05)
        return False

    # -- claiming ------------------------------------------------------------------

    def run_once(self) -> int:
        """Claim what may start now and start a worker for each; the number started."""
        with self._claiming:
            return self._claim_available()

    def _claim_available(self) -> int:
        started = 0
        while not self._stopping.is_set() and self._slots.free() > 0:
            run = self._claim()
            if run is None:
                break
            self._launch(run)
            started += 1
        return started

    def _claim_after_run(self) -> None:
        """Claim the next run from the thread that just freed a slot: no hand-off delay.

        When another thread is claiming already, the wake event makes it look again.
        """
        self._wake.set()
        if self._stopping.is_set() or not self._claiming.acquire(blocking=False):
            return
        try:
            self._claim_available()
        except Exception:
            log.exception("claiming after a run failed; the claim loop retries")
        finally:
            self._claiming.release()

    def sweep_once(self) -> SweepReport:
        report: SweepReport = self.store.sweep(
            max_recoveries=self.settings.max_recoveries, freeze_policy=self.freeze_policy
        )
        if report.changed:
            log.info("sweep: %s", report)
            self._wake.set()
        return report

    def _claim_loop(self) -> None:
        due_at: float | None = None
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                if due_at is not None and time.monotonic() >= due_at:
                    self.sweep_once()  # a retry's time or a lease's end has come: now, not later
                self.run_once()
                due_in = self.store.next_due_s()
            except Exception:
                log.exception("claim loop: claiming failed; retrying")
                due_in = 0.0
            due_at = None if due_in is None else time.monotonic() + due_in
            self._wait_for_work(due_in)

    def _wait_for_work(self, due_in: float | None) -> None:
        """Sleep until woken, until ``due_in`` has passed, or until a fallback tick.

        A queued run (``due_in`` 0) is looked at every ``claim_interval_s``; with
        nothing queued, ticks end the sleep early only when ``quiet()`` says a
        change may have gone unannounced.
        """
        tick = self.settings.claim_interval_s
        if due_in is not None and due_in <= 0:
            self._wake.wait(tick)
            return
        limit = IDLE_RECHECK_S if due_in is None else min(due_in, IDLE_RECHECK_S)
        deadline = time.monotonic() + limit
        while (left := deadline - time.monotonic()) > 0:
            if self._wake.wait(min(left, tick)) or not self._quiet():
                return

    def _quiet(self) -> bool:
        return self.queue_wake is not None and self.queue_wake.quiet()

    def _claim(self) -> Run | None:
        excluded = tuple(self.excluded_repos()) if self.excluded_repos is not None else ()
        run: Run | None = self.store.claim_next(
            self.owner,
            max_concurrency=self.max_concurrency,
            lease_s=self.settings.lease_s,
            exclude_repo_ids=excluded,
        )
        return run

    def _launch(self, run: Run) -> None:
        now = self.clock()
        ctx = RunContext(run, self.owner, self.store, StopToken(), self.settings.kill_grace_s)
        deadline = now + run.timeout_s if run.timeout_s is not None else None
        worker = Worker(
            run=run, ctx=ctx, started=now, deadline=deadline, last_renewed=now, last_beat=now
        )
        thread = threading.Thread(
            target=self._execute, args=(worker,), name=f"run-{run.id}", daemon=True
        )
        worker.thread = thread
        self._slots.take(worker)
        self._has_work.set()
        log.info("run %s started (attempt %s)", run.id, run.attempt)
        thread.start()

    # -- executing -----------------------------------------------------------------

    def _execute(self, worker: Worker) -> None:
        result: Outcome | str | None = None
        error: BaseException | None = None
        try:
            result = self.pipeline(worker.ctx)
        except Exception as exc:
            error = exc
        except BaseException as exc:  # SystemExit in a pipeline must not leak the slot
            error = exc
            worker.request_stop("shutdown", self.clock())
        ended: Run | None = None
        try:
            ended = self._settle(worker, result, error)
        finally:
            self._forget(worker, finishing=True)
        try:
            self._claim_after_run()
            if ended is not None:
                self._call("on_finished", self.on_finished, ended)
        finally:
            self._slots.finished()

    def _settle(
        self, worker: Worker, result: Outcome | str | None, error: BaseException | None
    ) -> Run | None:
        """Write the outcome; the run if it is terminal now (and ``on_settled`` saw it)."""
        if not worker.claim_settlement():
            return None
        try:
            run = write_outcome(
                self.store, worker, self.settings, result, error, self.freeze_policy
            )
        except Exception as exc:
            log.warning(
                "run %s: outcome not written (%s); the lease will expire",
                worker.run.id,
                summarise_traceback(exc, 3),
            )
            return None
        if run is None or not run.terminal:
            return None
        self._call("on_settled", self.on_settled, run)
        return run

    @staticmethod
    def _call(name: str, hook: Callable[[Run], None] | None, run: Run) -> None:
        if hook is None:
            return
        try:
            hook(run)
        except Exception:
            log.exception("run %s: %s failed", run.id, name)

    def _forget(self, worker: Worker, *, finishing: bool = False) -> None:
        self._slots.give_up(worker, finishing=finishing)
        self._wake.set()

    # -- monitoring ----------------------------------------------------------------

    def _monitor_loop(self) -> None:
        while not self._monitor_stop.is_set():
            self._await_work()
            if self._monitor_stop.wait(self._tick_s):
                return
            for worker in self._slots.workers():
                try:
                    self._watch(worker)
                except Exception:
                    log.exception("monitor: run %s", worker.run.id)

    def _await_work(self) -> None:
        """Block while this process runs nothing: an idle monitor does not tick."""
        self._has_work.clear()
        if not self._slots.workers():  # checked after the clear: a launch now sets it again
            self._has_work.wait()

    def _watch(self, worker: Worker) -> None:
        now = self.clock()
        if worker.deadline is not None and now >= worker.deadline and not worker.stop.stopped:
            worker.request_stop("timeout", now)
            self._note(
                worker,
                "timeout",
                f"execution timeout of {worker.run.timeout_s} s reached; stopping the run",
            )
        if now - worker.last_beat >= self._beat_s and not worker.settled:
            self._beat(worker, now)
        stuck_after = self.settings.kill_grace_s + STUCK_GRACE_S
        if worker.stop_at is not None and now - worker.stop_at > stuck_after:
            log.warning(
                "run %s: pipeline ignored its stop for %.0f s; abandoning its thread",
                worker.run.id,
                now - worker.stop_at,
            )
            ended = self._settle(worker, None, stop_error(worker.stop.reason))
            self._forget(worker)
            if ended is not None:
                self._call("on_finished", self.on_finished, ended)

    def _beat(self, worker: Worker, now: float) -> None:
        worker.last_beat = now
        run = worker.run
        try:
            beat = self.store.heartbeat(
                run.id, self.owner, worker.ctx.attempt, self.settings.lease_s
            )
        except Exception as exc:
            # Give up one beat before the lease lapses, so a sweeper elsewhere finds the
            # agent already stopping rather than still at work.
            if now - worker.last_renewed > self.settings.lease_s - self._beat_s:
                log.warning(
                    "run %s: lease not renewed for %.0f s (%s); stopping it",
                    run.id,
                    now - worker.last_renewed,
                    type(exc).__name__,
                )
                worker.request_stop("lease_lost", now)
            return
        if not beat.alive:
            log.warning("run %s: lease lost to another owner; stopping its agent", run.id)
            worker.request_stop("lease_lost", now)
            return
        worker.last_renewed = now
        if beat.cancel_requested and not worker.stop.stopped:
            worker.request_stop("cancelled", now)
            self._note(worker, "cancel", "cancel seen; stopping the agent")

    @staticmethod
    def _note(worker: Worker, kind: str, message: str) -> None:
        """A timeline note from the monitor; a lost lease here is noticed by the heartbeat."""
        try:
            worker.ctx.store.append_event_fenced(
                worker.run.id, worker.ctx.owner, worker.ctx.attempt, kind, message
            )
        except Exception as exc:
            log.info("run %s: note not written: %s", worker.run.id, type(exc).__name__)
