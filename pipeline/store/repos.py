"""Enrolled repositories: sync from settings, freeze and unfreeze."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.config.settings import RepoSettings
from pipeline.core.states import FROZEN_REASON, Outcome, RunState
from pipeline.store.base import StoreBase
from pipeline.store.engine import db_now
from pipeline.store.escalations import MAX_BY, settle_issue
from pipeline.store.models import EscalationRow, RepoRow, RunRow, SideEffectRow
from pipeline.store.records import Run


class UnknownRepo(LookupError):
    """A repo name that is not enrolled."""

    def __init__(self, name: str) -> None:
        super().__init__(f"repo {name!r} is not enrolled (see `pipeline repos list`)")
        self.name = name


@dataclass(frozen=True)
class RepoFreeze:
    """A freeze to write: why, by whom, and the ``frozen`` escalation recorded with it, if any.

    ``freeze_repo`` writes one on its own; ``finish`` and ``schedule_retry`` write one in
    the transaction that ends the run, so no claim sees the run ended and its repo open.
    """

    reason: str
    by: str
    escalation: str | None = None


# Whether a run ending so freezes its repo: the caller's policy
# (``pipeline.run.recovery.unhealed_freeze``), applied where the run ends.
FreezePolicy = Callable[[Run, Outcome], RepoFreeze | None]


def freeze_as_policy_says(
    conn: Connection, run: Run, policy: FreezePolicy | None, now: datetime
) -> None:
    """``run`` has just ended in ``conn``'s transaction: write the freeze ``policy`` asks for."""
    if policy is None or not run.terminal:
        return
    freeze = policy(run, Outcome(RunState(run.state), run.error_class, run.error))
    if freeze is not None:
        freeze_in(conn, (run.repo_id, run.repo_name), run.id, freeze, now)


def freeze_in(
    conn: Connection,
    repo: tuple[int, str],
    run_id: int | None,
    freeze: RepoFreeze,
    now: datetime,
) -> bool:
    """Freeze ``repo`` (id, name) in ``conn``'s transaction; False if it was frozen already."""
    repo_id, name = repo
    changed = conn.execute(
        update(RepoRow)
        .where(RepoRow.id == repo_id, RepoRow.state != "frozen")
        .values(
            state="frozen",
            frozen_reason=freeze.reason,
            frozen_by=freeze.by,
            frozen_run_id=run_id,
            frozen_at=now,
            updated_at=now,
        )
    ).rowcount
    if not changed:
        return False
    if freeze.escalation is not None:
        values = {"run_id": run_id, "repo_id": repo_id, "reason": FROZEN_REASON, "created_at": now}
        conn.execute(insert(EscalationRow).values(**values, detail=freeze.escalation))
    data = {"repo": name, "frozen": True, "by": freeze.by}
    _repo_event(conn, run_id, f"repo {name} frozen by {freeze.by}: {freeze.reason}", data, now)
    return True


def _acknowledge_freeze(
    conn: Connection, repo_id: int, frozen_run_id: int | None, by: str, now: datetime
) -> None:
    """Acknowledge the open escalations of the repo's freeze (see ``unfreeze_repo``)."""
    own = and_(EscalationRow.reason == FROZEN_REASON, EscalationRow.run_id.is_(None))
    of_freeze = own if frozen_run_id is None else or_(own, EscalationRow.run_id == frozen_run_id)
    conn.execute(
        update(EscalationRow)
        .where(
            EscalationRow.repo_id == repo_id,
            EscalationRow.acknowledged_at.is_(None),
            of_freeze,
        )
        .values(acknowledged_by=by[:MAX_BY], acknowledged_at=now)  # a long note is cut
    )


def _repo_event(
    conn: Connection,
    run_id: int | None,
    message: str,
    data: Mapping[str, object],
    now: datetime,
) -> None:
    """A freeze or unfreeze on the timeline of the run it concerns, if any."""
    if run_id is None:
        return
    attempt = StoreBase._run_attempt(conn, run_id)
    StoreBase._append_event(conn, (run_id, attempt), "repo", message, data, now)


def _settings_json(repo: RepoSettings) -> str:
    """The repo's settings snapshot; secrets are SecretRefs, so only their names."""
    return json.dumps(asdict(repo), default=str, sort_keys=True)


