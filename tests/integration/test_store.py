"""Store: the guarantee indexes and the history verbs, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError

from pipeline.store import RunFilter, SeenIssue, Store, UnknownRepo
from pipeline.store.models import IssueRow, RunRow


def _now() -> datetime:
    return datetime(2026, 1, 1, 12, 0, 0)


def _issue(store: Store, repo_id: int, number: int) -> int:
    with store.engine.begin() as conn:
        return int(
            conn.execute(
                insert(IssueRow)
                .values(
                    repo_id=repo_id,
                    tracker="local",
                    number=number,
                    title=f"issue {number}",
                    author="alice",
                    url=f"local://{number}",
                    created_at=_now(),
                    updated_at=_now(),
                )
                .returning(IssueRow.id)
            ).scalar_one()
        )


def _run(
    store: Store,
    repo_id: int,
    issue_id: int | None,
    state: str = "queued",
    created: datetime | None = None,
) -> int:
    when = created or _now()
    with store.engine.begin() as conn:
        return int(
            conn.execute(
                insert(RunRow)
                .values(
                    repo_id=repo_id,
                    issue_id=issue_id,
                    state=state,
                    run_after=when,
                    created_at=when,
                    updated_at=when,
                )
                .returning(RunRow.id)
            ).scalar_one()
        )


def test_second_active_run_for_one_issue_is_rejected(store: Store) -> None:
    """The database itself refuses two non-terminal runs for one issue."""
    repo = store.ensure_repo("acme/web")
    issue = _issue(store, repo, 1)
    _run(store, repo, issue)
    with pytest.raises(IntegrityError):
        _run(store, repo, issue)


def test_terminal_runs_do_not_block_a_new_run_for_the_issue(store: Store) -> None:
    """Finished runs leave the issue free for another active run."""
    repo = store.ensure_repo("acme/web")
    issue = _issue(store, repo, 1)
    for state in ("succeeded", "failed", "escalated", "cancelled"):
        _run(store, repo, issue, state=state)
    _run(store, repo, issue)


def test_second_busy_run_in_one_repo_is_rejected(store: Store) -> None:
    """At most one run past `queued` per repo, enforced by the database."""
    repo = store.ensure_repo("acme/web")
    first = _run(store, repo, _issue(store, repo, 1), state="implementing")
    second = _run(store, repo, _issue(store, repo, 2))
    assert first != second
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(update(RunRow).where(RunRow.id == second).values(state="preparing"))


def test_busy_runs_in_different_repos_coexist(store: Store) -> None:
    """The per-repo index does not serialise different repos."""
    web = store.ensure_repo("acme/web")
    api = store.ensure_repo("acme/api")
    _run(store, web, _issue(store, web, 1), state="testing")
    _run(store, api, _issue(store, api, 1), state="testing")
    _run(store, web, _issue(store, web, 2), state="queued")
    assert store.stats().active == 2


def test_list_runs_filters_by_repo_state_kind_and_time(store: Store) -> None:
    """History filters select by repo, state, kind and creation time, newest first."""
    web = store.ensure_repo("acme/web")
    api = store.ensure_repo("acme/api")
    old = _run(
        store, web, _issue(store, web, 1), state="succeeded", created=_now() - timedelta(days=3)
    )
    new = _run(store, web, _issue(store, web, 2), state="failed")
    other = _run(store, api, _issue(store, api, 1))
    assert [r.id for r in store.list_runs()] == [other, new, old]
    assert [r.id for r in store.list_runs(RunFilter(repo="acme/web"))] == [new, old]
    assert [r.id for r in store.list_runs(RunFilter(state="failed"))] == [new]
    assert [r.id for r in store.list_runs(RunFilter(kind="fix_forward"))] == []
    since = _now() - timedelta(days=1)
    assert {r.id for r in store.list_runs(RunFilter(since=since))} == {new, other}
    assert store.count_runs(RunFilter(repo="acme/web")) == 2
    run = store.get_run(new)
    assert run is not None and run.repo_name == "acme/web" and run.issue_number == 2


def test_events_are_kept_in_order(store: Store) -> None:
    """A run's timeline comes back oldest first, and the live feed resumes after an id."""
    repo = store.ensure_repo("acme/web")
    run = _run(store, repo, None)
    store.record_event(run, "state", "queued")
    store.record_event(run, "tool", "Write tests/test_x.py", {"tool": "Write"})
    events = store.run_events(run)
    assert [e.message for e in events] == ["queued", "Write tests/test_x.py"]
    assert events[1].data == {"tool": "Write"}
    assert [e.id for e in store.events_since(events[0].id)] == [events[1].id]


