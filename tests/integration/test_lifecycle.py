"""An issue's labels and comments as its run moves, per forge, never duplicated."""

from __future__ import annotations

from pathlib import Path

from pipeline.core.events import NullSink
from pipeline.core.masking import register_secret
from pipeline.intake.lifecycle import marker
from pipeline.store import Run
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld

from .conftest import READY, SLUG, intake_over

WORKING, BLOCKED = "agent-working", "agent-blocked"


def queued_run(fake: FakeForge, world: IntakeWorld) -> Run:
    fake.add_issue(SLUG, "ready", labels=[READY, BLOCKED])
    world.intake.poll(fake.forge)
    [run] = world.runs()
    return run


def tagged(fake: FakeForge, number: int, key: str) -> list[str]:
    return [c.body for c in fake.issue(SLUG, number).comments if marker(key) in c.body]


def test_claim_swaps_labels_and_links_the_run_once(fake: FakeForge, world: IntakeWorld) -> None:
    """On claim agent-working replaces the ready (and blocked) label; one comment, even retried."""
    run = queued_run(fake, world)
    repo = world.settings.repos[0]
    assert run.issue_number is not None
    for _ in range(2):
        world.intake.lifecycle.claimed(run, repo, NullSink())
    world.restart().lifecycle.claimed(run, repo, NullSink())
    assert fake.issue(SLUG, run.issue_number).labels == [WORKING]
    [comment] = tagged(fake, run.issue_number, f"run={run.id}:claimed")
    assert f"run {run.id}" in comment


def test_success_comments_sha_ci_deploy_and_closes_once(
    fake: FakeForge, world: IntakeWorld, tmp_path: Path
) -> None:
    """Success: one comment with the SHA and the CI and deploy results; the issue is closed."""
    run = queued_run(fake, world)
    repo = world.settings.repos[0]
    assert run.issue_number is not None
    lifecycle = world.intake.lifecycle
    lifecycle.claimed(run, repo, NullSink())
    for _ in range(2):
        lifecycle.succeeded(run, repo, "abc123def", "success (2 checks)", "healthy (3 probes)")
    # A store that lost its keys (a new database) still finds the marker.
    with intake_over(fake, SLUG, f"sqlite:///{tmp_path / 'fresh.db'}", tmp_path / "v2") as fresh:
        fresh.intake.lifecycle.succeeded(run, repo, "abc123def", "success", "healthy")
    issue = fake.issue(SLUG, run.issue_number)
    assert issue.state == "closed" and WORKING not in issue.labels
    [comment] = tagged(fake, run.issue_number, f"run={run.id}:resolved")
    assert "abc123def" in comment and "success (2 checks)" in comment
    assert "healthy (3 probes)" in comment


def test_escalation_labels_blocked_and_says_what_to_do_once(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """Escalation: agent-blocked replaces agent-working; one comment with reason and next step."""
    run = queued_run(fake, world)
    repo = world.settings.repos[0]
    assert run.issue_number is not None
    lifecycle = world.intake.lifecycle
    lifecycle.claimed(run, repo, NullSink())
    body = f"tests_never_green: The tests failed 3 times. Next: pipeline runs retry {run.id}"
    posted = [lifecycle.ended(run.issue_number, repo, run.id, body, blocked=True) for _ in "ab"]
    assert posted == [True, False]
    issue = fake.issue(SLUG, run.issue_number)
    assert issue.labels == [BLOCKED] and issue.state == "open"
    [comment] = tagged(fake, run.issue_number, f"run={run.id}:ended")
    assert "tests_never_green" in comment and "The tests failed 3 times." in comment
    assert f"pipeline runs retry {run.id}" in comment


def test_a_secret_in_an_escalation_never_reaches_the_issue_comment(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """The agent's words in an escalation are masked before the forge sees the comment."""
    register_secret("SNTL-lifecycle-token-77aa")
    run = queued_run(fake, world)
    repo = world.settings.repos[0]
    assert run.issue_number is not None
    lifecycle = world.intake.lifecycle
    lifecycle.ended(
        run.issue_number, repo, run.id, "needs SNTL-lifecycle-token-77aa now", blocked=True
    )
    [comment] = tagged(fake, run.issue_number, f"run={run.id}:ended")
    assert "needs *** now" in comment and "SNTL" not in comment
