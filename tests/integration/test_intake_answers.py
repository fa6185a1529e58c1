"""Answering an escalated run from the issue: per forge, a real store on both engines.

A re-label or a ``/afk resume`` comment by a trusted author queues a run linked
to the escalated one (``parent_id``); a stranger's command queues nothing and is
refused once on the issue; an ending a reply cannot answer is not linked.
"""

from __future__ import annotations

from pipeline.intake.lifecycle import marker
from pipeline.store import Run
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld

from .conftest import READY, SLUG


def _escalated(world: IntakeWorld, fake: FakeForge, reason: str = "blocked") -> tuple[int, Run]:
    """An issue whose one run escalated with ``reason``, its ending comment on the issue."""
    number = fake.add_issue(SLUG, "set the port", labels=[READY])
    assert world.intake.poll(fake.forge).enqueued == 1
    claimed = world.store.claim_next("test", max_concurrency=1, lease_s=60)
    assert claimed is not None
    run = world.store.finish(
        claimed.id,
        "test",
        claimed.attempt,
        "escalated",
        error_class=reason,
        error="the agent is blocked: which port?",
    )
    fake.unlabel(SLUG, number, READY, "afk-pipeline")
    ending = f"run {run.id} escalated {marker(f'run={run.id}:ended')}"
    fake.add_comment(SLUG, number, ending, fake.bot)  # posted by the daemon's token
    return number, run


def _advance(world: IntakeWorld) -> None:
    world.clock.advance(600)  # past the tracker's poll interval


def test_a_trusted_relabel_links_the_new_run_to_the_escalated_one(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """Re-adding the ready label after a blocked ending queues a run whose parent is that run."""
    number, escalated = _escalated(world, fake)
    fake.add_comment(SLUG, number, "Use port 8080", "alice")
    fake.apply_label(SLUG, number, READY, "alice")
    _advance(world)
    world.intake.poll(fake.forge)
    [new] = [run for run in world.runs() if run.id != escalated.id]
    assert new.parent_id == escalated.id and new.issue_number == number


def test_an_ending_no_reply_answers_is_not_linked(fake: FakeForge, world: IntakeWorld) -> None:
    """After a ``budget`` escalation a re-label queues a plain run, not a resumed one."""
    number, escalated = _escalated(world, fake, reason="budget")
    fake.apply_label(SLUG, number, READY, "alice")
    _advance(world)
    world.intake.poll(fake.forge)
    [new] = [run for run in world.runs() if run.id != escalated.id]
    assert new.parent_id is None


def test_resume_command_by_a_stranger_is_refused_once_and_by_a_writer_queued(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """``/afk resume`` from a stranger: one refusal, nothing queued; from a writer: linked run."""
    number, escalated = _escalated(world, fake)
    fake.add_comment(SLUG, number, "/afk resume", "mallory")
    for _ in range(2):
        _advance(world)
        world.intake.poll(fake.forge)
    refusals = [c.body for c in fake.issue(SLUG, number).comments if "is ignored" in c.body]
    assert len(refusals) == 1 and "@mallory" in refusals[0]
    assert [run.id for run in world.runs()] == [escalated.id]
    fake.add_comment(SLUG, number, "/AFK  resume\nUse port 8080", "alice")
    _advance(world)
    world.intake.poll(fake.forge)
    [new] = [run for run in world.runs() if run.id != escalated.id]
    assert new.parent_id == escalated.id and new.requested_by == "alice"
    _advance(world)
    world.intake.poll(fake.forge)  # the escalated run is no longer the issue's latest
    assert len(world.runs()) == 2


def test_a_command_before_the_escalation_does_not_count(
    fake: FakeForge, world: IntakeWorld
) -> None:
    """A resume command posted before the escalation's comment answers nothing."""
    number = fake.add_issue(SLUG, "early", labels=[READY])
    fake.add_comment(SLUG, number, "/afk resume", "alice")
    world.intake.poll(fake.forge)
    claimed = world.store.claim_next("test", max_concurrency=1, lease_s=60)
    assert claimed is not None
    run = world.store.finish(
        claimed.id, "test", claimed.attempt, "escalated", error_class="blocked", error="?"
    )
    fake.unlabel(SLUG, number, READY, "afk-pipeline")
    fake.add_comment(SLUG, number, f"escalated {marker(f'run={run.id}:ended')}", "bot")
    _advance(world)
    world.intake.poll(fake.forge)
    assert [r.id for r in world.runs()] == [run.id]
