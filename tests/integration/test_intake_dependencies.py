"""Intake holds back issues with open dependencies: real clients on fake forges, both engines."""

from __future__ import annotations

from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld, repo_name

from .conftest import READY, SLUG


def test_dependency_closed_by_a_human_releases_the_issue_on_an_unchanged_list(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """A waiting issue is queued once a human closes its (unlabelled) dependency."""
    base = fake.add_issue(SLUG, "groundwork", author="alice")
    waiting = fake.add_issue(
        SLUG, "on top", body=f"Depends on #{base}", author="alice", labels=[READY]
    )
    world.intake.poll_all()
    name = repo_name(fake.forge, SLUG)
    assert world.runs() == []
    assert [(w.number, w.reason) for w in world.store.waiting_issues(name)] == [
        (waiting, f"waits for #{base} (open)")
    ]
    fake.set_state(SLUG, base, "closed")
    world.intake.poll_all()  # the ready list itself has not changed
    assert [run.issue_number for run in world.runs()] == [waiting]
    assert world.store.waiting_issues(name) == []


def test_missing_dependency_is_told_once_over_many_polls(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """A dependency that does not exist is one comment, however often intake looks."""
    number = fake.add_issue(SLUG, "orphan", body="Blocked by #404", author="alice", labels=[READY])
    for _ in range(3):
        world.intake.poll_all()
    world.restart().poll_all()  # a restarted daemon does not tell it again
    told = [c.body for c in fake.issue(SLUG, number).comments if "#404 does not exist" in c.body]
    assert len(told) == 1 and world.runs() == []


def test_stranger_cannot_drop_a_labelled_dependency(fake: FakeForge, world: IntakeWorld) -> None:
    """The dependency the label vouched for holds after its untrusted author edits it out."""
    base = fake.add_issue(SLUG, "groundwork", author="alice")
    waiting = fake.add_issue(SLUG, "on top", body=f"Depends on #{base}", author="stranger")
    fake.apply_label(SLUG, waiting, READY, "alice")
    world.intake.poll_all()
    assert world.runs() == []
    fake.edit_issue(SLUG, waiting, "stranger", body="on top, now")  # the line is gone
    world.intake.poll_all()
    assert world.runs() == []  # #base is still open
    name = repo_name(fake.forge, SLUG)
    assert [(w.number, w.reason) for w in world.store.waiting_issues(name)] == [
        (waiting, f"waits for #{base} (open)")
    ]
    fake.set_state(SLUG, base, "closed")
    world.intake.poll_all()
    assert [run.issue_number for run in world.runs()] == [waiting]


def test_a_waiting_issue_does_not_read_its_dependencies_comments(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """Whether a dependency is done is its state: its comments (pages of them, anyone's to
    add) are not read on every poll the issue waits."""
    base = fake.add_issue(SLUG, "groundwork", author="alice")
    for n in range(250):
        fake.add_comment(SLUG, base, f"me too {n}", "stranger")
    waiting = fake.add_issue(SLUG, "on top", body=f"Depends on #{base}", author="stranger")
    fake.apply_label(SLUG, waiting, READY, "alice")
    for _ in range(2):
        world.intake.poll_all()
    read = [
        p
        for p in fake.paths("GET")
        if p.rstrip("/").endswith((f"/issues/{base}/comments", f"/issues/{base}/notes"))
    ]
    assert read == []
    assert world.runs() == []
    fake.set_state(SLUG, base, "closed")
    world.intake.poll_all()
    assert [run.issue_number for run in world.runs()] == [waiting]
