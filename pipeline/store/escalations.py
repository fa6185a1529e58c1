"""Escalations waiting for a human: list them, acknowledge them.

An escalation is open until a human acknowledges it, or a later run of the same
issue succeeds (``settle_issue``): the issue is done, so nothing waits for a human.
The escalations of a repo's current freeze are acknowledged by its unfreeze
(``ReposMixin``) only: acknowledging one would leave the queue stopped with nothing
open that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, func, or_, select, true, update

from pipeline.core.states import FROZEN_REASON, RunState
from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.models import EscalationRow, IssueRow, RepoRow, RunRow
from pipeline.store.records import Escalation, from_mapping

MAX_BY = 200  # the width of ``acknowledged_by``, which holds "who: note"
SETTLER = "afk-pipeline"  # who acknowledges what a later success settled


def settled_by(run_id: int) -> str:
    """The ``acknowledged_by`` of an escalation that run ``run_id``'s success settled."""
    return f"{SETTLER}: settled by run {run_id}, which succeeded"


def note_room(by: str) -> int:
    """The longest note ``by`` can leave on an acknowledgement (or an unfreeze): the
    column holds ``"<by>: <note>"``. The CLI and the API refuse a longer one; the store
    cuts what still comes (a direct caller), never failing on PostgreSQL."""
    return max(0, MAX_BY - len(by) - 2)


class AckRefused(Exception):
    """Nothing was acknowledged: some ids name no escalation, an acknowledged one, or one
    of a frozen repo's freeze (``pipeline.notify.escalation.ack_refusals`` says so in words).
    """

    def __init__(
        self,
        unknown: Sequence[int] = (),
        done: Sequence[Escalation] = (),
        frozen: Sequence[Escalation] = (),
    ) -> None:
        super().__init__(f"unknown {list(unknown)}, done {len(done)}, frozen {len(frozen)}")
        self.unknown = tuple(unknown)
        self.done = tuple(done)
        self.frozen = tuple(frozen)


def of_current_freeze() -> ColumnElement[bool]:
    """Escalations (joined with their repo) that the repo's unfreeze acknowledges.

    The same rule as ``repos._acknowledge_freeze``: the freeze's own row (reason
    ``frozen``, no run) and those of the run that froze it, while the repo is frozen.
    """
    own = and_(EscalationRow.reason == FROZEN_REASON, EscalationRow.run_id.is_(None))
    frozen = RepoRow.state == "frozen"
    return and_(frozen, or_(own, EscalationRow.run_id == RepoRow.frozen_run_id))


def settle_issue(conn: Connection, issue_id: int | None, succeeded: int | None = None) -> None:
    """Acknowledge, in ``conn``'s transaction, the open escalations of the runs of
    ``issue_id`` older than its latest succeeded run (``succeeded`` when the caller just
    ended it), as settled by that run; never one of a repo's current freeze (its unfreeze
    acknowledges it). Each is noted on its run's timeline. Called with a run's success and
    with every escalation of a run, so an ending told after a later success is settled too.

    The issue's row is locked first: a success and an escalation of the same issue written
    at once (PostgreSQL) are serialised, so whichever comes second sees the other.
    """
    if issue_id is None:
        return
    # FOR NO KEY UPDATE on PostgreSQL: a run or issue row that references the issue (a
    # KEY SHARE lock) is not held up by it; SQLite's write transaction serialises already.
    conn.execute(select(IssueRow.id).where(IssueRow.id == issue_id).with_for_update(key_share=True))
    if succeeded is None:
        succeeded = conn.execute(
            select(func.max(RunRow.id)).where(
                RunRow.issue_id == issue_id, RunRow.state == RunState.SUCCEEDED
            )
        ).scalar_one_or_none()
        if succeeded is None:
            return
    earlier = select(RunRow.id).where(RunRow.issue_id == issue_id, RunRow.id < succeeded)
    where = and_(
        EscalationRow.acknowledged_at.is_(None),
        EscalationRow.run_id.in_(earlier),
        _not_of_current_freeze(),
    )
    found = _escalations(conn, where)
    if found:
        _settle(conn, found, int(succeeded))


