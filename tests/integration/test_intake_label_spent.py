"""A ready label starts one run: once that run has ended, only a new label starts another.

A run queued for the label can end before the daemon swaps the label for
``agent-working``: cancelled while queued (``pipeline runs cancel``, or the issue
closed), or failed before its claim. The label is then still on the issue, and the
run's ending comment changes the issue, so the ready list changes and intake looks
at it again. Real clients on each fake forge, the real store on both engines.
"""

from __future__ import annotations

from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld

from .conftest import READY, SLUG


def _queued(fake: FakeForge, world: IntakeWorld) -> int:
    number = fake.add_issue(SLUG, "Fix add", body="add() subtracts", author="stranger")
    fake.apply_label(SLUG, number, READY, "alice")
    world.intake.poll_all()
    assert len(world.runs()) == 1
    return number


def test_a_cancelled_run_is_not_queued_again_for_the_same_label(
    fake: FakeForge, world: IntakeWorld
) -> None:
    number = _queued(fake, world)
    [run] = world.runs()
    world.store.cancel_run(run.id, "operator")
    fake.add_comment(SLUG, number, "The run was cancelled.", "afk-bot")  # its ending comment
    world.intake.poll_all()
    assert [(r.id, r.state) for r in world.runs()] == [(run.id, "cancelled")]
    fake.unlabel(SLUG, number, READY, "alice")  # labelled anew: a new request
    fake.apply_label(SLUG, number, READY, "alice")
    world.intake.poll_all()
    assert len(world.runs()) == 2 and world.runs()[0].state == "queued"


def test_a_withdrawn_issue_reopened_by_its_author_stays_withdrawn(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """Closed while queued (the run ends cancelled), then reopened by the stranger who
    wrote it: the maintainer's label does not start it again."""
    number = _queued(fake, world)
    [run] = world.runs()
    fake.set_state(SLUG, number, "closed")
    world.store.cancel_run(run.id, "issue closed")
    world.intake.poll_all()
    fake.set_state(SLUG, number, "open")
    world.intake.poll_all()
    assert [(r.id, r.state) for r in world.runs()] == [(run.id, "cancelled")]
