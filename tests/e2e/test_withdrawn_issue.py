"""An issue a human withdraws is not implemented or pushed: ``pipeline run``, fake GitHub, both
engines.

A human closes an issue whose run waits in the queue behind another, or takes its
``ready-for-agent`` label off: the run ends cancelled without its agent being called. A
human closes an issue while its agent is at work: the agent is stopped, or (on a forge the
daemon polls rarely) the run stops just before the push. Nothing of the run reaches the
remote, the issue is not left ``agent-working``, and its ending comment says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.intake.sanitize import inert_quote
from pipeline.store import Run

from .world import MAINTAINER, READY, WORKING, ShipWorld, Tuning, ship_world

pytestmark = pytest.mark.timeout(300)


class Withdrawing:
    """A ship world with the moves of a human who changes their mind."""

    def __init__(self, world: ShipWorld) -> None:
        self.world = world
        self.slug = world.repos["web"].slug

    def run_of(self, number: int, runs: list[Run]) -> Run | None:
        return next((r for r in runs if r.issue_number == number), None)

    def wait_state(self, number: int, states: set[str]) -> Run:
        def there(runs: list[Run]) -> bool:
            run = self.run_of(number, runs)
            return run is not None and run.state in states

        run = self.run_of(number, self.world.wait(f"#{number} in {states}", there, timeout_s=120))
        assert run is not None
        return run

    def agent_started(self, run: Run) -> None:
        self.world.wait(
            f"run {run.id}'s agent started",
            lambda _: any(call["run"] == run.id for call in self.world.agent_calls()),
        )

    def release(self) -> None:
        (self.world.agent_log.parent / "release").write_text("go\n")

    def close(self, number: int) -> None:
        self.world.fake.set_state(self.slug, number, "closed")

    def ended_withdrawn(self, number: int, why: str) -> Run:
        """The run of ``number`` ended cancelled for ``why``: nothing pushed, told once."""
        run = self.wait_state(number, {"succeeded", "failed", "escalated", "cancelled"})
        assert (run.state, run.error) == ("cancelled", f"cancelled: {why}"), self.world.describe(
            self.world.runs()
        )
        assert self.world.commits_of_run("web", run.id) == []
        assert f"withdrawn: {why}: the run ends cancelled, nothing pushed" in self.world.events(
            run.id
        )
        self.world.wait_event(run.id, "notify: ", timeout_s=60)
        issue = self.world.fake.issue(self.slug, number)
        endings = [c.body for c in issue.comments if f"afk-pipeline:run={run.id}:ended" in c.body]
        # The ending quotes the reason inert (ADR 35): "#2" carries a zero-width space.
        told = inert_quote(why)
        assert len(endings) == 1 and told in endings[0], [c.body for c in issue.comments]
        assert WORKING not in issue.labels
        return run


MakeWorld = Callable[..., "Withdrawing"]


@pytest.fixture
def make(tmp_path: Path, cli_env: dict[str, str], history_url: str | None) -> Iterator[MakeWorld]:
    """Builds the test's world on the test's engine; closes it afterwards."""
    with ExitStack() as stack:

        def build(tuning: Tuning | None = None) -> Withdrawing:
            tuning = replace(tuning or Tuning(), database_url=history_url)
            return Withdrawing(stack.enter_context(ship_world(tmp_path, cli_env, tuning=tuning)))

        yield build


def _one_queued_behind_another(make: MakeWorld) -> tuple[Withdrawing, int]:
    """Two labelled issues of one repo: the first's agent holds on, the second waits queued."""
    human = make()
    first = human.world.label("web", "Add alpha", "feature-when-released alpha")
    second = human.world.label("web", "Add beta", "feature beta")
    human.world.start()
    human.agent_started(human.wait_state(first, {"implementing"}))
    human.wait_state(second, {"queued"})
    return human, second


