"""An issue queued in a frozen repo is told once per freeze, on every forge, across replicas.

The attacker writes the freeze's note (an operator's words, or an API caller's): a
mention, an issue reference, a GitLab quick action on its own line and a look-alike
of the comment's own marker. The comment quotes it inert and is still posted.
"""

from __future__ import annotations

import threading

from pipeline.intake.frozen import FrozenWaits
from pipeline.intake.sanitize import BREAK
from pipeline.notify.escalation import unfreeze_command
from pipeline.testing.forges.base import FakeForge
from pipeline.testing.intake_world import IntakeWorld

from .conftest import SLUG
from .test_lifecycle import queued_run

NOTE = "@admin look at #3 first\n/close\n<!-- afk-pipeline:run=1:frozen-wait -->"


def _told(fake: FakeForge, number: int) -> list[str]:
    return [c.body for c in fake.issue(SLUG, number).comments if "waits" in c.body]


def _replicas(world: IntakeWorld) -> list[FrozenWaits]:
    """Two daemons' passes over one store, each with its own tracker clients."""
    first = FrozenWaits(world.store, world.settings, world.intake.lifecycle)
    return [first, FrozenWaits(world.store, world.settings, world.restart().lifecycle)]


def _sweep_together(passes: list[FrozenWaits]) -> None:
    start = threading.Barrier(len(passes))

    def sweep(one: FrozenWaits) -> None:
        start.wait()
        one.sweep()

    threads = [threading.Thread(target=sweep, args=(p,)) for p in passes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_told_once_across_replicas_and_restarts_with_the_note_inert(
    fake: FakeForge, world: IntakeWorld
) -> None:
    run = queued_run(fake, world)
    repo = world.settings.repos[0]
    assert run.issue_number is not None
    passes = _replicas(world)
    assert [p.sweep() for p in passes] == [0, 0], "told while the repo was not frozen"
    world.store.freeze_repo(repo.name, NOTE, "@mallory")
    _sweep_together(passes)
    _sweep_together(_replicas(world))  # restarted daemons: nothing new
    [told] = _told(fake, run.issue_number)
    assert f"run {run.id} is queued and waits" in told and unfreeze_command(repo.name) in told
    assert f"@{BREAK}admin" in told and f"#{BREAK}3" in told and f"by @{BREAK}mallory" in told
    assert "@admin" not in told and "@mallory" not in told
    assert not any(line.lstrip().startswith("/close") for line in told.splitlines())
    assert told.count("<!--") == 1, told  # only the daemon's own marker
    # Unfrozen, nothing is said; frozen again while the run still waits, told again.
    world.store.unfreeze_repo(repo.name, "fixed", "alice")
    assert passes[0].sweep() == 0
    world.store.freeze_repo(repo.name, "held for a release", "alice")
    assert passes[1].sweep() == 1 and passes[0].sweep() == 0
    assert len(_told(fake, run.issue_number)) == 2
    assert "by alice: held for a release" in _told(fake, run.issue_number)[1]


def test_a_run_no_longer_queued_is_not_told(fake: FakeForge, world: IntakeWorld) -> None:
    run = queued_run(fake, world)
    repo = world.settings.repos[0]
    assert run.issue_number is not None
    world.store.cancel_run(run.id, "alice")
    world.store.freeze_repo(repo.name, "held", "alice")
    assert FrozenWaits(world.store, world.settings, world.intake.lifecycle).sweep() == 0
    assert _told(fake, run.issue_number) == []
