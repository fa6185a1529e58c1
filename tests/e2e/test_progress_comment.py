"""The run's one progress comment, end to end: the real daemon against fake GitHub.

A run from claim to a healthy deploy keeps one comment on its issue, edited
as it goes (every state shown, in order), paced to one edit per 5 seconds,
ending with the pushed SHA and the deploy verdict; a daemon killed mid-run
still leaves one progress comment after the restart.
"""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path

import pytest

from pipeline.run.progress import EDIT_INTERVAL_S, progress_marker
from pipeline.store import Run
from pipeline.testing.forges.model import FakeComment

from .world import ShipWorld, Tuning, ship_world

pytestmark = pytest.mark.deploy_e2e

PUBLIC_URL = "https://afk.example.test"


def _run(world: ShipWorld, number: int) -> Run | None:
    return next((r for r in world.runs() if r.issue_number == number and r.kind == "issue"), None)


def _succeeded(world: ShipWorld, number: int) -> Run:
    def done(_runs: list[Run]) -> bool:
        run = _run(world, number)
        return run is not None and run.terminal

    world.wait("the run ends", done, 180)
    run = _run(world, number)
    assert run is not None and run.state == "succeeded", world.describe(world.runs())
    return run


def _progress_comments(world: ShipWorld, number: int, run_id: int) -> list[FakeComment]:
    issue = world.fake.issue(world.repos["web"].slug, number)
    return [c for c in issue.comments if progress_marker(run_id) in c.body]


def _final_comments(world: ShipWorld, number: int, run: Run) -> list[FakeComment]:
    """The run's progress comments once one shows its final state (written just after it ends)."""
    deadline = time.monotonic() + 60
    while True:
        comments = _progress_comments(world, number, run.id)
        if any(_state_of(c.body) == run.state for c in comments):
            return comments
        assert time.monotonic() < deadline, [c.body for c in comments]
        time.sleep(0.2)


def _state_of(body: str) -> str:
    """The state in a progress comment's first line (``**afk-pipeline run 3: testing**``)."""
    return body.splitlines()[0].rsplit(": ", 1)[1].rstrip("*")


@pytest.fixture
def tuning(history_url: str | None) -> Tuning:
    """The world's knobs: the history on SQLite or a fresh PostgreSQL, and a public URL."""
    return Tuning(database_url=history_url, public_url=PUBLIC_URL)


def _assert_final(world: ShipWorld, run: Run, comment: FakeComment) -> None:
    assert run.pushed_sha and f"- Pushed: `{run.pushed_sha}`" in comment.body, comment.body
    assert _state_of(comment.body) == "succeeded"
    assert "- Deploy: healthy after 2 measurement(s)" in comment.body, comment.body
    assert "- CI: green" in comment.body, comment.body
    assert "- Tests: green (" in comment.body, comment.body
    assert f"- Run page: {PUBLIC_URL}/runs/{run.id}\n" in comment.body, comment.body


def test_one_progress_comment_from_claim_to_healthy_deploy(
    tmp_path: Path, cli_env: dict[str, str], tuning: Tuning
) -> None:
    """One comment, edited through every state, paced, ending with the SHA and deploy verdict."""
    with ship_world(tmp_path, cli_env, tuning=tuning) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        world.start()
        run = _succeeded(world, number)
        (comment,) = _final_comments(world, number, run)
        _assert_final(world, run, comment)
        # Every state the run went through was shown, in order.
        shown = [_state_of(body) for body in [*comment.edits, comment.body]]
        passed = [
            str(e.data["state"])
            for e in world.store.run_events(run.id)
            if e.kind == "state" and e.data.get("state") not in ("queued", "retry_wait")
        ]
        assert "watching" in passed and passed[-1] == "succeeded", passed
        position = 0
        for state in passed:
            assert state in shown[position:], (state, shown, passed)
            position = shown.index(state, position)
        # The forge saw at most one edit per 5 seconds, measured where it received them.
        path = f"/repos/{world.repos['web'].slug}/issues/comments/{comment.id}"
        edits = [r.at for r in world.fake.requests if r.method == "PATCH" and r.path == path]
        assert len(edits) == len(comment.edits) >= len(set(passed)) - 1
        gaps = [b - a for a, b in itertools.pairwise(edits)]
        assert all(gap >= EDIT_INTERVAL_S for gap in gaps), gaps
        stored = world.store.get_run(run.id)
        assert stored is not None and stored.progress_comment_id == str(comment.id)


def test_kill_mid_run_still_leaves_one_progress_comment(
    tmp_path: Path, cli_env: dict[str, str], tuning: Tuning
) -> None:
    """A daemon killed with SIGKILL mid-run edits the same progress comment after the restart."""
    with ship_world(tmp_path, cli_env, tuning=tuning) as world:
        number = world.label("web", "Add a reports helper", "feature reports")
        killed = world.start(faults="after_push")
        assert killed.wait(timeout=120) == -signal.SIGKILL, world.describe(world.runs())
        before = _run(world, number)
        assert before is not None and len(_progress_comments(world, number, before.id)) == 1
        world.start()
        run = _succeeded(world, number)
        (comment,) = _final_comments(world, number, run)
        _assert_final(world, run, comment)
