"""The notification outbox: notifications wait here until their channel took them.

A notification is written in the same store as the run it is about, so it
survives a crash or a restart; ``pipeline.notify.outbox`` delivers what is due
and reports each attempt back. A row being delivered is claimed for a short
while (``claimed_until``), so two replicas never send it at the same time and
a row claimed by a process that died is taken up again once the claim lapses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, case, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.models import NotificationRow, SideEffectRow
from pipeline.store.records import from_mapping

UNDELIVERED_STATES = ("pending", "abandoned")


@dataclass(frozen=True)
class NotificationDraft:
    """What to send: the caller masks nothing, the store masks title and body."""

    kind: str
    title: str
    body: str
    run_id: int | None = None
    # An idempotency key written in the notification's own transaction: a draft whose
    # key is already recorded is not queued again (a repeated or recovered ending).
    key: str | None = None


@dataclass(frozen=True)
class Channel:
    """A channel by its name without secrets and a digest of its URL."""

    name: str
    key: str


@dataclass(frozen=True)
class Notification:
    id: int
    kind: str
    channel: str
    channel_key: str
    title: str
    body: str
    state: str
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    run_id: int | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None


@dataclass(frozen=True)
class Attempt:
    """The outcome of one delivery attempt; ``retry_in_s`` None gives the row up."""

    notification_id: int
    ok: bool
    error: str | None = None
    retry_in_s: float | None = None


@dataclass(frozen=True)
class NotificationCounts:
    """Failed delivery attempts; rows pending or given up; rows given up."""

    failed_attempts: int
    undelivered: int
    abandoned: int = 0


class OutboxMixin(StoreBase):
    """Domain verbs of the outbox: add, take what is due, report an attempt."""

    def add_notification(self, draft: NotificationDraft, channels: Sequence[Channel]) -> list[int]:
        """Queue ``draft`` once per channel; the ids of the new rows.

        With ``draft.key`` the key is recorded in the same transaction, and a draft
        whose key is already recorded queues nothing: no crash between the two can
        lose the notification or queue it twice.
        """
        try:
            with self._write() as conn:
                now = db_now(conn)
                if draft.key is not None and not _record_key(conn, draft, now):
                    return []
                return [self._insert_notification(conn, draft, c, now) for c in channels]
        except IntegrityError:  # another replica recorded the key at the same moment
            if draft.key is None:
                raise
            return []

    @staticmethod
    def _insert_notification(
        conn: Connection, draft: NotificationDraft, channel: Channel, now: datetime
    ) -> int:
        new_id = conn.execute(
            insert(NotificationRow)
            .values(
                run_id=draft.run_id,
                kind=draft.kind,
                channel=channel.name,
                channel_key=channel.key,
                title=draft.title,
                body=draft.body,
                state="pending",
                attempts=0,
                next_attempt_at=now,
                created_at=now,
                updated_at=now,
            )
            .returning(NotificationRow.id)
        ).scalar_one()
        return int(new_id)

    def next_notification_due_s(self) -> float | None:
        """Seconds until a pending row may be taken (its next attempt, or a lapsed
        claim of a process that died), 0 if one may now; None when none is pending."""
        with self._read() as conn:
            claimed_later = NotificationRow.claimed_until > NotificationRow.next_attempt_at
            when = case(
                (claimed_later, NotificationRow.claimed_until),
                else_=NotificationRow.next_attempt_at,
            )
            due = conn.execute(
                select(func.min(when)).where(NotificationRow.state == "pending")
            ).scalar()
            if not isinstance(due, datetime):
                return None
            return max(0.0, (due - db_now(conn)).total_seconds())

    def take_due_notifications(self, claim_s: float, limit: int = 20) -> list[Notification]:
        """Claim pending rows whose time has come for ``claim_s`` seconds, oldest first."""
        due = self.next_notification_due_s()
        if due is None or due > 0:
            return []  # nothing to take: no write lock
        with self._write() as conn:
            now = db_now(conn)
            ids = conn.execute(
                select(NotificationRow.id)
                .where(
                    NotificationRow.state == "pending",
                    NotificationRow.next_attempt_at <= now,
                    or_(
                        NotificationRow.claimed_until.is_(None),
                        NotificationRow.claimed_until < now,
                    ),
                )
                .order_by(NotificationRow.id)
                .limit(limit)
            ).scalars()
            taken = [int(i) for i in ids if self._claim_notification(conn, int(i), now, claim_s)]
            return [self._read_notification(conn, i) for i in taken]

    @staticmethod
    def _claim_notification(conn: Connection, row_id: int, now: datetime, claim_s: float) -> bool:
        changed = conn.execute(
            update(NotificationRow)
            .where(
                NotificationRow.id == row_id,
                NotificationRow.state == "pending",
                or_(NotificationRow.claimed_until.is_(None), NotificationRow.claimed_until < now),
            )
            .values(claimed_until=now + timedelta(seconds=claim_s))
        ).rowcount
        return bool(changed == 1)

    @staticmethod
    def _read_notification(conn: Connection, row_id: int) -> Notification:
        row = conn.execute(
            select(NotificationRow.__table__).where(NotificationRow.id == row_id)
        ).mappings()
        return from_mapping(Notification, dict(row.one()))

    def record_attempt(self, attempt: Attempt) -> Notification:
        """Count one attempt: delivered, due again in ``retry_in_s``, or given up."""
        with self._write() as conn:
            now = db_now(conn)
            values: dict[str, object] = {
                "attempts": NotificationRow.attempts + 1,
                "claimed_until": None,
                "updated_at": now,
                "last_error": attempt.error,
            }
            if attempt.ok:
                values.update(state="delivered", delivered_at=now)
            elif attempt.retry_in_s is None:
                values.update(state="abandoned")
            else:
                values.update(next_attempt_at=now + timedelta(seconds=attempt.retry_in_s))
            conn.execute(
                update(NotificationRow)
                .where(NotificationRow.id == attempt.notification_id)
                .values(values)
            )
            return self._read_notification(conn, attempt.notification_id)

    def run_notifications(self, run_id: int) -> list[Notification]:
        """Every notification about ``run_id``, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                select(NotificationRow.__table__)
                .where(NotificationRow.run_id == run_id)
                .order_by(NotificationRow.id)
            ).mappings()
            return [from_mapping(Notification, r) for r in rows]

    def notification_counts(self) -> NotificationCounts:
        """Failed attempts so far (every attempt that did not deliver) and rows undelivered."""
        delivered = case((NotificationRow.state == "delivered", 1), else_=0)
        undelivered = case((NotificationRow.state.in_(UNDELIVERED_STATES), 1), else_=0)
        abandoned = case((NotificationRow.state == "abandoned", 1), else_=0)
        with self._read() as conn:
            row = conn.execute(
                select(
                    func.coalesce(func.sum(NotificationRow.attempts), 0),
                    func.coalesce(func.sum(delivered), 0),
                    func.coalesce(func.sum(undelivered), 0),
                    func.coalesce(func.sum(abandoned), 0),
                )
            ).one()
        return NotificationCounts(int(row[0]) - int(row[1]), int(row[2]), int(row[3]))


def _record_key(conn: Connection, draft: NotificationDraft, now: datetime) -> bool:
    """Record ``draft.key`` as a settled side effect; False if it was recorded before."""
    seen = conn.execute(select(SideEffectRow.id).where(SideEffectRow.key == draft.key)).first()
    if seen is not None:
        return False
    values = {"key": draft.key, "run_id": draft.run_id, "detail": "", "created_at": now}
    conn.execute(insert(SideEffectRow).values(**values, settled_at=now))
    return True
