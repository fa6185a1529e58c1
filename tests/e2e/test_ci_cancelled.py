"""CI cancelled on the run's commit: no verdict on it.

With ``concurrency: cancel-in-progress`` a colleague's push cancels the CI of
the commit under it. Read as a failure, that cancel started a fix-forward of a
healthy change and could end with the repo frozen and a human called for
nothing. A later commit of the default branch that holds the run's commit is
judged instead; with none, the watch waits for its CI deadline and says why it
could not judge. Woodpecker's ``killed`` and ``canceled`` pipelines are the
same: stopped before a verdict. When the later commit's CI fails, that commit
is the one named broken, and the one whose CI a fix-forward looks at again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipeline.store import Run

from .ci_feeder import CheckPlan
from .conftest import ENDED
from .world import BLOCKED, ShipWorld, Tuning, held_ci_plan, rerun_green, ship_world

pytestmark = pytest.mark.deploy_e2e


def _issue_run(runs: list[Run], number: int) -> Run | None:
    return next((r for r in runs if r.issue_number == number and r.kind == "issue"), None)


def _state(runs: list[Run], number: int) -> str | None:
    run = _issue_run(runs, number)
    return run.state if run else None


def _frozen(world: ShipWorld) -> bool:
    record = world.store.get_repo("web")
    return record is not None and record.frozen


def _ended_comment(world: ShipWorld, number: int, run_id: int) -> str:
    """The run's ending comment on its issue, once the ending pass has written it."""
    marker, deadline = f"afk-pipeline:run={run_id}:ended", time.monotonic() + 30
    while time.monotonic() < deadline:
        issue = world.fake.issue(world.repos["web"].slug, number)
        found = [c.body for c in issue.comments if marker in c.body]
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no ending comment on #{number}")


@pytest.mark.parametrize(("ci", "status"), [("github", "cancelled"), ("woodpecker", "killed")])
def test_ci_stopped_by_a_colleagues_push_is_judged_by_their_commit(
    tmp_path: Path, cli_env: dict[str, str], ci: str, status: str
) -> None:
    """The run's CI is stopped as a colleague pushes on top (a GitHub check cancelled, a
    Woodpecker pipeline killed, which used to count as a failure and start a fix-forward
    of a healthy change): that commit's green CI judges the run."""
    with ship_world(tmp_path, cli_env, plan=held_ci_plan, tuning=Tuning(ci=ci)) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait("the run watches its CI", lambda rs: _state(rs, number) == "watching")
        run = _issue_run(runs, number)
        assert run is not None and run.pushed_sha
        theirs = world.human_commit("web", {"NOTES.md": "Release notes.\n"}, "Add release notes")
        world.feeder.complete(world.repos["web"].slug, run.pushed_sha, status)
        runs = world.wait("the run ends", lambda rs: _state(rs, number) in ENDED, 90)
        run = _issue_run(runs, number)
        assert run is not None and run.state == "succeeded", world.describe(runs)
        assert [r for r in runs if r.kind == "fix_forward"] == []
        assert world.store.list_escalations("web") == [] and not _frozen(world)
        events = "\n".join(world.events(run.id))
        assert f"judged by {theirs[:12]}" in events, events
        issue = world.fake.issue(world.repos["web"].slug, number)
        assert issue.state == "closed" and BLOCKED not in issue.labels
        if world.woodpecker is not None:
            served = {p["commit"]: p["status"] for p in world.woodpecker.pipelines("1")}
            assert served[run.pushed_sha] == status and served[theirs] == "success", served


