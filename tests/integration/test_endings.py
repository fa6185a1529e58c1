"""The ending policy on a real store and the local tracker: one comment, one notice, labels."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings, Settings, TrackerSettings
from pipeline.intake.lifecycle import Lifecycle
from pipeline.run.endings import Endings
from pipeline.run.recovery import Recovery
from pipeline.store import EnqueueOptions, Run, SeenIssue, Store
from pipeline.testing.sinks import RecordingNotifier
from pipeline.trackers.local import LocalTracker
from tests.integration.sql_log import StatementLog

WORKING, BLOCKED = "agent-working", "agent-blocked"


@dataclass
class World:
    store: Store
    endings: Endings
    inbox: RecordingNotifier
    recovery: Recovery

    def issue_run(self, **enqueue: object) -> tuple[int, Run]:
        """A local issue labelled ``agent-working`` and its run, claimed by a worker."""
        local = self.store.add_local_issue("web", "Add a thing", labels=(WORKING,))
        issue = self.store.upsert_issue(
            "web",
            SeenIssue(
                tracker="local",
                number=local.id,
                title=local.title,
                author="alice",
                url=f"local://web/issues/{local.id}",
            ),
        )
        options = EnqueueOptions(issue_id=issue.id, **enqueue)  # type: ignore[arg-type]
        run = self.store.enqueue("web", options).run
        claimed = self.store.claim_next("w", max_concurrency=5, lease_s=60)
        assert claimed is not None and claimed.id == run.id
        return local.id, claimed

    def finish(self, run: Run, state: str, error_class: str | None, error: str) -> Run:
        return self.store.finish(
            run.id, "w", run.attempt, state, error_class=error_class, error=error
        )

    def labels(self, number: int) -> tuple[str, ...]:
        issue = self.store.get_local_issue(number)
        assert issue is not None
        return tuple(issue.labels)

    def comments(self, number: int) -> list[str]:
        return [c.body for c in self.store.local_comments(number)]


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    store = Store(database_url)
    store.upgrade()
    repo = RepoSettings(name="web", tracker="local", slug="acme/web", remote_url="x")
    tracker = TrackerSettings(name="local", kind="local")
    settings = Settings(database_url=store.url, volume=tmp_path, repos=(repo,), trackers=(tracker,))
    store.sync_repos(settings.repos)
    local = LocalTracker(tracker, store, {"acme/web": "web"})
    lifecycle = Lifecycle(store, {"local": local}, {"local": tracker})
    recovery = Recovery(settings, store, lifecycle)
    inbox = RecordingNotifier()
    yield World(store, Endings(settings, store, lifecycle, recovery, inbox), inbox, recovery)
    store.close()


def test_a_failed_run_tells_once_and_unlabels(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Failed for good: blocked not working, one comment with the cause and retry, one notice."""
    number, run = world.issue_run(max_attempts=1)
    ended = world.finish(run, "failed", "push_auth", "the remote refused the token")
    with caplog.at_level(logging.INFO, logger="pipeline.run.endings"):
        world.endings.announce(ended)
        world.endings.announce(ended)
        world.endings.sweep()
    assert WORKING not in world.labels(number) and BLOCKED in world.labels(number)
    (comment,) = world.comments(number)
    assert "refused the token" in comment and f"pipeline runs retry {run.id}" in comment
    assert "frozen" not in comment
    (notice,) = world.inbox.sent
    assert notice.kind == "escalation" and f"run {run.id} failed (push_auth)" in notice.title
    assert [e.reason for e in world.store.list_escalations("web")] == ["push_auth"]
    lines = [r for r in caplog.records if f"run {run.id} ended" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING


def test_a_timed_out_run_says_so(world: World) -> None:
    """A run stopped by its time limit is told as timed out, never as cancelled."""
    number, run = world.issue_run(max_attempts=1, timeout_s=30)
    ended = world.finish(run, "failed", "timeout", "the run hit its time limit of 30 s")
    world.endings.announce(ended)
    (comment,) = world.comments(number)
    assert "timed out" in comment and "time limit of 30 s" in comment
    assert "cancel" not in comment
    assert f"run {run.id} timed out (timeout)" in world.inbox.sent[0].title


def test_a_cancelled_run_is_unlabelled_but_not_blocked(world: World) -> None:
    """Cancelled: agent-working goes, no agent-blocked; the comment names the retry."""
    number, run = world.issue_run()
    ended = world.finish(run, "cancelled", "cancelled", "cancelled while running")
    world.endings.announce(ended)
    assert world.labels(number) == ()
    (comment,) = world.comments(number)
    assert "cancelled" in comment and f"pipeline runs retry {run.id}" in comment
    assert len(world.inbox.sent) == 1


def test_a_run_cancelled_after_its_push_offers_a_retry_that_only_watches(world: World) -> None:
    """Cancelled while its pushed commit was watched: the comment names the commit, says its
    CI and deploy went unwatched, and offers a retry that watches it (never relabelling,
    which would implement the issue again)."""
    number, run = world.issue_run()
    sha = "ab" * 20
    world.store.update_run(run.id, "w", run.attempt, pushed_sha=sha)
    ended = world.finish(run, "cancelled", "cancelled", "cancelled while running")
    world.endings.announce(ended)
    assert world.labels(number) == ()
    (comment,) = world.comments(number)
    assert sha in comment and "were not watched" in comment
    assert f"pipeline runs retry {run.id}" in comment and "it implements nothing" in comment
    assert "label the issue" not in comment
    assert f"pipeline runs show {run.id}" in comment


def test_a_frozen_ending_names_the_unfreeze(world: World) -> None:
    """Escalated with the repo frozen by this run: the next step is the unfreeze command."""
    number, run = world.issue_run()
    world.recovery.freeze("web", "deploy still broken", run.id)
    ended = world.finish(run, "escalated", "frozen", "deploy of abc still broken")
    world.endings.announce(ended)
    (comment,) = world.comments(number)
    assert "pipeline repos unfreeze web" in comment and "runs retry" not in comment
    kind, title = world.inbox.sent[0].kind, world.inbox.sent[0].title
    assert kind == "freeze" and f"run {run.id} frozen (frozen)" in title


def test_a_broken_deploy_link_of_a_chain_posts_nothing(world: World) -> None:
    """A run whose fix-forward child carries on (deploy_broken) is only logged."""
    number, run = world.issue_run()
    ended = world.finish(run, "failed", "deploy_broken", "fix-forward run 9 is healing it")
    world.endings.announce(ended)
    assert world.comments(number) == [] and world.inbox.sent == []
    assert WORKING in world.labels(number)


def test_a_superseded_fix_forward_says_so_under_its_broken_runs_escalation(world: World) -> None:
    """A fix-forward its broken run's escalation superseded (watched again after a crash, the
    deploy was inconclusive): one line on the issue saying so, no retry offered, no freeze,
    and the escalation's agent-blocked label stays."""
    number, run = world.issue_run()
    ended = world.finish(run, "escalated", "deploy_inconclusive", "the watch was inconclusive")
    world.endings.announce(ended)
    fix = world.store.enqueue(
        "web", EnqueueOptions(kind="fix_forward", priority=1_000_000, parent_id=run.id)
    ).run
    claimed = world.store.claim_next("w", max_concurrency=5, lease_s=60)
    assert claimed is not None and claimed.id == fix.id
    said = f"superseded: run {run.id} ended escalated; nothing was pushed"
    world.endings.announce(world.finish(claimed, "cancelled", "superseded", said))
    assert world.labels(number) == (BLOCKED,)
    first, second = world.comments(number)
    assert f"run {run.id}: escalated" in first and f"pipeline runs retry {run.id}" in first
    assert said in second and f"pipeline runs show {fix.id}" in second
    assert "runs retry" not in second and "frozen" not in second
    assert not world.store.get_repo("web").frozen  # type: ignore[union-attr]
    assert [n.kind for n in world.inbox.sent] == ["escalation"]


def test_the_sweep_announces_endings_written_elsewhere(world: World) -> None:
    """A waiting run cancelled from the CLI (no worker) is announced by the periodic sweep."""
    local = world.store.add_local_issue("web", "Queued thing", labels=(WORKING,))
    issue = world.store.upsert_issue(
        "web",
        SeenIssue(tracker="local", number=local.id, title="Queued thing", author="a", url="u"),
    )
    run = world.store.enqueue("web", EnqueueOptions(issue_id=issue.id)).run
    world.store.cancel_run(run.id, by="cli")
    assert world.endings.sweep() == 1
    assert world.endings.sweep() == 0
    assert world.labels(local.id) == () and len(world.comments(local.id)) == 1
    assert "cancelled by cli" in world.comments(local.id)[0]


def _ended_and_told(world: World, count: int) -> None:
    for _ in range(count):
        _, run = world.issue_run(max_attempts=1)
        world.finish(run, "failed", "push_auth", "refused")
    assert world.endings.sweep() == count


def test_the_sweep_reads_the_history_once_however_many_runs_ended(world: World) -> None:
    """The periodic pass costs the same statements with 2 or 6 recent endings told."""
    _ended_and_told(world, 2)
    with StatementLog(world.store.engine) as few:
        assert world.endings.sweep() == 0
    _ended_and_told(world, 4)
    with StatementLog(world.store.engine) as many:
        assert world.endings.sweep() == 0
    assert many.queries == few.queries <= 2, many.statements


def test_unannounced_endings_are_the_recent_untold_ones_newest_first(world: World) -> None:
    """Terminal runs ended since the cut-off and not told yet, newest first, up to the limit."""
    runs = []
    for _ in range(3):
        _, run = world.issue_run(max_attempts=1)
        runs.append(world.finish(run, "failed", "push_auth", "refused"))
    _, busy = world.issue_run()
    since = min(r.finished_at for r in runs if r.finished_at is not None)
    world.store.claim_side_effect(f"told:{runs[1].id}", run_id=runs[1].id)
    world.store.claim_side_effect(f"other:{runs[2].id}", run_id=runs[2].id)
    found = world.store.unannounced_endings(since, "told:", 10)
    assert [r.id for r in found] == [runs[2].id, runs[0].id]
    assert [r.id for r in world.store.unannounced_endings(since, "told:", 1)] == [runs[2].id]
    later = max(r.finished_at for r in runs if r.finished_at is not None) + timedelta(seconds=1)
    assert world.store.unannounced_endings(later, "told:", 10) == []
    assert busy.id not in {r.id for r in found}


def test_an_ending_of_a_repo_no_longer_configured_is_logged_once(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A repo removed from the config: its ending is said once, not at every pass."""
    _, run = world.issue_run(max_attempts=1)
    world.finish(run, "failed", "push_auth", "refused")
    settings = dataclasses.replace(world.endings.settings, repos=())
    endings = Endings(settings, world.store, world.endings.lifecycle, world.recovery, world.inbox)
    with caplog.at_level(logging.WARNING, logger="pipeline.run.endings"):
        endings.sweep()
        endings.sweep()
    said = [r for r in caplog.records if "no longer configured" in r.getMessage()]
    assert len(said) == 1 and world.inbox.sent == []


def test_a_crash_while_recording_a_failed_runs_escalation_loses_no_row(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon dies as it writes a failed run's escalation: the next pass writes it, once."""
    number, run = world.issue_run(max_attempts=1)
    ended = world.finish(run, "failed", "push_auth", "the remote refused the token")
    real = world.store.add_escalation

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(world.store, "add_escalation", crash)
    with pytest.raises(KeyboardInterrupt):
        world.endings.announce(ended)
    monkeypatch.setattr(world.store, "add_escalation", real)
    world.endings.announce(ended)
    world.endings.sweep()
    assert [e.reason for e in world.store.list_escalations("web")] == ["push_auth"]
    assert len(world.comments(number)) == 1 and len(world.inbox.sent) == 1


def test_quoted_words_act_on_nothing_in_the_comments_but_reach_the_humans(world: World) -> None:
    """The escalated run's error and the CI's words are quoted inert on the issue (no mention,
    reference or line-leading quick action); the notification keeps them as written."""
    number, run = world.issue_run(max_attempts=1)
    error = "the tests are still red. End of the output:\nping @victim, other/repo#3\n/close"
    world.endings.announce(world.finish(run, "escalated", "tests_red", error))
    repo = RepoSettings(name="web", tracker="local", slug="acme/web", remote_url="x")
    ci = "check @org/team: failure (see #9)\n/assign @victim"
    world.recovery.resolve_pending(
        repo, {"root": run.id, "number": number, "sha": "abc", "ci": ci, "deploy": "ok"}
    )
    ending, done = world.comments(number)
    assert "ping @victim, other/repo#3" in ending.replace("\u200b", ""), ending
    assert "check @org/team: failure (see #9)" in done.replace("\u200b", ""), done
    for body in (ending, done):
        assert not any(word in body for word in ("@victim", "other/repo#3", "@org/team", "#9"))
        assert not any(line.startswith("/") for line in body.splitlines()), body
    (notice,) = world.inbox.sent
    assert "ping @victim, other/repo#3\n/close" in notice.body
