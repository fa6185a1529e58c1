"""An issue that waits in a frozen repo says so on the tracker, once, and runs after the unfreeze.

A broken deploy freezes ``web`` (no fix-forward allowed). One issue was queued before the
freeze; another is labelled while the repo is frozen. Read from the fake GitHub: each
gets exactly one comment saying its run waits because the repo is frozen since the run
that froze it, and naming the command that unfreezes it; polls and a daemon restart add
none. After a human restores the branch and unfreezes the repo, both run and close.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.store import Run

from .conftest import stop_daemon
from .world import ShipWorld, issue_runs, ship_world

pytestmark = [pytest.mark.deploy_e2e, pytest.mark.timeout(300)]

UNFREEZE = 'pipeline repos unfreeze web --note "what you found and fixed"'


def _told_waiting(world: ShipWorld, number: int) -> list[str]:
    """The issue's comments that name the unfreeze (the waiting comment, nothing else)."""
    comments = world.fake.issue(world.repos["web"].slug, number).comments
    return [c.body for c in comments if "pipeline repos unfreeze" in c.body]


def _polls(world: ShipWorld) -> int:
    """How many times the daemon listed the repo's issues (each poll lists them)."""
    slug = world.repos["web"].slug
    return sum(1 for r in list(world.fake.requests) if r.path == f"/repos/{slug}/issues")


def _after_more_polls(world: ShipWorld, count: int) -> None:
    """Wait until the daemon has polled ``count`` more times (so passes ran meanwhile)."""
    start = _polls(world)
    world.wait(f"{count} more polls", lambda _: _polls(world) >= start + count, 60)


def _frozen_by(world: ShipWorld) -> int | None:
    record = world.store.get_repo("web")
    return record.frozen_run_id if record is not None and record.frozen else None


def _closed(runs: list[Run], numbers: tuple[int, ...]) -> bool:
    return all(any(r.terminal for r in issue_runs(runs, n)) for n in numbers)


def test_an_issue_waiting_in_a_frozen_repo_is_told_once_and_runs_after_the_unfreeze(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    with ship_world(tmp_path, cli_env, max_fix_forwards=0) as world:
        breaking = world.label("web", "Ask the backend for status", "break")
        world.start()
        world.wait("the breaking issue is queued", lambda rs: bool(issue_runs(rs, breaking)))
        early = world.label("web", "Add a reports helper", "feature reports")  # before the freeze
        runs = world.wait("the repo freezes", lambda rs: _frozen_by(world) is not None, 120)
        broken = issue_runs(runs, breaking)[0]
        assert _frozen_by(world) == broken.id, world.describe(runs)
        late = world.label("web", "Add an exports helper", "feature exports")
        world.wait("the late issue is queued", lambda rs: bool(issue_runs(rs, late)))
        for number in (early, late):
            world.wait(
                f"issue #{number} is told it waits",
                lambda _, n=number: bool(_told_waiting(world, n)),
            )
        for number in (early, late):
            (told,) = _told_waiting(world, number)
            run = issue_runs(world.runs(), number)[0]
            assert run.state == "queued", world.describe(world.runs())
            assert f"run {run.id}" in told and "frozen since run" in told, told
            assert f"frozen since run {broken.id}" in told and UNFREEZE in told, told
        assert all("frozen since" not in c for c in _told_waiting(world, breaking))
        # Polls and passes go on, and a restarted daemon finds the comments already there.
        _after_more_polls(world, 3)
        stop_daemon(world.daemons[-1])
        world.start()
        _after_more_polls(world, 3)
        assert [len(_told_waiting(world, n)) for n in (early, late)] == [1, 1]
        # A human restores the branch and unfreezes: both issues run and close.
        world.human_commit("web", {"lib.py": world.app_lib}, "Restore lib.status by hand")
        world.cli("repos", "unfreeze", "web", "--note", "restored lib.status")
        runs = world.wait("both issues run", lambda rs: _closed(rs, (early, late)), 120)
        for number in (early, late):
            assert [r.state for r in issue_runs(runs, number)] == ["succeeded"], world.describe(
                runs
            )
            issue = world.fake.issue(world.repos["web"].slug, number)
            assert issue.state == "closed"
            assert len(_told_waiting(world, number)) == 1
            assert any("Done in" in c.body for c in issue.comments)
