"""Every ending reaches a human: through ``pipeline run`` against the fake GitHub, both engines.

For each way a run can end without a human having asked for it (failed after
its retries, timed out, blocked, tests never green, deploy broken and frozen)
and for a cancel, the issue ends without ``agent-working``, with exactly one
ending comment naming the cause and the next command, and exactly one
notification reaches the loopback apprise ``json://`` receiver.

Every case goes through the harder path: the receiver is down during the
ending, the daemon marks the notice undelivered, then the daemon restarts with
the receiver back, and still exactly one notice and one comment result.
``told_once`` reads all of that from outside the daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.store import Run
from pipeline.testing.receiver import Receiver

from .conftest import stop_daemon
from .world import BLOCKED, WORKING, ShipWorld, Tuning, ship_world

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    """The history's database: SQLite in the world (None) or a fresh PostgreSQL one."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


@dataclass(frozen=True)
class Told:
    """What a human sees of one ending, read from the fake forge and the receiver."""

    comment: str
    notice: str
    labels: tuple[str, ...]


def _ending_of(world: ShipWorld, number: int) -> Run:
    def ended(runs: list[Run]) -> bool:
        mine = [r for r in runs if r.issue_number == number or r.kind == "fix_forward"]
        return (
            bool(mine)
            and all(r.terminal for r in mine)
            and _last(mine).error_class != ("deploy_broken")
        )

    runs = world.wait(f"issue #{number} ends", ended, timeout_s=180)
    return _last([r for r in runs if r.issue_number == number or r.kind == "fix_forward"])


def _last(runs: list[Run]) -> Run:
    return max(runs, key=lambda r: r.id)


def _back_after_a_restart(world: ShipWorld, run: Run) -> None:
    """Once the daemon has given up on the notice (receiver down), restart it, receiver back."""
    world.wait(
        f"run {run.id}'s notice is marked undelivered",
        lambda runs: any(r.id == run.id and r.notifications_undelivered for r in runs),
        timeout_s=60,
    )
    assert world.receiver.received == []
    stop_daemon(world.daemons[-1])
    world.receiver = Receiver(port=world.receiver.port)
    world.start()


def told_once(world: ShipWorld, number: int, run: Run) -> Told:
    """The issue's ending comment and the one notification, once both have happened, the
    notification through a receiver that was down at the ending and a daemon restart."""
    _back_after_a_restart(world, run)
    slug = world.repos["web"].slug
    marker = f"afk-pipeline:run={run.id}:ended"
    world.wait_event(run.id, "notify: ", timeout_s=60)
    notices = world.receiver.wait_for(1, timeout_s=30)
    comments = [c.body for c in world.fake.issue(slug, number).comments]
    endings = [c for c in comments if marker in c]
    others = [c for c in comments if "afk-pipeline:run=" in c and ":claimed" not in c]
    assert len(endings) == 1 and others == endings, comments
    assert len(notices) == 1, [n.body for n in notices]
    issue = world.fake.issue(slug, number)
    return Told(endings[0], notices[0].body.decode(), tuple(issue.labels))


MakeWorld = Callable[..., ShipWorld]


@pytest.fixture
def make_world(
    tmp_path: Path, cli_env: dict[str, str], engine_url: str | None
) -> Iterator[MakeWorld]:
    """Builds the test's world on the test's engine, its receiver down; closes it afterwards."""
    with ExitStack() as stack:

        def build(tuning: Tuning | None = None, **kw: Any) -> ShipWorld:
            tuning = replace(tuning or Tuning(), database_url=engine_url)
            world = stack.enter_context(ship_world(tmp_path, cli_env, tuning=tuning, **kw))
            world.receiver.close()  # down during the ending; told_once brings it back
            return world

        yield build


def test_failed_after_retries(make_world: MakeWorld) -> None:
    """An agent that crashes on every attempt: failed, blocked, the retry command, one notice."""
    world = make_world(Tuning(max_attempts=2))
    number = world.label("web", "Crash please", "crash")
    world.start()
    run = _ending_of(world, number)
    assert (run.state, run.failures) == ("failed", 2), world.describe(world.runs())
    told = told_once(world, number, run)
    assert WORKING not in told.labels and BLOCKED in told.labels
    assert "failed for good (2 attempts)" in told.comment
    assert f"pipeline runs retry {run.id}" in told.comment and "frozen" not in told.comment
    assert f"run {run.id} failed" in told.notice


def test_timed_out(make_world: MakeWorld) -> None:
    """A run over its time limit ends failed with error class timeout, never as cancelled."""
    world = make_world(Tuning(run_timeout_s=4, max_attempts=1))
    number = world.label("web", "Take forever", "sleep")
    world.start()
    run = _ending_of(world, number)
    assert (run.state, run.error_class) == ("failed", "timeout"), world.describe(world.runs())
    told = told_once(world, number, run)
    assert WORKING not in told.labels
    assert "timed out" in told.comment and "time limit of 4 s" in told.comment
    assert f"pipeline runs retry {run.id}" in told.comment
    assert f"run {run.id} timed out (timeout)" in told.notice