def test_freeze_and_unfreeze_are_recorded_with_who_and_why(store: Store) -> None:
    """Freezing records the reason, the actor and the caller's escalation; unfreezing
    acknowledges it."""
    store.ensure_repo("acme/web")
    assert store.freeze_repo("acme/web", "deploy broken", by="pipeline", escalation="look")
    assert not store.freeze_repo("acme/web", "again", by="pipeline")
    repo = store.get_repo("acme/web")
    assert repo is not None and repo.frozen and repo.frozen_reason == "deploy broken"
    assert store.stats().frozen_repos == ("acme/web",)
    assert store.unfreeze_repo("acme/web", "fixed by hand", by="carol")
    escalation = store.list_escalations("acme/web")[0]
    assert escalation.detail == "look" and escalation.reason == "frozen"
    assert escalation.acknowledged_by == "carol: fixed by hand"
    assert not store.unfreeze_repo("acme/web", "twice", by="carol")


def test_unknown_repo_is_a_clear_error(store: Store) -> None:
    """Freezing a repo that is not enrolled names it."""
    with pytest.raises(UnknownRepo, match="acme/nope"):
        store.freeze_repo("acme/nope", "x", by="me")


def test_upsert_issue_keeps_one_row_per_repo_and_number(store: Store) -> None:
    """Seeing an issue again updates it in place and keeps the labeller once known."""
    store.ensure_repo("acme/web")
    first = store.upsert_issue(
        "acme/web",
        SeenIssue(
            tracker="github",
            number=7,
            title="Crash",
            author="alice",
            url="https://example.test/7",
            labeller="bob",
        ),
    )
    again = store.upsert_issue(
        "acme/web",
        SeenIssue(
            tracker="github",
            number=7,
            title="Crash on save",
            author="alice",
            url="https://example.test/7",
        ),
    )
    assert again.id == first.id
    assert again.title == "Crash on save" and again.labeller == "bob"


def test_local_tracker_issues_labels_and_comments(store: Store) -> None:
    """The embedded tracker keeps issues, label changes and comments in the database."""
    issue = store.add_local_issue("demo/app", "Add a greeting", "body", author="alice")
    assert store.list_local_issues(label="ready-for-agent") == []
    store.change_local_labels(issue.id, add=("ready-for-agent",), by="alice")
    ready = store.list_local_issues(label="ready-for-agent")
    assert [i.id for i in ready] == [issue.id] and ready[0].labeller == "alice"
    store.change_local_labels(issue.id, add=("agent-working",), remove=("ready-for-agent",))
    store.add_local_comment(issue.id, "working on it", author="afk-pipeline")
    assert [c.body for c in store.local_comments(issue.id)] == ["working on it"]
    store.close_local_issue(issue.id)
    assert store.list_local_issues() == []


def test_side_effects_and_deliveries_happen_once(store: Store) -> None:
    """An idempotency key or webhook delivery id is accepted exactly once."""
    assert store.claim_side_effect("comment:1:claimed")
    assert not store.claim_side_effect("comment:1:claimed")
    store.release_side_effect("comment:1:claimed")
    assert store.claim_side_effect("comment:1:claimed")
    assert store.record_delivery("github", "abc")
    assert not store.record_delivery("github", "abc")
    assert store.record_delivery("gitea", "abc")


def test_store_is_a_context_manager(database_url: str) -> None:
    """`with Store(url) as store:` closes the store's connections on the way out."""
    with Store(database_url) as opened:
        opened.upgrade()
        assert opened.ping()
    assert opened.engine.pool.checkedout() == 0


def test_text_with_nul_bytes_is_stored_on_every_engine(store: Store) -> None:
    """An agent's output line or an issue body with NUL bytes is stored (PostgreSQL text
    cannot hold NUL: it becomes U+FFFD there) instead of failing the write."""
    repo = store.ensure_repo("acme/web")
    run = _run(store, repo, None)
    store.record_event(run, "agent", "bin\x00ary \x01 out", {"line": "a\x00b"})
    [event] = store.run_events(run)
    assert event.message.replace("\ufffd", "\x00") == "bin\x00ary \x01 out"
    assert event.data == {"line": "a\x00b"}
    issue = store.add_local_issue("acme/web", "ti\x00tle", "bo\x00dy", "alice", ())
    assert issue.body.replace("\ufffd", "\x00") == "bo\x00dy"


def test_text_with_half_a_surrogate_pair_is_stored_on_every_engine(store: Store) -> None:
    """Text decoded from JSON may hold half a UTF-16 surrogate pair (an agent's stream, a
    forge's issue): it is stored with U+FFFD in its place, in columns and event data,
    instead of failing the write (no database takes text that is not UTF-8)."""
    repo = store.ensure_repo("acme/web")
    run = _run(store, repo, None)
    store.record_event(run, "agent", "cut \ud83d here", {"line": "a\udc00b", "\ud800": 1})
    [event] = store.run_events(run)
    assert event.message == "cut \ufffd here"
    assert event.data == {"line": "a\ufffdb", "\ufffd": 1}
    store.add_escalation("acme/web", "blocked", "which \udfff port?", run)
    issue = store.add_local_issue("acme/web", "ti\ud800tle", "body", "alice", ())
    assert issue.title == "ti\ufffdtle"
