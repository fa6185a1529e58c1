"""The PostgreSQL claim and finish: one statement each, no global lock (docs/adr/0019).

One ``WITH`` statement, run in autocommit (its own transaction), does it all:

1. ``slot``: the lowest of the ``max_concurrency`` cap slots that no busy run
   holds, taken with a transaction-level *try* lock on that slot alone, so
   concurrent claimers spread over free slots instead of queueing;
2. ``pick``: the highest-priority, then oldest, claimable run, locked together
   with its repo row ``FOR NO KEY UPDATE ... SKIP LOCKED``: claimers of
   different repos never wait for each other, and two claimers never pick the
   same repo at once. Only the head of each repo's queue is a candidate, so a
   claim never skips a run another claimer has locked (and may yet roll back)
   to start that repo's next run out of order. A run whose parent has not
   ended (a fix-forward whose broken run was recovered into the queue after a
   crash) is neither a candidate nor the head: its parent goes first;
3. ``taken``: the run becomes ``preparing`` with its lease, deadline and slot;
4. ``event``: the ``claimed`` timeline entry;
5. the claimed run with its repo name and issue, as ``read_run`` returns it.

The database still has the last word: ``uq_runs_busy_repo`` (one busy run per
repo) and ``uq_runs_busy_slot`` (one busy run per slot, so at most
``max_concurrency`` busy runs) reject whatever a stale snapshot lets through;
the caller reads such a violation as "not this time".
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Connection, Integer, String, bindparam, column, text
from sqlalchemy.sql.elements import TextClause

from pipeline.core.errors import LeaseLost
from pipeline.core.masking import mask
from pipeline.store.base import MAX_EVENT_MESSAGE, dump_data
from pipeline.store.models import BUSY_STATES, TERMINAL_STATES, IssueRow, RunEventRow, RunRow
from pipeline.store.records import Run

SLOT_LOCK_KEY = 731_624  # the first key of pg_try_advisory_xact_lock(key, slot)
_BUSY = "(" + ", ".join(f"'{s}'" for s in BUSY_STATES) + ")"
_ENDED = "(" + ", ".join(f"'{s}'" for s in TERMINAL_STATES) + ")"
_RUN_COLUMNS = [c.name for c in RunRow.__table__.columns]

_CLAIM_SQL = f"""
WITH params AS (SELECT (statement_timestamp() AT TIME ZONE 'UTC') AS now),
slot AS (
    SELECT s.n FROM generate_series(0, :cap - 1) AS s(n)
    WHERE CASE
        WHEN EXISTS (SELECT 1 FROM runs b WHERE b.slot = s.n AND b.state IN {_BUSY}) THEN false
        ELSE pg_try_advisory_xact_lock(:slot_key, s.n)
    END
    LIMIT 1
),
pick AS (
    SELECT r.id FROM runs r JOIN repos p ON p.id = r.repo_id, params
    WHERE EXISTS (SELECT 1 FROM slot)
      AND r.state = 'queued' AND r.run_after <= params.now AND p.state <> 'frozen'
      AND NOT EXISTS (SELECT 1 FROM runs b WHERE b.repo_id = r.repo_id AND b.state IN {_BUSY})
      AND NOT (r.repo_id = ANY (CAST(:exclude AS integer[])))
      AND NOT EXISTS (
          SELECT 1 FROM runs o WHERE o.id = r.parent_id AND o.state NOT IN {_ENDED})
      AND NOT EXISTS (
          SELECT 1 FROM runs q
          WHERE q.repo_id = r.repo_id AND q.state = 'queued' AND q.run_after <= params.now
            AND (q.priority > r.priority OR (q.priority = r.priority AND q.id < r.id))
            AND NOT EXISTS (
                SELECT 1 FROM runs o WHERE o.id = q.parent_id AND o.state NOT IN {_ENDED}))
    ORDER BY r.priority DESC, r.id
    LIMIT 1
    FOR NO KEY UPDATE OF r, p SKIP LOCKED
),
taken AS (
    UPDATE runs SET
        state = 'preparing', owner = :owner, attempt = runs.attempt + 1,
        slot = (SELECT n FROM slot),
        lease_until = params.now + make_interval(secs => :lease_s),
        started_at = params.now, finished_at = NULL, updated_at = params.now,
        deadline_at = params.now + make_interval(secs => runs.timeout_s)
    FROM pick, params
    WHERE runs.id = pick.id AND runs.state = 'queued'
    RETURNING runs.*
),
event AS (
    INSERT INTO run_events (run_id, attempt, ts, kind, message, data_json)
    SELECT t.id, t.attempt, t.updated_at, 'claimed',
           'claimed by ' || :owner || ' (attempt ' || t.attempt || ')',
           json_build_object('attempt', t.attempt, 'owner', CAST(:owner AS text))::text
    FROM taken t
)
SELECT {", ".join("t." + name for name in _RUN_COLUMNS)},
       p.name AS repo_name, i.number AS issue_number, i.title AS issue_title, i.url AS issue_url
