"""The run queue's domain verbs: enqueue, fenced worker writes, cancel and retry.

Every write a worker makes is fenced on ``(id, owner, attempt)`` and on the run
not being terminal: when the conditional UPDATE matches no row, the worker has
lost its lease and ``LeaseLost`` is raised so it writes nothing more. Claiming
and the sweeper live in ``pipeline.store.claim``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.core.errors import LeaseLost
from pipeline.store.base import StoreBase
from pipeline.store.claim_pg import finish_postgres
from pipeline.store.engine import db_now
from pipeline.store.history import run_from_row, runs_query
from pipeline.store.models import BUSY_STATES, TERMINAL_STATES, WAITING_STATES, RunRow
from pipeline.store.records import Run
from pipeline.store.repos import UnknownRepo

# A fix-forward run goes ahead of every issue run of its repo (DESIGN.md).
FIX_FORWARD_PRIORITY = 1_000_000
QUEUE_FULL_RETRY_AFTER_S = 30.0
UPDATABLE_FIELDS = frozenset(
    {
        "base_sha",
        "head_sha",
        "pushed_sha",
        "branch",
        "worktree",
        "agent_session",
        "tokens_in",
        "tokens_out",
        "cost_usd",
        "num_turns",
        "setup_s",
        "summary",
    }
)
RETRYABLE_TERMINAL = ("failed", "escalated", "cancelled")


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
class EnqueueResult:
    run: Run
    created: bool


@dataclass(frozen=True)
class Heartbeat:
    alive: bool
    cancel_requested: bool


def fenced(run_id: int, owner: str, attempt: int) -> Any:
    """The WHERE clause of every worker write: still ours, still this attempt, not ended."""
    return (
        (RunRow.id == run_id)
        & (RunRow.owner == owner)
        & (RunRow.attempt == attempt)
        & RunRow.state.not_in(TERMINAL_STATES)
    )


def read_run(conn: Connection, run_id: int) -> Run:
    row = conn.execute(runs_query().where(RunRow.id == run_id)).first()
    if row is None:
        raise UnknownRun(run_id)
    return run_from_row(row)


def _check_fields(fields: Mapping[str, object]) -> None:
    unknown = sorted(set(fields) - UPDATABLE_FIELDS)
    if unknown:
        raise ValueError(
            f"run fields {unknown} cannot be updated by a worker; "
            f"allowed: {sorted(UPDATABLE_FIELDS)}"
        )


class RunsMixin(StoreBase):
    """Domain verbs of the queue that are not claiming or sweeping."""

    def enqueue(
        self,
        repo: str,
        *,
        issue_id: int | None = None,
        kind: str = "issue",
        priority: int = 0,
        parent_id: int | None = None,
        max_attempts: int = 3,
        timeout_s: float | None = None,
        requested_by: str | None = None,
        max_queue_depth: int | None = None,
        run_after_s: float = 0.0,
    ) -> EnqueueResult:
        """Queue a run, or return the issue's active run (``created=False``).

        Dedupe is race-safe: two replicas inserting for one issue collide on
        ``uq_runs_active_issue`` and the loser re-reads the winner's run.
        """
        if kind == "fix_forward":
            priority = max(priority, FIX_FORWARD_PRIORITY)
        values = {
            "issue_id": issue_id,
            "kind": kind,
            "priority": priority,
            "parent_id": parent_id,
            "max_attempts": max_attempts,
            "timeout_s": timeout_s,
            "requested_by": requested_by,
        }
        try:
            with self._write() as conn:
                repo_id = self._repo_id(conn, repo)
                if repo_id is None:
                    raise UnknownRepo(repo)
                existing = self._active_for_issue(conn, issue_id)
                if existing is not None:
                    return EnqueueResult(existing, created=False)
                if max_queue_depth is not None:
                    depth = self._queue_depth(conn)
                    if depth >= max_queue_depth:
                        raise QueueFull(depth, max_queue_depth)
                run_id = self._insert_run(conn, repo_id, values, run_after_s, "queued")
                return EnqueueResult(read_run(conn, run_id), created=True)
        except IntegrityError:
            with self._read() as conn:
                existing = self._active_for_issue(conn, issue_id)
            if existing is None:
                raise
            return EnqueueResult(existing, created=False)

    def _insert_run(
        self,
        conn: Connection,
        repo_id: int,
        values: Mapping[str, object],
        run_after_s: float,
        message: str,
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
                run_after=now + timedelta(seconds=run_after_s),
                created_at=now,
                updated_at=now,
                **values,
            )
            .returning(RunRow.id)
        ).scalar_one()
        data = {k: v for k, v in values.items() if v is not None}
        self._append_event(conn, run_id, 0, "queued", message, data, now)
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

    def heartbeat(self, run_id: int, owner: str, attempt: int, lease_s: float) -> Heartbeat:
        """Renew the lease; ``alive=False`` means another owner has the run now."""
        with self._write() as conn:
            now = db_now(conn)
            flag = conn.execute(
                update(RunRow)
                .where(fenced(run_id, owner, attempt), RunRow.state.in_(BUSY_STATES))
                .values(lease_until=now + timedelta(seconds=lease_s))
                .returning(RunRow.cancel_requested)
            ).scalar_one_or_none()
        if flag is None:
            return Heartbeat(alive=False, cancel_requested=False)
        return Heartbeat(alive=True, cancel_requested=bool(flag))

    def transition(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        to_state: str,
        message: str | None = None,
        **fields: object,
    ) -> Run:
        """Move a run we hold to another busy state (fenced); terminal states use ``finish``."""
        if to_state not in BUSY_STATES:
            raise ValueError(f"transition to {to_state!r}: only {BUSY_STATES} (use finish)")
        _check_fields(fields)
        with self._write() as conn:
            now = db_now(conn)
            self._fenced_update(
                conn, run_id, owner, attempt, {"state": to_state, "updated_at": now, **fields}
            )
            self._append_event(
                conn, run_id, attempt, "state", message or to_state, {"state": to_state}, now
            )
            return read_run(conn, run_id)

    def update_run(self, run_id: int, owner: str, attempt: int, **fields: object) -> None:
        """Record facts about a run we hold (SHAs, worktree, tokens, cost...), fenced."""
        _check_fields(fields)
        with self._write() as conn:
            values = {"updated_at": db_now(conn), **fields}
            self._fenced_update(conn, run_id, owner, attempt, values)

    def append_event(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        kind: str,
        message: str,
        data: Mapping[str, object] | None = None,
    ) -> None:
        """Append to the timeline of a run we hold; ``LeaseLost`` when it is not ours."""
        with self._write() as conn:
            now = db_now(conn)
            self._fenced_update(conn, run_id, owner, attempt, {"updated_at": now})
            self._append_event(conn, run_id, attempt, kind, message, data, now)

    @staticmethod
    def _fenced_update(
        conn: Connection, run_id: int, owner: str, attempt: int, values: Mapping[str, object]
    ) -> None:
        result = conn.execute(
            update(RunRow).where(fenced(run_id, owner, attempt)).values(dict(values))
        )
        if result.rowcount != 1:
            raise LeaseLost(f"run {run_id} attempt {attempt} is no longer held by {owner}")

    def finish(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        state: str,
        *,
        error_class: str | None = None,
        error: str | None = None,
        summary: str | None = None,
    ) -> Run:
        """End a run we hold in a terminal state; clears owner and lease."""
        if state not in TERMINAL_STATES:
            raise ValueError(f"finish with {state!r}: a terminal state is one of {TERMINAL_STATES}")
        values: dict[str, object] = {"error_class": error_class, "error": error}
        if self.dialect == "postgresql":  # one statement (pipeline.store.claim_pg)
            return finish_postgres(self.engine, (run_id, owner, attempt, state), summary, values)
        if summary is not None:
            values["summary"] = summary
        with self._write() as conn:
            now = db_now(conn)
            self._fenced_update(conn, run_id, owner, attempt, {**self._ended(state, now), **values})
            message = state if error is None else f"{state}: {error}"
            self._append_event(
                conn,
                run_id,
                attempt,
                "state",
                message,
                {"state": state, "error_class": error_class},
                now,
            )
            return read_run(conn, run_id)

    @staticmethod
    def _ended(state: str, now: datetime) -> dict[str, object]:
        return {
            "state": state,
            "owner": None,
            "lease_until": None,
            "finished_at": now,
            "updated_at": now,
        }

    def schedule_retry(
        self, run_id: int, owner: str, attempt: int, *, delay_s: float, error_class: str, error: str
    ) -> Run:
        """Count a failure; back to ``retry_wait`` for ``delay_s``, or ``failed`` when used up."""
        with self._write() as conn:
            now = db_now(conn)
            row = conn.execute(
                select(RunRow.failures, RunRow.max_attempts).where(fenced(run_id, owner, attempt))
            ).first()
            if row is None:
                raise LeaseLost(f"run {run_id} attempt {attempt} is no longer held by {owner}")
            failures = int(row[0]) + 1
            values: dict[str, object] = {
                "failures": failures,
                "error_class": error_class,
                "error": error,
            }
            if failures >= int(row[1]):
                values.update(self._ended("failed", now))
                message = f"failed after {failures} attempts: {error}"
            else:
                values.update(
                    state="retry_wait",
                    owner=None,
                    lease_until=None,
                    updated_at=now,
                    run_after=now + timedelta(seconds=delay_s),
                    deadline_at=None,
                )
                message = f"retry in {delay_s:.1f} s ({failures}/{row[1]} failed): {error}"
            self._fenced_update(conn, run_id, owner, attempt, values)
            self._append_event(
                conn,
                run_id,
                attempt,
                "state",
                message,
                {
                    "state": values["state"],
                    "error_class": error_class,
                    "delay_s": round(delay_s, 3),
                },
                now,
            )
            return read_run(conn, run_id)

    def cancel_run(self, run_id: int, by: str) -> Run:
        """Cancel: a waiting run ends at once, a busy one is flagged for its worker.

        A run already terminal is returned unchanged (cancelling is idempotent).
        """
        with self._write() as conn:
            run = read_run(conn, run_id)
            now = db_now(conn)
            if run.state in WAITING_STATES:
                conn.execute(
                    update(RunRow)
                    .where(RunRow.id == run_id)
                    .values(
                        **self._ended("cancelled", now),
                        error_class="cancelled",
                        error=f"cancelled by {by}",
                    )
                )
                self._append_event(
                    conn,
                    run_id,
                    run.attempt,
                    "state",
                    f"cancelled by {by}",
                    {"state": "cancelled", "by": by},
                    now,
                )
            elif run.state in BUSY_STATES and not run.cancel_requested:
                conn.execute(
                    update(RunRow)
                    .where(RunRow.id == run_id)
                    .values(cancel_requested=True, updated_at=now)
                )
                self._append_event(
                    conn,
                    run_id,
                    run.attempt,
                    "cancel",
                    f"cancel requested by {by}",
                    {"by": by},
                    now,
                )
            return read_run(conn, run_id)

    def retry_run(self, run_id: int, by: str) -> EnqueueResult:
        """Queue a new run like a failed/escalated/cancelled one (the old run stays as it is)."""
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
                values = {
                    "issue_id": old.issue_id,
                    "kind": old.kind,
                    "priority": old.priority,
                    "parent_id": old.parent_id,
                    "max_attempts": old.max_attempts,
                    "timeout_s": old.timeout_s,
                    "requested_by": by,
                }
                new_id = self._insert_run(
                    conn, old.repo_id, values, 0.0, f"queued by {by}: retry of run {run_id}"
                )
                self._append_event(
                    conn,
                    run_id,
                    old.attempt,
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
