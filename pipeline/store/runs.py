"""The run queue's domain verbs: enqueue, cancel and retry, and what the queue counts.

The store decides nothing: a run's priority, attempts and timeout come from
the caller (``EnqueueOptions``). Fenced worker writes live in
``pipeline.store.fenced``; claiming and the sweeper in ``pipeline.store.claim``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.core.states import RESUMABLE_REASONS, RETRYABLE_TERMINAL, RunState
from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.history import run_from_row, runs_query
from pipeline.store.models import BUSY_STATES, TERMINAL_STATES, WAITING_STATES, RunRow
from pipeline.store.records import Run
from pipeline.store.repos import UnknownRepo

QUEUE_FULL_RETRY_AFTER_S = 30.0
# A cancel reads the run and writes on condition of the state it read; another replica's
# claim or sweep may change that state in between (PostgreSQL), so it reads again.
CANCEL_TRIES = 3


class QueueFull(Exception):
    """Enqueue refused: too many runs are waiting (the API answers 429 + Retry-After)."""

    def __init__(self, depth: int, limit: int, retry_after_s: float = QUEUE_FULL_RETRY_AFTER_S):
        super().__init__(
            f"queue full: {depth} runs are waiting (queued or retry_wait), the limit "
            f"max_queue_depth is {limit}; retry in {retry_after_s:.0f} s or raise max_queue_depth"
        )
        self.depth = depth
        self.limit = limit
        self.retry_after_s = retry_after_s


class UnknownRun(LookupError):
    """A run id that does not exist."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} does not exist (see `pipeline runs list`)")
        self.run_id = run_id


class RunNotRetryable(ValueError):
    """``retry_run`` on a run that is not failed, escalated or cancelled."""


@dataclass(frozen=True)
class _Queued:
    """A new run's ``queued`` event: its message, when the run may start, what else it notes."""

    message: str
    run_after_s: float = 0.0
    data: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class EnqueueOptions:
    """How a run is queued, all decided by the caller (priority included)."""

    issue_id: int | None = None
    kind: str = "issue"
    priority: int = 0
    parent_id: int | None = None
    max_attempts: int = 3
    timeout_s: float | None = None
    requested_by: str | None = None
    max_queue_depth: int | None = None  # None: no bound
    run_after_s: float = 0.0
    # What queued it, kept in the ``queued`` event (``label``: intake, for the ready label);
    # the flow reads it to know whether the label's removal withdraws the issue.
    via: str | None = None
    # A commit an earlier run of the issue pushed, and that run's base: the new run only
    # watches it again (``retry_run`` carries them the same way).
    pushed_sha: str | None = None
    base_sha: str | None = None

    def row_values(self) -> dict[str, object]:
        return {
            "issue_id": self.issue_id,
            "kind": self.kind,
            "priority": self.priority,
            "parent_id": self.parent_id,
            "max_attempts": self.max_attempts,
            "timeout_s": self.timeout_s,
            "requested_by": self.requested_by,
            "pushed_sha": self.pushed_sha,
            "base_sha": self.base_sha,
        }


@dataclass(frozen=True)
class EnqueueResult:
    run: Run
    created: bool


def read_run(conn: Connection, run_id: int) -> Run:
    row = conn.execute(runs_query().where(RunRow.id == run_id)).first()
    if row is None:
        raise UnknownRun(run_id)
    return run_from_row(row)


def ended_values(state: str, now: datetime) -> dict[str, object]:
    """The columns a run's ending sets: terminal state, no owner, no lease."""
    return {
        "state": state,
        "owner": None,
        "lease_until": None,
        "finished_at": now,
        "updated_at": now,
    }