FROM taken t JOIN repos p ON p.id = t.repo_id LEFT JOIN issues i ON i.id = t.issue_id
"""


# The columns read_run returns, typed so that the masked ones are masked on read too.
_RESULT: list[Any] = [
    *RunRow.__table__.columns,
    column("repo_name", String()),
    column("issue_number", Integer()),
    column("issue_title", IssueRow.__table__.c.title.type),
    column("issue_url", IssueRow.__table__.c.url.type),
]


def _statement() -> TextClause:
    return text(_CLAIM_SQL).columns(*_RESULT)  # type: ignore[return-value]


_STATEMENT = _statement()


def claim_postgres(
    conn: Connection, owner: str, cap: int, lease_s: float, exclude: Collection[int]
) -> Run | None:
    """Claim one run in one statement on ``conn`` (autocommit), or None."""
    from pipeline.store.history import run_from_row

    params: dict[str, Any] = {
        "cap": cap,
        "slot_key": SLOT_LOCK_KEY,
        "exclude": list(exclude),
        "owner": owner,
        "lease_s": lease_s,
    }
    row = conn.execute(_STATEMENT, params).first()
    return run_from_row(row) if row is not None else None


_FINISH_SQL = f"""
WITH params AS (SELECT (statement_timestamp() AT TIME ZONE 'UTC') AS now),
done AS (
    UPDATE runs SET
        state = :state, owner = NULL, lease_until = NULL,
        finished_at = params.now, updated_at = params.now,
        error_class = :error_class, error = :error, summary = COALESCE(:summary, runs.summary)
    FROM params
    WHERE runs.id = :run_id AND runs.owner = :owner AND runs.attempt = :attempt
      AND runs.state NOT IN ('succeeded', 'failed', 'escalated', 'cancelled')
    RETURNING runs.*
),
event AS (
    INSERT INTO run_events (run_id, attempt, ts, kind, message, data_json)
    SELECT d.id, d.attempt, d.updated_at, 'state', :message, :data_json FROM done d
)
SELECT {", ".join("d." + name for name in _RUN_COLUMNS)},
       p.name AS repo_name, i.number AS issue_number, i.title AS issue_title, i.url AS issue_url
FROM done d JOIN repos p ON p.id = d.repo_id LEFT JOIN issues i ON i.id = d.issue_id
"""


def _finish_statement() -> TextClause:
    columns = RunRow.__table__.c
    event = RunEventRow.__table__.c
    binds = [
        bindparam("error", type_=columns.error.type),
        bindparam("summary", type_=columns.summary.type),
        bindparam("message", type_=event.message.type),
        bindparam("data_json", type_=event.data_json.type),
    ]
    return text(_FINISH_SQL).bindparams(*binds).columns(*_RESULT)  # type: ignore[return-value]


_FINISH = _finish_statement()


def finish_postgres(
    conn: Connection,
    fence: tuple[int, str, int, str],
    summary: str | None,
    values: dict[str, object],
) -> Run:
    """End a run we hold, ``fence`` = (run id, owner, attempt, state), in one statement.

    On an autocommit ``conn`` the statement is its own transaction; in a transaction
    it commits with whatever else the caller writes there (a freeze of the run's repo).
    ``LeaseLost`` when the run is no longer ours, as ``Store.finish`` raises.
    """
    from pipeline.store.history import run_from_row

    run_id, owner, attempt, state = fence
    error = values["error"]
    message = state if error is None else f"{state}: {error}"
    data = {"state": state, "error_class": values["error_class"]}
    params = {**values, "run_id": run_id, "owner": owner, "attempt": attempt, "state": state}
    params.update(
        summary=summary, message=mask(message)[:MAX_EVENT_MESSAGE], data_json=dump_data(data)
    )
    row = conn.execute(_FINISH, params).first()
    if row is None:
        raise LeaseLost(f"run {run_id} attempt {attempt} is no longer held by {owner}")
    return run_from_row(row)
