"""Reading the history: runs, their timelines, repos and simple stats."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, String, cast, exists, func, literal, or_, select

from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.models import (
    BUSY_STATES,
    TERMINAL_STATES,
    EscalationRow,
    IssueRow,
    NotificationRow,
    RepoRow,
    RunEventRow,
    RunRow,
    SideEffectRow,
)
from pipeline.store.records import (
    Escalation,
    Issue,
    Repo,
    Run,
    RunEvent,
    RunFilter,
    Stats,
    from_mapping,
)


def runs_query() -> Select[Any]:
    """Runs joined with their repo's name and their issue's number, title and URL."""
    return (
        select(
            *RunRow.__table__.columns,
            RepoRow.name.label("repo_name"),
            IssueRow.number.label("issue_number"),
            IssueRow.title.label("issue_title"),
            IssueRow.url.label("issue_url"),
            _undelivered().label("notifications_undelivered"),
        )
        .join(RepoRow, RepoRow.id == RunRow.repo_id)
        .outerjoin(IssueRow, IssueRow.id == RunRow.issue_id)
    )


def filtered(query: Select[Any], flt: RunFilter) -> Select[Any]:
    """``query`` (over runs joined with repos, and issues when ``text`` is set) narrowed."""
    conditions: list[Any] = []
    if flt.repo:
        conditions.append(RepoRow.name == flt.repo)
    if flt.repo_state:
        conditions.append(RepoRow.state == flt.repo_state)
    if flt.state:
        conditions.append(RunRow.state == flt.state)
    if flt.kind:
        conditions.append(RunRow.kind == flt.kind)
    if flt.since:
        conditions.append(RunRow.created_at >= flt.since)
    if flt.until:
        conditions.append(RunRow.created_at < flt.until)
    if flt.issue_id is not None:
        conditions.append(RunRow.issue_id == flt.issue_id)
    if flt.text:
        conditions.append(_text_matches(flt.text))
    return query.where(*conditions)


def _text_matches(text: str) -> Any:
    """Case-insensitive substring of the issue title, the repo name or the error.

    ``lower() LIKE`` behaves the same on SQLite and PostgreSQL (SQLite's
    ``lower`` folds ASCII only); ``%``, ``_`` and ``\\`` in ``text`` are literal.
    """
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    pattern = f"%{escaped}%"
    columns = (IssueRow.title, RepoRow.name, RunRow.error)
    return or_(*(func.lower(column).like(pattern, escape="\\") for column in columns))


def _undelivered() -> Any:
    """How many of the run's notifications have not reached their channel."""
    return (
        select(func.count(NotificationRow.id))
        .where(
            NotificationRow.run_id == RunRow.id,
            NotificationRow.state.in_(("pending", "abandoned")),
        )
        .correlate(RunRow)
        .scalar_subquery()
    )


def run_from_row(row: Any) -> Run:
    return from_mapping(Run, dict(row._mapping))