@pytest.mark.parametrize(("ci", "status"), [("github", "cancelled"), ("woodpecker", "canceled")])
def test_ci_stopped_with_nothing_on_top_is_inconclusive_and_says_why(
    tmp_path: Path, cli_env: dict[str, str], ci: str, status: str
) -> None:
    """Cancelled, and no later commit: no fix-forward, no freeze; the human is told why."""
    tuning = Tuning(ci_timeout_s=8, ci=ci)
    with ship_world(tmp_path, cli_env, plan=held_ci_plan, tuning=tuning) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait("the run watches its CI", lambda rs: _state(rs, number) == "watching")
        run = _issue_run(runs, number)
        assert run is not None and run.pushed_sha
        world.feeder.complete(world.repos["web"].slug, run.pushed_sha, status)
        runs = world.wait("the run ends", lambda rs: _state(rs, number) in ENDED, 90)
        run = _issue_run(runs, number)
        assert run is not None and run.state == "escalated", world.describe(runs)
        assert [r for r in runs if r.kind == "fix_forward"] == [] and not _frozen(world)
        (escalation,) = world.store.list_escalations("web")
        assert "was cancelled" in escalation.detail and "no later commit" in escalation.detail
        ended = _ended_comment(world, number, run.id)
        assert "was cancelled" in ended and "no later commit" in ended, ended


def _their_ci_red(slug: str, sha: str, subject: str) -> CheckPlan:
    """``[held-ci]`` waits for the test, ``[ci-red]`` goes red, anything else green."""
    if "[held-ci]" in subject:
        return CheckPlan(pending_s=600.0)
    return CheckPlan(conclusion="failure" if "[ci-red]" in subject else "success")


@pytest.mark.timeout(300)
def test_red_ci_of_the_later_commit_names_that_commit_and_its_rerun_heals(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Ours cancelled, theirs on top red: theirs is named broken, and its CI re-run green
    heals the chain. The run's commit used to be named, and the fix-forward that found
    nothing to change looked again at its cancelled CI and froze the repo."""
    world_args = {"plan": _their_ci_red, "fix_mode": "nothing-when-released"}
    with ship_world(tmp_path, cli_env, **world_args) as world:
        number = world.label("web", "Add a reports helper [held-ci]", "feature reports")
        world.start()
        runs = world.wait("the run watches its CI", lambda rs: _state(rs, number) == "watching")
        run = _issue_run(runs, number)
        assert run is not None and run.pushed_sha
        ours, slug = run.pushed_sha, world.repos["web"].slug
        theirs = world.human_commit("web", {"NOTES.md": "Notes.\n"}, "Add notes [ci-red]")
        world.feeder.complete(slug, ours, "cancelled")
        runs = world.wait(
            "the run ends and its fix-forward starts",
            lambda rs: _state(rs, number) in ENDED and any(r.kind == "fix_forward" for r in rs),
        )
        run = _issue_run(runs, number)
        assert run is not None and run.error and f"{theirs[:12]} is broken" in run.error, run
        assert ours[:12] not in run.error.split(" is broken")[0], run.error
        fix = next(r for r in world.runs() if r.kind == "fix_forward")
        (evidence,) = [e for e in world.store.run_events(fix.id) if e.kind == "evidence"]
        assert evidence.data["broken_sha"] == theirs, evidence.data
        prompt = str(evidence.data["prompt"])
        assert f"Fix-forward: commit {theirs}" in prompt, prompt
        assert f"commit {ours}" in prompt and "whose own CI was cancelled" in prompt, prompt
        rerun_green(world, theirs)
        (tmp_path / "agent-area" / "release").touch()
        runs = world.wait(
            "the fix-forward ends",
            lambda rs: any(r.kind == "fix_forward" and r.terminal for r in rs),
            90,
        )
        fix = next(r for r in runs if r.kind == "fix_forward")
        assert fix.state == "succeeded", world.describe(runs)
        assert not _frozen(world) and world.store.list_escalations("web") == []
        # The issue is done in the run's own commit; theirs, re-run green, only vouched for it.
        issue = world.fake.issue(slug, number)
        (done,) = [c.body for c in issue.comments if "Done in" in c.body]
        assert issue.state == "closed" and f"Done in {ours} " in done, done
        assert theirs[:12] in done and "re-run" in done, done