def _retry_of(old: Run, by: str) -> tuple[dict[str, object], _Queued]:
    """A retry's row values and ``queued`` event. A retried escalation the agent's question
    ended (``blocked``, ``tests_red``) is linked to it, as re-adding the ready label links
    it: the retry resumes that session with the replies posted since (ADR 28)."""
    answers = (
        old.kind == "issue"
        and old.state == RunState.ESCALATED
        and old.error_class in RESUMABLE_REASONS
    )
    values: dict[str, object] = {
        "issue_id": old.issue_id,
        "kind": old.kind,
        "priority": old.priority,
        "parent_id": old.id if answers else old.parent_id,
        "max_attempts": old.max_attempts,
        "timeout_s": old.timeout_s,
        "requested_by": by,
        # a run that pushed hands its commit on: the retry watches it, implements nothing
        "pushed_sha": old.pushed_sha,
        "base_sha": old.base_sha if old.pushed_sha else None,
    }
    said = f"queued by {by}: retry of run {old.id}" + (", answering it" if answers else "")
    return values, _Queued(said)


class RunsMixin(StoreBase):
    """Domain verbs of the queue that are not claiming, sweeping or fenced writes."""

    def enqueue(self, repo: str, options: EnqueueOptions | None = None) -> EnqueueResult:
        """Queue a run, or return the issue's active run (``created=False``).

        Dedupe is race-safe: two replicas inserting for one issue collide on
        ``uq_runs_active_issue`` and the loser re-reads the winner's run.
        """
        options = options or EnqueueOptions()
        try:
            with self._write() as conn:
                return self._enqueue_in(conn, repo, options)
        except IntegrityError:
            found = self._race_lost(options.issue_id)
            if found is None:
                raise
            return found

    def _enqueue_in(self, conn: Connection, repo: str, options: EnqueueOptions) -> EnqueueResult:
        repo_id = self._repo_id(conn, repo)
        if repo_id is None:
            raise UnknownRepo(repo)
        existing = self._active_for_issue(conn, options.issue_id)
        if existing is not None:
            return EnqueueResult(existing, created=False)
        if options.max_queue_depth is not None:
            depth = self._queue_depth(conn)
            if depth >= options.max_queue_depth:
                raise QueueFull(depth, options.max_queue_depth)
        values = options.row_values()
        noted = {"via": options.via} if options.via else {}
        queued = _Queued("queued", options.run_after_s, noted)
        run_id = self._insert_run(conn, repo_id, values, queued)
        return EnqueueResult(read_run(conn, run_id), created=True)

    def _race_lost(self, issue_id: int | None) -> EnqueueResult | None:
        """Another writer queued a run for the issue at the same time: that one is it."""
        with self._read() as conn:
            existing = self._active_for_issue(conn, issue_id)
        return EnqueueResult(existing, created=False) if existing is not None else None

    def _insert_run(
        self,
        conn: Connection,
        repo_id: int,
        values: Mapping[str, object],
        queued: _Queued,
    ) -> int:
        now = db_now(conn)
        run_id = conn.execute(
            insert(RunRow)
            .values(
                repo_id=repo_id,
                state="queued",
                attempt=0,
                failures=0,
                recoveries=0,
                run_after=now + timedelta(seconds=queued.run_after_s),
                created_at=now,
                updated_at=now,
                **values,
            )
            .returning(RunRow.id)
        ).scalar_one()
        data = {**{k: v for k, v in values.items() if v is not None}, **queued.data}
        self._append_event(conn, (run_id, 0), "queued", queued.message, data, now)
        return int(run_id)

    @staticmethod
    def _active_for_issue(conn: Connection, issue_id: int | None) -> Run | None:
        if issue_id is None:
            return None
        row = conn.execute(
            runs_query().where(RunRow.issue_id == issue_id, RunRow.state.not_in(TERMINAL_STATES))
        ).first()
        return run_from_row(row) if row is not None else None

    @staticmethod
    def _queue_depth(conn: Connection) -> int:
        count = conn.execute(select(func.count(RunRow.id)).where(RunRow.state.in_(WAITING_STATES)))
        return int(count.scalar_one())

    def cancel_run(self, run_id: int, by: str) -> Run:
        """Cancel: a waiting run ends at once, a busy one is flagged for its worker.

        A run already terminal is returned unchanged (cancelling is idempotent). Each
        write is conditional on the state it was read in: on PostgreSQL another replica
        may claim the run between the read and the write, and a claimed run is flagged
        for its worker, never ended under it.
        """
        with self._write() as conn:
            now = db_now(conn)
            for _ in range(CANCEL_TRIES):  # read again when a claim or a sweep came between
                run = read_run(conn, run_id)
                if run.state in WAITING_STATES:
                    done = self._cancel_waiting(conn, run, by, now)
                elif run.state in BUSY_STATES and not run.cancel_requested:
                    done = self._flag_cancel(conn, run, by, now)
                else:
                    done = True  # ended, or its worker has been asked already
                if done:
                    break
            return read_run(conn, run_id)

    def _cancel_waiting(self, conn: Connection, run: Run, by: str, now: datetime) -> bool:
        """End a waiting run cancelled; False when it is no longer waiting."""
        said = f"cancelled by {by}"
        ended = conn.execute(
            update(RunRow)
            .where(RunRow.id == run.id, RunRow.state.in_(WAITING_STATES))
            .values(**ended_values("cancelled", now), error_class="cancelled", error=said)
        ).rowcount
        if not ended:
            return False
        data = {"state": "cancelled", "by": by}
        self._append_event(conn, (run.id, run.attempt), "state", said, data, now)
        return True

    def _flag_cancel(self, conn: Connection, run: Run, by: str, now: datetime) -> bool:
        """Ask a busy run's worker to stop it; False when it is no longer busy."""
        flagged = conn.execute(
            update(RunRow)
            .where(RunRow.id == run.id, RunRow.state.in_(BUSY_STATES))
            .values(cancel_requested=True, updated_at=now)
        ).rowcount
        if not flagged:
            return False
        said = f"cancel requested by {by}"
        self._append_event(conn, (run.id, run.attempt), "cancel", said, {"by": by}, now)
        return True

    def retry_run(self, run_id: int, by: str) -> EnqueueResult:
        """Queue a new run like a failed/escalated/cancelled one (the old run stays as it is).

        A run that pushed hands its commit on: the new run watches it again and implements
        nothing (the change is on the default branch; doing it again would push it twice).
        """
        try:
            with self._write() as conn:
                old = read_run(conn, run_id)
                if old.state not in RETRYABLE_TERMINAL:
                    raise RunNotRetryable(
                        f"run {run_id} is {old.state}; only {', '.join(RETRYABLE_TERMINAL)} "
                        "runs can be retried"
                    )
                existing = self._active_for_issue(conn, old.issue_id)
                if existing is not None:
                    return EnqueueResult(existing, created=False)
                values, queued = _retry_of(old, by)
                new_id = self._insert_run(conn, old.repo_id, values, queued)
                self._append_event(
                    conn,
                    (run_id, old.attempt),
                    "retry",
                    f"retried by {by} as run {new_id}",
                    {"new_run": new_id},
                )
                return EnqueueResult(read_run(conn, new_id), created=True)
        except IntegrityError:
            with self._read() as conn:
                found = self._active_for_issue(conn, read_run(conn, run_id).issue_id)
            if found is None:
                raise
            return EnqueueResult(found, created=False)

    def active_count(self) -> int:
        """Runs past ``queued`` and not ended (what the global cap counts)."""
        with self._read() as conn:
            count = conn.execute(select(func.count(RunRow.id)).where(RunRow.state.in_(BUSY_STATES)))
            return int(count.scalar_one())

    def queue_depth(self) -> int:
        """Runs waiting: ``queued`` plus ``retry_wait`` (what ``max_queue_depth`` bounds)."""
        with self._read() as conn:
            return self._queue_depth(conn)

    def repo_cost_since(self, repo_id: int, since: datetime) -> float:
        """Agent cost of the repo's runs updated at or after ``since`` (daily budgets)."""
        with self._read() as conn:
            total = conn.execute(
                select(func.coalesce(func.sum(RunRow.cost_usd), 0.0)).where(
                    RunRow.repo_id == repo_id, RunRow.updated_at >= since
                )
            ).scalar_one()
            return float(total)