def _settle(conn: Connection, found: Sequence[Escalation], succeeded: int) -> None:
    by, now = settled_by(succeeded), db_now(conn)
    for escalation in found:
        done = conn.execute(
            update(EscalationRow)
            .where(EscalationRow.id == escalation.id, EscalationRow.acknowledged_at.is_(None))
            .values(acknowledged_by=by, acknowledged_at=now)
        ).rowcount
        if done and escalation.run_id is not None:  # a human's ack may have come first
            run = (escalation.run_id, StoreBase._run_attempt(conn, escalation.run_id))
            said = f"escalation {escalation.id} ({escalation.reason}) {by.split(': ', 1)[1]}"
            data = {"by": by, "settled_by_run": succeeded}
            StoreBase._append_event(conn, run, "escalation", said, data, now)


def _not_of_current_freeze() -> ColumnElement[bool]:
    """``not of_current_freeze()`` for escalations with a run, spelled without NULLs: a
    repo a person froze has no ``frozen_run_id``, and NOT of NULL would drop the row."""
    return or_(
        RepoRow.state != "frozen",
        RepoRow.frozen_run_id.is_(None),
        EscalationRow.run_id != RepoRow.frozen_run_id,
    )


def _query(where: ColumnElement[bool]) -> Any:
    return (
        select(
            EscalationRow.__table__,
            RepoRow.name.label("repo_name"),
            (RepoRow.state == "frozen").label("repo_frozen"),
            of_current_freeze().label("of_freeze"),
        )
        .join(RepoRow, RepoRow.id == EscalationRow.repo_id)
        .where(where)
        .order_by(EscalationRow.id)
    )


def _escalations(conn: Connection, where: ColumnElement[bool]) -> list[Escalation]:
    rows = conn.execute(_query(where)).mappings().all()
    flags = ("repo_frozen", "of_freeze")  # SQLite answers 0 or 1
    return [from_mapping(Escalation, {**r, **{f: bool(r[f]) for f in flags}}) for r in rows]


class EscalationsMixin(StoreBase):
    """Domain verbs for escalations."""

    def open_escalations(self, *, include_acknowledged: bool = False) -> list[Escalation]:
        """Escalations still waiting for a human, oldest first; all of them with the flag."""
        where = true() if include_acknowledged else EscalationRow.acknowledged_at.is_(None)
        with self._read() as conn:
            return _escalations(conn, where)

    def acknowledge_escalations(self, ids: Sequence[int], by: str) -> list[Escalation]:
        """Acknowledge every one of ``ids`` as ``by``, or none: ``AckRefused`` names each
        unknown, already acknowledged or frozen one (see the module's docstring)."""
        wanted = list(dict.fromkeys(ids))
        with self._write() as conn:
            found = {e.id: e for e in _escalations(conn, EscalationRow.id.in_(wanted))}
            refused = AckRefused(
                [i for i in wanted if i not in found],
                [e for e in found.values() if e.acknowledged],
                [e for e in found.values() if e.of_freeze and not e.acknowledged],
            )
            if refused.unknown or refused.done or refused.frozen:
                raise refused
            now = db_now(conn)
            done = conn.execute(
                update(EscalationRow)
                .where(EscalationRow.id.in_(wanted), EscalationRow.acknowledged_at.is_(None))
                .values(acknowledged_by=by[:MAX_BY], acknowledged_at=now)
            ).rowcount
            if done != len(wanted):  # another acknowledgement came first (PostgreSQL)
                raised = _escalations(conn, EscalationRow.id.in_(wanted))
                raise AckRefused(done=[e for e in raised if e.acknowledged])
            for escalation in found.values():
                if escalation.run_id is not None:
                    run = (escalation.run_id, self._run_attempt(conn, escalation.run_id))
                    said = f"escalation {escalation.id} ({escalation.reason}) acknowledged by {by}"
                    self._append_event(conn, run, "escalation", said, {"by": by}, now)
            return _escalations(conn, EscalationRow.id.in_(wanted))
