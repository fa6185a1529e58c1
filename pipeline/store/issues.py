"""Issues seen on trackers, the embedded local tracker, and idempotency keys."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Row, insert, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.models import (
    IssueRow,
    LocalCommentRow,
    LocalIssueRow,
    SideEffectRow,
    WebhookDeliveryRow,
)
from pipeline.store.records import Issue, from_mapping
from pipeline.store.repos import UnknownRepo

# What ``claim_pending`` found: the effect is ours to perform, done, or reserved by another.
Claim = Literal["taken", "settled", "busy"]


@dataclass(frozen=True)
class LocalIssue:
    id: int
    repo: str
    title: str
    body: str
    author: str
    state: str
    labels: tuple[str, ...]
    labeller: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class LocalComment:
    id: int
    issue_id: int
    author: str
    body: str
    created_at: datetime


@dataclass(frozen=True)
class IssueSnapshot:
    """The title and body as intake saw them when it accepted the trusted ready label.

    ``labelled_at`` is the forge's time of that label (``None`` if no event
    said). A snapshot is kept while the label time stays the same, so later
    polls never overwrite what was first seen; a new label time (the issue was
    labelled again) replaces it. ``remote_updated_at`` is the issue's
    ``updated_at`` on the forge at that moment, which places the snapshot among
    the forge's own edit times.
    """

    title: str
    body: str
    labelled_at: str | None
    remote_updated_at: str | None


class UnknownIssue(LookupError):
    def __init__(self, issue_id: int) -> None:
        super().__init__(f"local issue {issue_id} does not exist (see `pipeline issue list`)")


def _local(row: dict[str, object]) -> LocalIssue:
    labels = json.loads(str(row["labels_json"]) or "[]")
    return from_mapping(LocalIssue, {**row, "labels": tuple(labels)})


def _snapshot_values(
    found: Row[Any] | None, snapshot: IssueSnapshot | None, now: datetime
) -> dict[str, object]:
    """The snapshot columns to write: none if a snapshot of this labelling is kept."""
    if snapshot is None:
        return {}
    if found is not None and found.snapshot_taken_at is not None:
        if snapshot.labelled_at is None or found.labelled_at in (None, snapshot.labelled_at):
            return {}
    return {
        "labelled_at": snapshot.labelled_at,
        "labelled_title": snapshot.title,
        "labelled_body": snapshot.body,
        "labelled_remote_updated_at": snapshot.remote_updated_at,
        "snapshot_taken_at": now,
    }


@dataclass(frozen=True)
class SeenIssue:
    """An issue as intake saw it on its tracker."""

    tracker: str
    number: int
    title: str
    author: str
    url: str
    external_id: str = ""
    labeller: str | None = None  # None keeps the labeller already recorded
    remote_updated_at: str | None = None
    snapshot: IssueSnapshot | None = None

    def row_values(self) -> dict[str, str | None]:
        values: dict[str, str | None] = {
            "tracker": self.tracker,
            "title": self.title,
            "author": self.author,
            "url": self.url,
            "external_id": self.external_id,
            "remote_updated_at": self.remote_updated_at,
        }
        if self.labeller is not None:
            values["labeller"] = self.labeller
        return values


class IssuesMixin(StoreBase):
    """Domain verbs for issues, local-tracker issues, side effects and deliveries."""

    def upsert_issue(self, repo: str, issue: SeenIssue) -> Issue:
        """Record an issue as last seen on its tracker; returns it with its id.

        ``issue.snapshot`` is stored unless one for the same label time is already kept.
        """
        values = issue.row_values()
        try:
            return self._upsert_issue(repo, issue.number, values, issue.snapshot)
        except IntegrityError:
            # Another replica inserted this issue between our SELECT and INSERT (PostgreSQL
            # does not serialise them as SQLite's BEGIN IMMEDIATE does): now it is an update.
            return self._upsert_issue(repo, issue.number, values, issue.snapshot)

    def _upsert_issue(
        self,
        repo: str,
        number: int,
        values: dict[str, str | None],
        snapshot: IssueSnapshot | None,
    ) -> Issue:
        with self._write() as conn:
            repo_id = self._repo_id(conn, repo)
            if repo_id is None:
                raise UnknownRepo(repo)
            now = db_now(conn)
            where = (IssueRow.repo_id == repo_id, IssueRow.number == number)
            kept = select(IssueRow.id, IssueRow.labelled_at, IssueRow.snapshot_taken_at)
            found = conn.execute(kept.where(*where)).first()
            fields = {**values, **_snapshot_values(found, snapshot, now)}
            if found is None:
                conn.execute(
                    insert(IssueRow).values(
                        repo_id=repo_id, number=number, created_at=now, updated_at=now, **fields
                    )
                )
            else:
                conn.execute(update(IssueRow).where(*where).values(updated_at=now, **fields))
            row = conn.execute(select(IssueRow.__table__).where(*where)).mappings().one()
        return from_mapping(Issue, row)

    def get_issue(self, issue_id: int) -> Issue | None:
        with self._read() as conn:
            row = (
                conn.execute(select(IssueRow.__table__).where(IssueRow.id == issue_id))
                .mappings()
                .first()
            )
        return from_mapping(Issue, row) if row is not None else None

    # The embedded local tracker ------------------------------------------------

    def add_local_issue(
        self, repo: str, title: str, body: str = "", author: str = "", labels: tuple[str, ...] = ()
    ) -> LocalIssue:
        with self._write() as conn:
            now = db_now(conn)
            new_id = conn.execute(
                insert(LocalIssueRow)
                .values(
                    repo=repo,
                    title=title,
                    body=body,
                    author=author,
                    state="open",
                    labels_json=json.dumps(sorted(set(labels))),
                    labeller=author if labels else None,
                    created_at=now,
                    updated_at=now,
                )
                .returning(LocalIssueRow.id)
            ).scalar_one()
        issue = self.get_local_issue(int(new_id))
        assert issue is not None
        return issue

    def get_local_issue(self, issue_id: int) -> LocalIssue | None:
        with self._read() as conn:
            row = (
                conn.execute(select(LocalIssueRow.__table__).where(LocalIssueRow.id == issue_id))
                .mappings()
                .first()
            )
        return _local(dict(row)) if row is not None else None

    def list_local_issues(
        self, repo: str | None = None, label: str | None = None, state: str | None = "open"
    ) -> list[LocalIssue]:
        query = select(LocalIssueRow.__table__).order_by(LocalIssueRow.id)
        if repo:
            query = query.where(LocalIssueRow.repo == repo)
        if state:
            query = query.where(LocalIssueRow.state == state)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        issues = [_local(dict(r)) for r in rows]
        return [i for i in issues if label is None or label in i.labels]

    def change_local_labels(
        self,
        issue_id: int,
        *,
        add: tuple[str, ...] = (),
        remove: tuple[str, ...] = (),
        by: str = "",
    ) -> LocalIssue:
        # Locked on PostgreSQL (SQLite's write transaction is exclusive already): an
        # operator's `pipeline issue label` and the daemon's label swap read and write
        # the same list, and neither may write over the other's change.
        with self._write() as conn:
            row = conn.execute(
                select(LocalIssueRow.labels_json)
                .where(LocalIssueRow.id == issue_id)
                .with_for_update()
            ).first()
            if row is None:
                raise UnknownIssue(issue_id)
            labels = (set(json.loads(row[0] or "[]")) | set(add)) - set(remove)
            values: dict[str, object] = {
                "labels_json": json.dumps(sorted(labels)),
                "updated_at": db_now(conn),
            }
            if add:
                values["labeller"] = by
            conn.execute(update(LocalIssueRow).where(LocalIssueRow.id == issue_id).values(**values))
        issue = self.get_local_issue(issue_id)
        assert issue is not None
        return issue

    def close_local_issue(self, issue_id: int) -> bool:
        """Close local issue ``issue_id``: True if this closed it, False if it was closed."""
        with self._write() as conn:
            state = conn.execute(
                select(LocalIssueRow.state).where(LocalIssueRow.id == issue_id).with_for_update()
            ).scalar_one_or_none()
            if state is None:
                raise UnknownIssue(issue_id)
            if state == "closed":
                return False
            conn.execute(
                update(LocalIssueRow)
                .where(LocalIssueRow.id == issue_id)
                .values(state="closed", updated_at=db_now(conn))
            )
            return True

    def add_local_comment(self, issue_id: int, body: str, author: str) -> int:
        """Add a comment to local issue ``issue_id``; the new comment's id."""
        with self._write() as conn:
            result = conn.execute(
                insert(LocalCommentRow).values(
                    issue_id=issue_id, author=author, body=body, created_at=db_now(conn)
                )
            )
            return int(result.inserted_primary_key[0])

    def edit_local_comment(self, issue_id: int, comment_id: int, body: str) -> bool:
        """Replace the body of comment ``comment_id`` on ``issue_id``; False if there is none."""
        with self._write() as conn:
            result = conn.execute(
                update(LocalCommentRow)
                .where(LocalCommentRow.id == comment_id, LocalCommentRow.issue_id == issue_id)
                .values(body=body)
            )
            return bool(result.rowcount)

    def local_comments(self, issue_id: int) -> list[LocalComment]:
        query = (
            select(LocalCommentRow.__table__)
            .where(LocalCommentRow.issue_id == issue_id)
            .order_by(LocalCommentRow.id)
        )
        with self._read() as conn:
            return [from_mapping(LocalComment, r) for r in conn.execute(query).mappings()]

    # Idempotency ---------------------------------------------------------------

    def claim_side_effect(self, key: str, run_id: int | None = None, detail: str = "") -> bool:
        """True the first time ``key`` is claimed, False ever after (across replicas)."""
        try:
            with self._write() as conn:
                exists = conn.execute(
                    select(SideEffectRow.id).where(SideEffectRow.key == key)
                ).first()
                if exists is not None:
                    return False
                now = db_now(conn)
                conn.execute(
                    insert(SideEffectRow).values(
                        key=key, run_id=run_id, detail=detail, created_at=now, settled_at=now
                    )
                )
            return True
        except IntegrityError:
            return False

    def claim_pending(self, key: str, stale_s: float, run_id: int | None = None) -> Claim:
        """Reserve ``key``'s effect before performing it; ``settle_side_effect`` after.

        ``taken``: perform it, but look first whether it is already visible (a
        reservation older than ``stale_s`` is taken over from a process that died,
        maybe after the effect). ``settled``: done. ``busy``: someone reserved it
        less than ``stale_s`` ago; try again later.
        """
        try:
            with self._write() as conn:
                now = db_now(conn)
                row = conn.execute(
                    select(SideEffectRow.created_at, SideEffectRow.settled_at).where(
                        SideEffectRow.key == key
                    )
                ).first()
                if row is None:
                    values = {"key": key, "run_id": run_id, "detail": "", "created_at": now}
                    conn.execute(insert(SideEffectRow).values(**values))
                    return "taken"
                if row.settled_at is not None:
                    return "settled"
                if row.created_at > now - timedelta(seconds=stale_s):
                    return "busy"
                # Conditional on the reservation read: of two takers, one updates a row.
                retaken = conn.execute(
                    update(SideEffectRow)
                    .where(SideEffectRow.key == key, SideEffectRow.created_at == row.created_at)
                    .where(SideEffectRow.settled_at.is_(None))
                    .values(created_at=now)
                )
                return "taken" if retaken.rowcount == 1 else "busy"
        except IntegrityError:
            return "busy"

    def settle_side_effect(self, key: str) -> None:
        """``key``'s effect is done: it is never performed again."""
        with self._write() as conn:
            conn.execute(
                update(SideEffectRow)
                .where(SideEffectRow.key == key, SideEffectRow.settled_at.is_(None))
                .values(settled_at=db_now(conn))
            )

    def has_side_effect(self, key: str) -> bool:
        with self._read() as conn:
            found = conn.execute(select(SideEffectRow.id).where(SideEffectRow.key == key)).first()
        return found is not None

    def release_side_effect(self, key: str) -> None:
        """Forget ``key`` after its effect failed, so a retry may perform it."""
        from sqlalchemy import delete

        with self._write() as conn:
            conn.execute(delete(SideEffectRow).where(SideEffectRow.key == key))

    def record_delivery(self, tracker: str, delivery_id: str) -> bool:
        """True for a new webhook delivery id, False for a replay."""
        try:
            with self._write() as conn:
                seen = conn.execute(
                    select(WebhookDeliveryRow.id).where(
                        WebhookDeliveryRow.tracker == tracker,
                        WebhookDeliveryRow.delivery_id == delivery_id,
                    )
                ).first()
                if seen is not None:
                    return False
                conn.execute(
                    insert(WebhookDeliveryRow).values(
                        tracker=tracker, delivery_id=delivery_id, received_at=db_now(conn)
                    )
                )
            return True
        except IntegrityError:
            return False