class HistoryMixin(StoreBase):
    """Domain verbs for reviewing history (CLI, API, dashboard)."""

    def list_runs(self, flt: RunFilter | None = None) -> list[Run]:
        flt = flt or RunFilter()
        query = filtered(runs_query(), flt)
        query = query.order_by(RunRow.id.desc()).limit(flt.limit).offset(flt.offset)
        with self._read() as conn:
            return [run_from_row(row) for row in conn.execute(query)]

    def unannounced_endings(self, since: datetime, key_prefix: str, limit: int) -> list[Run]:
        """Runs that ended at or after ``since`` with no side effect ``key_prefix<run id>``.

        One statement however long the history: the endings pass asks it every
        few seconds, so an idle daemon pays one indexed read, not one per state
        and per recent run.
        """
        return self._ended_without(key_prefix, limit, RunRow.finished_at >= since)

    def unsettled_progress(
        self, since: datetime, until: datetime, key_prefix: str, limit: int
    ) -> list[Run]:
        """Runs that ended between ``since`` and ``until`` with a progress comment and no
        side effect ``key_prefix<run id>``: their comment may not show how they ended."""
        return self._ended_without(
            key_prefix,
            limit,
            RunRow.finished_at >= since,
            RunRow.finished_at <= until,
            RunRow.progress_comment_id.is_not(None),
        )

    def _ended_without(self, key_prefix: str, limit: int, *where: Any) -> list[Run]:
        """Terminal runs matching ``where`` with no side effect ``key_prefix<run id>``."""
        key = literal(key_prefix) + cast(RunRow.id, String)
        told = exists().where(SideEffectRow.key == key)
        query = (
            runs_query()
            .where(*where, RunRow.state.in_(TERMINAL_STATES), ~told)
            .order_by(RunRow.id.desc())
            .limit(limit)
        )
        with self._read() as conn:
            return [run_from_row(row) for row in conn.execute(query)]

    def count_runs(self, flt: RunFilter | None = None) -> int:
        flt = flt or RunFilter()
        query = select(func.count(RunRow.id)).join(RepoRow, RepoRow.id == RunRow.repo_id)
        if flt.text:  # the title lives on the issue: join it only when it is searched
            query = query.outerjoin(IssueRow, IssueRow.id == RunRow.issue_id)
        with self._read() as conn:
            return int(conn.execute(filtered(query, flt)).scalar_one())

    def get_run(self, run_id: int) -> Run | None:
        with self._read() as conn:
            row = conn.execute(runs_query().where(RunRow.id == run_id)).first()
        return run_from_row(row) if row is not None else None

    def children(self, run_id: int) -> list[Run]:
        """Runs whose parent is ``run_id`` (fix-forwards), oldest first."""
        with self._read() as conn:
            rows = conn.execute(runs_query().where(RunRow.parent_id == run_id).order_by(RunRow.id))
            return [run_from_row(row) for row in rows]

    def run_events(
        self, run_id: int, after_id: int = 0, limit: int | None = None
    ) -> list[RunEvent]:
        """The run's events after ``after_id``, oldest first: all of them unless ``limit``.

        The API, the run page, ``runs show`` and the endings read a run's whole timeline:
        a cap here would drop its newest events (its ending) without a word.
        """
        query = (
            select(RunEventRow.__table__)
            .where(RunEventRow.run_id == run_id, RunEventRow.id > after_id)
            .order_by(RunEventRow.id)
            .limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [RunEvent.from_row(r) for r in _event_mappings(rows)]

    def events_since(self, after_id: int, limit: int = 500) -> list[RunEvent]:
        """Events of every run after ``after_id``, oldest first (for live feeds)."""
        query = (
            select(RunEventRow.__table__)
            .where(RunEventRow.id > after_id)
            .order_by(RunEventRow.id)
            .limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [RunEvent.from_row(r) for r in _event_mappings(rows)]

    def last_event_id(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.max(RunEventRow.id))).scalar_one() or 0)

    def record_event(
        self, run_id: int, kind: str, message: str, data: Mapping[str, object] | None = None
    ) -> None:
        """Append to a run's timeline without a lease check (operator actions, notifications).

        A worker writing about the run it holds uses ``append_event_fenced``.
        """
        with self._write() as conn:
            attempt = self._run_attempt(conn, run_id)
            self._append_event(conn, (run_id, attempt), kind, message, data)

    def list_repos(self) -> list[Repo]:
        with self._read() as conn:
            rows = conn.execute(select(RepoRow.__table__).order_by(RepoRow.name)).mappings().all()
        return [from_mapping(Repo, r) for r in rows]

    def get_repo(self, name: str) -> Repo | None:
        with self._read() as conn:
            row = (
                conn.execute(select(RepoRow.__table__).where(RepoRow.name == name))
                .mappings()
                .first()
            )
        return from_mapping(Repo, row) if row is not None else None

    def list_escalations(self, repo: str | None = None, limit: int = 100) -> list[Escalation]:
        query = select(EscalationRow.__table__).order_by(EscalationRow.id.desc()).limit(limit)
        if repo:
            query = query.join(RepoRow, RepoRow.id == EscalationRow.repo_id).where(
                RepoRow.name == repo
            )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [from_mapping(Escalation, r) for r in rows]

    def stats(self) -> Stats:
        with self._read() as conn:
            by_state = dict(
                conn.execute(select(RunRow.state, func.count()).group_by(RunRow.state)).all()
            )
            by_kind = dict(
                conn.execute(select(RunRow.kind, func.count()).group_by(RunRow.kind)).all()
            )
            queued = dict(
                conn.execute(
                    select(RepoRow.name, func.count())
                    .join(RunRow, RunRow.repo_id == RepoRow.id)
                    .where(RunRow.state.in_(("queued", "retry_wait")))
                    .group_by(RepoRow.name)
                ).all()
            )
            totals = conn.execute(
                select(
                    func.coalesce(func.sum(RunRow.cost_usd), 0.0),
                    func.coalesce(func.sum(RunRow.tokens_in), 0),
                    func.coalesce(func.sum(RunRow.tokens_out), 0),
                )
            ).one()
            frozen = conn.execute(
                select(RepoRow.name).where(RepoRow.state == "frozen").order_by(RepoRow.name)
            ).scalars()
            frozen_names = tuple(frozen)
        return Stats(
            runs_by_state={str(k): int(v) for k, v in by_state.items()},
            runs_by_kind={str(k): int(v) for k, v in by_kind.items()},
            queued_by_repo={str(k): int(v) for k, v in queued.items()},
            active=sum(int(by_state.get(s, 0)) for s in BUSY_STATES),
            cost_usd=float(totals[0]),
            tokens_in=int(totals[1]),
            tokens_out=int(totals[2]),
            frozen_repos=frozen_names,
        )

    def find_issue(self, repo: str, number: int) -> Issue | None:
        """The recorded issue ``number`` of ``repo``, or None when intake has not seen it."""
        query = (
            select(IssueRow.__table__)
            .join(RepoRow, RepoRow.id == IssueRow.repo_id)
            .where(RepoRow.name == repo, IssueRow.number == number)
        )
        with self._read() as conn:
            row = conn.execute(query).mappings().first()
        return from_mapping(Issue, row) if row is not None else None

    def db_time(self) -> Any:
        with self._read() as conn:
            return db_now(conn)


def _event_mappings(rows: Sequence[Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in rows]