def test_blocked(make_world: MakeWorld) -> None:
    """A blocked agent escalates: the agent's words, the kept worktree, the retry command."""
    world = make_world()
    number = world.label("web", "Do the impossible", "impossible")
    world.start()
    run = _ending_of(world, number)
    assert (run.state, run.error_class) == ("escalated", "blocked")
    told = told_once(world, number, run)
    assert BLOCKED in told.labels and WORKING not in told.labels
    assert "unknown afk-task" in told.comment and "worktree:" in told.comment
    assert f"pipeline runs retry {run.id}" in told.comment and "unfreeze" not in told.comment
    assert "The agent asks:\n> unknown afk-task" in told.comment  # quoted, with how to answer
    assert "reply in this issue, then add the `ready-for-agent` label again" in told.comment
    assert f"run {run.id} escalated (blocked)" in told.notice


def test_tests_never_green(make_world: MakeWorld) -> None:
    """Tests still red after the fix attempts: escalated tests_red, nothing pushed."""
    world = make_world()
    number = world.label("web", "Reword the greeting", "red")
    world.start()
    run = _ending_of(world, number)
    assert (run.state, run.error_class) == ("escalated", "tests_red")
    assert world.commits_of_run("web", run.id) == []
    told = told_once(world, number, run)
    assert BLOCKED in told.labels and "still red" in told.comment
    assert "The agent stopped with:\n> the tests are still red" in told.comment
    assert f"pipeline runs retry {run.id}" in told.comment


def test_a_file_over_the_size_limit_is_not_pushed(make_world: MakeWorld) -> None:
    """An agent that commits a 51 MiB file: escalated file_too_large naming it, nothing pushed."""
    world = make_world()
    before = world.remote_log("web")
    number = world.label("web", "Ship the dataset", "big-file dataset")
    world.start()
    run = _ending_of(world, number)
    assert (run.state, run.error_class) == ("escalated", "file_too_large")
    assert world.remote_log("web") == before and world.commits_of_run("web", run.id) == []
    told = told_once(world, number, run)
    assert BLOCKED in told.labels and WORKING not in told.labels
    assert "assets/dataset.bin (51.0 MiB), over repos.web.max_file_bytes (50.0 MiB)" in (
        told.comment
    )
    assert f"pipeline runs retry {run.id}" in told.comment


def test_deploy_broken_and_frozen(make_world: MakeWorld) -> None:
    """A broken deploy its fix-forward cannot heal freezes the repo; the unfreeze is named."""
    world = make_world(fix_mode="fail", max_fix_forwards=1)
    number = world.label("web", "Ask the backend", "break")
    world.start()
    run = _ending_of(world, number)
    assert run.kind == "fix_forward" and (run.state, run.error_class) == ("escalated", "frozen")
    told = told_once(world, number, run)
    assert BLOCKED in told.labels and WORKING not in told.labels
    assert "pipeline repos unfreeze web" in told.comment and "runs retry" not in told.comment
    assert f"run {run.id} frozen" in told.notice


def _cancelled_while_implementing(world: ShipWorld, title: str, task: str) -> int:
    """Label an issue, start the daemon, cancel its run from the CLI once it implements."""
    number = world.label("web", title, task)
    world.start()
    busy = world.wait(
        "the run is implementing", lambda rs: any(r.state == "implementing" for r in rs)
    )
    world.cli("runs", "cancel", str(busy[0].id))
    return number


def test_cancelled(make_world: MakeWorld) -> None:
    """A person cancels a busy run: unlabelled (not blocked), the retry named, one notice."""
    world = make_world()
    number = _cancelled_while_implementing(world, "Take forever", "sleep")
    run = _ending_of(world, number)
    assert run.state == "cancelled", world.describe(world.runs())
    told = told_once(world, number, run)
    assert WORKING not in told.labels and BLOCKED not in told.labels
    assert "cancelled" in told.comment and f"pipeline runs retry {run.id}" in told.comment
    assert f"run {run.id} cancelled" in told.notice


def test_a_cancel_beats_an_ending_it_raced(make_world: MakeWorld) -> None:
    """Cancelled while the agent was stopping blocked, before any heartbeat saw the cancel:
    the run ends cancelled, the issue unlabelled and not blocked, no question asked."""
    world = make_world()
    number = _cancelled_while_implementing(world, "Choose a design", "block-when-released")
    (world.agent_log.parent / "release").write_text("go\n")
    run = _ending_of(world, number)
    assert run.state == "cancelled", world.describe(world.runs())
    told = told_once(world, number, run)
    assert WORKING not in told.labels and BLOCKED not in told.labels
    assert "cancelled" in told.comment and "which of the two designs" not in told.comment
    assert f"run {run.id} cancelled" in told.notice
