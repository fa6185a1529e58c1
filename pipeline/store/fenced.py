"""Fenced worker writes: every write of a worker is checked against its lease.

Every write a worker makes is fenced on ``(id, owner, attempt)`` and on the run
not being terminal: when the conditional UPDATE matches no row, the worker has
lost its lease and ``LeaseLost`` is raised so it writes nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NotRequired, TypedDict, Unpack

from sqlalchemy import Connection, and_, select, update

from pipeline.core.errors import LeaseLost
from pipeline.core.faults import sabotaged
from pipeline.core.states import RunState
from pipeline.store.base import StoreBase
from pipeline.store.claim_pg import finish_postgres
from pipeline.store.engine import db_now
from pipeline.store.escalations import settle_issue
from pipeline.store.models import BUSY_STATES, TERMINAL_STATES, RunRow
from pipeline.store.records import Run
from pipeline.store.repos import RepoFreeze, freeze_in
from pipeline.store.runs import ended_values, read_run

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
        "progress_comment_id",
    }
)


@dataclass(frozen=True)
class Heartbeat:
    alive: bool
    cancel_requested: bool


def fenced(run_id: int, owner: str, attempt: int, *more: Any) -> Any:
    """The WHERE clause of every worker write: still ours, still this attempt, not ended."""
    if sabotaged("remove_fence"):  # tests only: the pause scenario must notice it
        return RunRow.id == run_id
    return and_(
        RunRow.id == run_id,
        RunRow.owner == owner,
        RunRow.attempt == attempt,
        RunRow.state.not_in(TERMINAL_STATES),
        *more,
    )


def _check_fields(fields: Mapping[str, object]) -> None:
    unknown = sorted(set(fields) - UPDATABLE_FIELDS)
    if unknown:
        raise ValueError(
            f"run fields {unknown} cannot be updated by a worker; "
            f"allowed: {sorted(UPDATABLE_FIELDS)}"
        )


def _retry_values(
    failures: int, max_attempts: int, delay_s: float, now: datetime
) -> tuple[dict[str, object], str]:
    """What a counted failure changes, and how the timeline says it."""
    if failures >= max_attempts:
        return ended_values("failed", now), f"failed after {failures} attempts"
    values: dict[str, object] = {
        "state": "retry_wait",
        "owner": None,
        "lease_until": None,
        "updated_at": now,
        "run_after": now + timedelta(seconds=delay_s),
        "deadline_at": None,
    }
    return values, f"retry in {delay_s:.1f} s ({failures}/{max_attempts} failed)"


class FinishDetails(TypedDict, total=False):
    """Why a run ended: its error class and message, and a summary for the run list.

    ``freeze``, when given, freezes the run's repo in the transaction that ends the run
    (whether an ending freezes is the caller's policy, ``pipeline.run.recovery``).
    """

    error_class: str | None
    error: str | None
    summary: str | None
    freeze: RepoFreeze | None


class RetryDetails(TypedDict):
    """A counted failure: the delay before the retry, why, and the freeze written with it
    should this failure use up the run's attempts and end it ``failed``."""

    delay_s: float
    error_class: str
    error: str
    freeze: NotRequired[RepoFreeze | None]


class FencedMixin(StoreBase):
    """Domain verbs of a worker holding a run's lease."""

    def heartbeat(self, run_id: int, owner: str, attempt: int, lease_s: float) -> Heartbeat:
        """Renew the lease; ``alive=False`` means another owner has the run now."""
        with self._write() as conn:
            now = db_now(conn)
            flag = conn.execute(
                update(RunRow)
                .where(fenced(run_id, owner, attempt, RunRow.state.in_(BUSY_STATES)))
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
                conn, (run_id, attempt), "state", message or to_state, {"state": to_state}, now
            )
            return read_run(conn, run_id)

    def update_run(self, run_id: int, owner: str, attempt: int, **fields: object) -> None:
        """Record facts about a run we hold (SHAs, worktree, tokens, cost...), fenced."""
        _check_fields(fields)
        with self._write() as conn:
            values = {"updated_at": db_now(conn), **fields}
            self._fenced_update(conn, run_id, owner, attempt, values)

    def append_event_fenced(
        self,
        run_id: int,
        owner: str,
        attempt: int,
        kind: str,
        message: str,
        data: Mapping[str, object] | None = None,
    ) -> None:
        """Append to the timeline of a run we hold; ``LeaseLost`` when it is not ours.

        ``record_event`` appends without the lease check, for writers that hold none.
        """
        with self._write() as conn:
            now = db_now(conn)
            self._fenced_update(conn, run_id, owner, attempt, {"updated_at": now})
            self._append_event(conn, (run_id, attempt), kind, message, data, now)

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
        **details: Unpack[FinishDetails],
    ) -> Run:
        """End a run we hold in a terminal state; clears owner and lease.

        With ``freeze`` the run's repo is frozen in the same transaction; a lost
        fence (``LeaseLost``) writes neither.
        """
        if state not in TERMINAL_STATES:
            raise ValueError(f"finish with {state!r}: a terminal state is one of {TERMINAL_STATES}")
        error_class, error = details.get("error_class"), details.get("error")
        summary, freeze = details.get("summary"), details.get("freeze")
        values: dict[str, object] = {"error_class": error_class, "error": error}
        # One statement on PostgreSQL (pipeline.store.claim_pg), whose fence is its own SQL:
        # the tests' sabotage takes the path below, whose fence it removes.
        if self.dialect == "postgresql" and not sabotaged("remove_fence"):
            return self._finish_postgres((run_id, owner, attempt, state), summary, values, freeze)
        if summary is not None:
            values["summary"] = summary
        with self._write() as conn:
            now = db_now(conn)
            self._fenced_update(
                conn, run_id, owner, attempt, {**ended_values(state, now), **values}
            )
            message = state if error is None else f"{state}: {error}"
            data = {"state": state, "error_class": error_class}
            self._append_event(conn, (run_id, attempt), "state", message, data, now)
            return _settled_with(conn, _frozen_with(conn, read_run(conn, run_id), freeze))

    def _finish_postgres(
        self,
        fence: tuple[int, str, int, str],
        summary: str | None,
        values: dict[str, object],
        freeze: RepoFreeze | None,
    ) -> Run:
        """The finish statement in autocommit; with a freeze, both in one transaction.

        A success of an issue's run settles its earlier escalations (``settle_issue``)
        in a second transaction, so a run without an issue (a fix-forward) keeps the one
        statement; a crash between the two leaves them open until acknowledged (ADR 36).
        """
        if freeze is None:
            with self.engine.connect() as conn:
                autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
                run = finish_postgres(autocommit, fence, summary, values)
            if run.state == RunState.SUCCEEDED and run.issue_id is not None:
                with self._write() as conn:
                    _settled_with(conn, run)
            return run
        with self._write() as conn:
            return _frozen_with(conn, finish_postgres(conn, fence, summary, values), freeze)

    def schedule_retry(
        self, run_id: int, owner: str, attempt: int, **failure: Unpack[RetryDetails]
    ) -> Run:
        """Count a failure; back to ``retry_wait`` for ``delay_s``, or ``failed`` when used up
        (then with its ``freeze``, if any, in the same transaction)."""
        error_class, error = failure["error_class"], failure["error"]
        with self._write() as conn:
            now = db_now(conn)
            row = conn.execute(
                select(RunRow.failures, RunRow.max_attempts).where(fenced(run_id, owner, attempt))
            ).first()
            if row is None:
                raise LeaseLost(f"run {run_id} attempt {attempt} is no longer held by {owner}")
            failures = int(row[0]) + 1
            values, said = _retry_values(failures, int(row[1]), failure["delay_s"], now)
            values.update(failures=failures, error_class=error_class, error=error)
            self._fenced_update(conn, run_id, owner, attempt, values)
            data = {
                "state": values["state"],
                "error_class": error_class,
                "delay_s": round(failure["delay_s"], 3),
            }
            self._append_event(conn, (run_id, attempt), "state", f"{said}: {error}", data, now)
            return _frozen_with(conn, read_run(conn, run_id), failure.get("freeze"))


def _settled_with(conn: Connection, run: Run) -> Run:
    """``run``; when it succeeded, the escalations of its issue's earlier runs are settled
    in ``conn``'s transaction (ADR 36)."""
    if run.state == RunState.SUCCEEDED:
        settle_issue(conn, run.issue_id, run.id)
    return run


def _frozen_with(conn: Connection, run: Run, freeze: RepoFreeze | None) -> Run:
    """``run``, its repo frozen first in ``conn``'s transaction when it ended with a freeze."""
    if freeze is not None and run.terminal:
        freeze_in(conn, (run.repo_id, run.repo_name), run.id, freeze, db_now(conn))
    return run