def test_closed_while_queued_is_never_started(make: MakeWorld) -> None:
    """An issue closed while its run is queued: the run ends cancelled, its agent never called."""
    human, second = _one_queued_behind_another(make)
    human.close(second)
    human.release()
    run = human.ended_withdrawn(second, f"issue #{second} was closed before the agent started")
    assert [c for c in human.world.agent_calls() if c["run"] == run.id] == []
    comments = human.world.fake.issue(human.slug, second).comments
    assert not any(f"run={run.id}:claimed" in c.body for c in comments)


def test_unlabelled_while_queued_is_never_started(make: MakeWorld) -> None:
    """The ready label taken off while the run is queued: cancelled, its agent never called."""
    human, second = _one_queued_behind_another(make)
    human.world.fake.unlabel(human.slug, second, READY, MAINTAINER)
    human.release()
    why = f"issue #{second} lost its `{READY}` label before the agent started"
    run = human.ended_withdrawn(second, why)
    assert [c for c in human.world.agent_calls() if c["run"] == run.id] == []


def test_closed_while_implementing_stops_the_agent(make: MakeWorld) -> None:
    """An issue closed while its agent works: the agent is stopped, nothing is pushed."""
    human = make()
    number = human.world.label("web", "Add alpha", "feature-when-released alpha")
    human.world.start()
    run = human.wait_state(number, {"implementing"})
    human.agent_started(run)
    human.close(number)
    human.world.wait_event(run.id, "withdrawn: ", timeout_s=60)
    human.release()  # too late: the agent was stopped before it wrote anything
    human.ended_withdrawn(number, f"issue #{number} was closed while the agent was working")


def test_closed_while_implementing_is_not_pushed(make: MakeWorld) -> None:
    """On a forge polled rarely the agent finishes, but the fresh read before the push finds
    the issue closed: the run ends cancelled and nothing reaches the remote."""
    human = make(Tuning(tracker_poll_interval_s=600))
    number = human.world.label("web", "Add alpha", "feature-when-released alpha")
    human.world.start()
    run = human.wait_state(number, {"implementing"})
    human.agent_started(run)
    human.close(number)
    human.release()
    human.ended_withdrawn(number, f"issue #{number} was closed before the push")


def test_a_failed_read_before_the_push_loses_nothing(make: MakeWorld) -> None:
    """The tracker answers 502 to the read before the push: recorded, and the run pushes and
    succeeds as it did before the check existed (a forge outage never loses a finished change)."""
    human = make(Tuning(tracker_poll_interval_s=600))
    number = human.world.label("web", "Add alpha", "feature-when-released alpha")
    human.world.start()
    run = human.wait_state(number, {"implementing"})
    human.agent_started(run)
    issue_path = f"/repos/{human.slug}/issues/{number}$"
    human.world.fake.inject(issue_path, status=502, method="GET")
    human.release()
    run = human.wait_state(number, {"succeeded", "failed", "escalated", "cancelled"})
    assert run.state == "succeeded", human.world.describe(human.world.runs())
    assert human.world.commits_of_run("web", run.id) == [run.pushed_sha]
    said = [e for e in human.world.events(run.id) if "could not read issue" in e]
    assert len(said) == 1 and said[0].startswith(f"tracker: could not read issue #{number} again")
    assert not [e for e in human.world.events(run.id) if e.startswith("withdrawn: ")]
    assert "pushing as if it were still wanted" in said[0]


def test_deleted_while_implementing_is_not_pushed(make: MakeWorld) -> None:
    """The read before the push finds the issue deleted (410 Gone): withdrawn like a closed
    one, nothing pushed; a deleted issue is not a forge outage."""
    human = make(Tuning(tracker_poll_interval_s=600))
    number = human.world.label("web", "Add alpha", "feature-when-released alpha")
    human.world.start()
    run = human.wait_state(number, {"implementing"})
    human.agent_started(run)
    human.world.fake.inject(f"/repos/{human.slug}/issues/{number}$", status=410, method="GET")
    human.release()
    run = human.wait_state(number, {"succeeded", "failed", "escalated", "cancelled"})
    assert (run.state, run.error) == (
        "cancelled",
        f"cancelled: issue #{number} was deleted before the push",
    ), human.world.describe(human.world.runs())
    assert human.world.commits_of_run("web", run.id) == []