class ReposMixin(StoreBase):
    """Domain verbs for repos."""

    def sync_repos(self, repos: Iterable[RepoSettings]) -> None:
        """Insert new repos and refresh settings of known ones; state is kept."""
        repos = list(repos)
        try:
            self._sync_repos(repos)
        except IntegrityError:
            # Replicas starting together (PostgreSQL): another one inserted a repo between
            # our SELECT and INSERT. Once more, and it is an update.
            self._sync_repos(repos)

    def _sync_repos(self, repos: list[RepoSettings]) -> None:
        """A batch: one read, one insert of the new repos, one update of the changed ones."""
        fields = (RepoRow.tracker, RepoRow.slug, RepoRow.default_branch, RepoRow.settings_json)
        with self._read() as conn:
            known = {row[0]: tuple(row[1:]) for row in conn.execute(select(RepoRow.name, *fields))}
        wanted = {
            repo.name: (repo.tracker, repo.slug, repo.default_branch, _settings_json(repo))
            for repo in repos
        }
        changed = {name: v for name, v in wanted.items() if known.get(name) != v}
        if not changed:
            return  # a restart with the same config writes nothing
        names = ("tracker", "slug", "default_branch", "settings_json")
        with self._write() as conn:
            now = db_now(conn)
            rows = [
                {**dict(zip(names, v, strict=True)), "updated_at": now} for v in changed.values()
            ]
            new = [
                {**row, "name": name, "created_at": now, "state": "active"}
                for name, row in zip(changed, rows, strict=True)
                if name not in known
            ]
            old = [
                {**row, "b_name": name}
                for name, row in zip(changed, rows, strict=True)
                if name in known
            ]
            if new:
                conn.execute(insert(RepoRow), new)
            if old:
                conn.execute(
                    update(RepoRow).where(RepoRow.name == bindparam("b_name")),
                    old,
                )

    def ensure_repo(self, name: str, tracker: str = "local", slug: str | None = None) -> int:
        """The repo's id, enrolling a minimal row when it is new (tests, manual runs)."""
        with self._write() as conn:
            found = self._repo_id(conn, name)
            if found is not None:
                return found
            now = db_now(conn)
            result = conn.execute(
                insert(RepoRow)
                .values(
                    name=name,
                    tracker=tracker,
                    slug=slug or name,
                    default_branch="main",
                    settings_json="{}",
                    state="active",
                    created_at=now,
                    updated_at=now,
                )
                .returning(RepoRow.id)
            )
            return int(result.scalar_one())

    def freeze_repo(
        self,
        name: str,
        reason: str,
        by: str,
        run_id: int | None = None,
        *,
        escalation: str | None = None,
    ) -> bool:
        """Freeze a repo: claims skip it until a human unfreezes it. False if already frozen.

        ``escalation``, when given, is recorded as a ``frozen`` escalation in the
        same transaction; whether a freeze escalates is the caller's decision.
        """
        with self._write() as conn:
            repo_id = self._known_repo(conn, name)
            freeze = RepoFreeze(reason, by, escalation)
            return freeze_in(conn, (repo_id, name), run_id, freeze, db_now(conn))

    def unfreeze_repo(self, name: str, note: str, by: str) -> bool:
        """Unfreeze a repo and acknowledge its freeze's escalations. False if it was not frozen.

        The freeze's escalations are its own row (reason ``frozen``, without a run when a
        person froze the repo) and those of the run that froze it; others (a blocked run's
        question, a refused token) stay open: the unfreeze answers none of them.
        """
        with self._write() as conn:
            repo_id = self._known_repo(conn, name)
            now = db_now(conn)
            frozen_run = conn.execute(
                select(RepoRow.frozen_run_id).where(
                    RepoRow.id == repo_id, RepoRow.state == "frozen"
                )
            ).first()
            if frozen_run is None:
                return False
            conn.execute(
                update(RepoRow)
                .where(RepoRow.id == repo_id)
                .values(
                    state="active",
                    frozen_reason=None,
                    frozen_by=None,
                    frozen_run_id=None,
                    frozen_at=None,
                    updated_at=now,
                )
            )
            _acknowledge_freeze(conn, repo_id, frozen_run[0], f"{by}: {note}", now)
            data = {"repo": name, "frozen": False, "by": by}
            said = f"repo {name} unfrozen by {by}: {note}"
            _repo_event(conn, frozen_run[0], said, data, now)
            return True

    def _known_repo(self, conn: Connection, name: str) -> int:
        repo_id = self._repo_id(conn, name)
        if repo_id is None:
            raise UnknownRepo(name)
        return repo_id

    def add_escalation(
        self, repo: str, reason: str, detail: str, run_id: int | None = None, *, once: str = ""
    ) -> int | None:
        """The escalation's id; with ``once``, a side-effect key written in the same
        transaction: None (nothing added) when that key exists, and no crash between the
        two can leave a key without its row. A run's escalation that a later run of its
        issue settled already (its ending told late) is written settled (``settle_issue``)."""
        try:
            with self._write() as conn:
                if once and not _first_claim(conn, once, run_id):
                    return None
                escalation_id = self._insert_escalation(conn, repo, reason, detail, run_id)
                if run_id is not None:  # its issue may have succeeded since (ADR 36)
                    issue_id = select(RunRow.issue_id).where(RunRow.id == run_id)
                    settle_issue(conn, conn.execute(issue_id).scalar_one_or_none())
                return escalation_id
        except IntegrityError:
            if once:
                return None  # another replica wrote the key first
            raise

    def _insert_escalation(
        self, conn: Connection, repo: str, reason: str, detail: str, run_id: int | None
    ) -> int:
        repo_id = self._repo_id(conn, repo)
        if repo_id is None:
            raise UnknownRepo(repo)
        result = conn.execute(
            insert(EscalationRow)
            .values(
                run_id=run_id,
                repo_id=repo_id,
                reason=reason,
                detail=detail,
                created_at=db_now(conn),
            )
            .returning(EscalationRow.id)
        )
        return int(result.scalar_one())


def _first_claim(conn: Connection, key: str, run_id: int | None) -> bool:
    """Write side-effect ``key`` in ``conn``'s transaction; False when it was there already."""
    if conn.execute(select(SideEffectRow.id).where(SideEffectRow.key == key)).first():
        return False
    now = db_now(conn)
    conn.execute(
        insert(SideEffectRow).values(
            key=key, run_id=run_id, detail="", created_at=now, settled_at=now
        )
    )
    return True
