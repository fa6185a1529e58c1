"""The campaign's oracle counts per issue what a user sees: one ship, one closing comment."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import update

from pipeline.store import EnqueueOptions
from pipeline.store.models import LocalIssueRow

from .campaign import COLUMNS, row
from .conftest import ENGINES, require_engine
from .figures import Figures
from .killmatrix import FINISH_TIMEOUT_S, check_outcome
from .oracle import IssueView, judge
from .world import World, WorldSpec, fresh_database, stop


def _run(run_id: int, number: int, state: str = "succeeded") -> SimpleNamespace:
    return SimpleNamespace(
        id=run_id,
        kind="issue",
        repo_name="r0",
        issue_number=number,
        state=state,
        terminal=state in ("succeeded", "failed", "cancelled"),
        error_class=None,
        error=None,
    )


def _closing(run_id: int) -> str:
    return f"Done (run {run_id}).\n\n<!-- afk-pipeline:run={run_id}:resolved -->"


def _cell(figures: Figures, column: str) -> str:
    cells = [c.strip() for c in row(figures).strip("|").split(" | ")]
    return cells[COLUMNS.index(column)]


def test_second_run_of_an_issue_that_pushes_is_a_double_push() -> None:
    """Two runs of one issue with a commit each: one double push, though each run pushed once."""
    issue = IssueView("r0", 1, closed=True, comments=(_closing(1),))
    figures = Figures(scenario="synthetic")
    judge(figures, [issue], [_run(1, 1), _run(2, 1)], {1: 1, 2: 1})
    assert len(figures.double_pushes) == 1, figures.double_pushes
    assert figures.duplicate_comments == [] and figures.lost_issues == []


def test_duplicate_comments_have_their_own_column() -> None:
    """A comment posted twice and a second closing comment count there, not as double pushes."""
    claimed = "working <!-- afk-pipeline:run=1:claimed -->"
    comments = (claimed, claimed, _closing(1), _closing(2))
    figures = Figures(scenario="synthetic")
    judge(figures, [IssueView("r0", 1, True, comments)], [_run(1, 1), _run(2, 1, "failed")], {1: 1})
    assert figures.double_pushes == []
    assert len(figures.duplicate_comments) == 2, figures.duplicate_comments
    assert _cell(figures, "Duplicate comments") == "2" and _cell(figures, "Double pushes") == "0"


def test_shipped_issue_without_closing_comment_or_commit_is_lost() -> None:
    """A succeeded run with nothing on the remote, an issue closed without a word: both reported."""
    figures = Figures(scenario="synthetic")
    judge(figures, [IssueView("r0", 1, closed=True, comments=())], [_run(1, 1)], {})
    assert len(figures.lost_issues) == 2, figures.lost_issues


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_injected_double_ship_is_reported_as_one_double_push(tmp_path: Path, engine: str) -> None:
    """A second run of a shipped issue pushes again: the campaign row reports 1 double push."""
    require_engine(engine)
    with fresh_database(engine, tmp_path) as url:
        world = World(tmp_path, url, WorldSpec())
        try:
            before, after = _double_ship(world)
        finally:
            world.close()
    assert before.problems == [], before.problems
    assert _cell(before, "Double pushes") == "0"
    assert _cell(after, "Double pushes") == "1", after.double_pushes
    assert _cell(after, "Duplicate comments") == "1", after.duplicate_comments  # closed twice


def _double_ship(world: World) -> tuple[Figures, Figures]:
    """The oracle's figures after one run of an issue, and after a second run of it ships."""
    world.migrate()
    world.file_issue("r0", "ship me once", "add a file")
    daemon = world.daemon("daemon")
    try:
        world.wait(lambda: _succeeded(world, 1), FINISH_TIMEOUT_S, "first run succeeds")
        before = Figures(scenario="one run", engine="-")
        check_outcome(world, before, expect_success=True)
        (first,) = world.runs()
        # The injection: the shipped (closed) issue open again and a second run of it, as a
        # double-dispatch bug would start one (a closed issue's run is cancelled unstarted).
        with world.store._write() as conn:
            conn.execute(
                update(LocalIssueRow)
                .where(LocalIssueRow.id == first.issue_number)
                .values(state="open")
            )
        world.store.enqueue("r0", EnqueueOptions(issue_id=first.issue_id))
        world.wait(lambda: _succeeded(world, 2), FINISH_TIMEOUT_S, "second run succeeds")
    finally:
        stop(daemon)
    after = Figures(scenario="a second run of the issue pushes", engine="-")
    check_outcome(world, after, expect_success=True)
    return before, after


def _succeeded(world: World, count: int) -> bool:
    runs = world.runs()
    return len(runs) == count and all(r.state == "succeeded" for r in runs)
