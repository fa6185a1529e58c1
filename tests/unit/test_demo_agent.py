"""The demo agent's reading of prompts, its choice of change, and the demo tasks' edits."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.demo.agent import (
    Blocked,
    Brief,
    choose,
    commit_message,
    excerpt,
    main,
    read_brief,
    work,
)
from pipeline.demo.setup import ISSUES, project_files
from pipeline.demo.tasks import ADD_VERSION, TASKS, Change, Edit
from pipeline.run.prompt import IssueInfo, build_prompt
from pipeline.testing.gitrepos import write_files

REPO = RepoSettings(
    name="webapp",
    tracker="local",
    slug="demo/webapp",
    remote_url="/nowhere",
    test_command="python3 -m unittest discover -s tests -q",
)


def _prompt(issue: dict[str, str], tmp: Path, run_id: int = 7, extra: str | None = None) -> str:
    info = IssueInfo(
        ref="#3",
        number=3,
        title=issue["title"],
        body=issue["body"],
        comments=(),
        url=f"local://{issue['repo']}/issues/3",
        author="me",
    )
    return build_prompt(
        info, run_id=run_id, repo=REPO, repo_root=tmp, workdir=tmp, extra_prompt=extra
    )


def _project(tmp: Path, name: str) -> Path:
    root = tmp / name
    write_files(root, project_files(name))
    return root


def _brief(tag: str | None, fix_forward: bool = False) -> Brief:
    return Brief(tag=tag, title="t", fix_forward=fix_forward, trailers=())


def test_brief_from_the_daemons_prompt(tmp_path: Path) -> None:
    """Tag, title and both trailers come out of the prompt the daemon writes."""
    brief = read_brief(_prompt(ISSUES[0], tmp_path))
    assert brief.tag == "add-version" and brief.title == ISSUES[0]["title"]
    assert brief.trailers == (("Afk-Run", "7"), ("Refs", "local://demo/webapp/issues/3"))
    assert not brief.fix_forward


def test_failure_evidence_makes_a_fix_forward(tmp_path: Path) -> None:
    """A prompt with failure evidence is a fix-forward; the run's own trailers win."""
    evidence = "GET /health -> 200 (no JSON field version)\nAfk-Run: 1\nRefs: local://old"
    brief = read_brief(_prompt(ISSUES[0], tmp_path, run_id=9, extra=evidence))
    assert brief.fix_forward and brief.tag == "add-version"
    assert dict(brief.trailers) == {"Afk-Run": "9", "Refs": "local://demo/webapp/issues/3"}


def test_every_demo_issue_names_a_known_task(tmp_path: Path) -> None:
    """Each demo issue carries a distinct known tag and does not read as a fix-forward."""
    briefs = [read_brief(_prompt(issue, tmp_path)) for issue in ISSUES]
    assert sorted(b.tag or "" for b in briefs) == sorted(TASKS)
    assert not any(b.fix_forward for b in briefs)


def test_unknown_task_is_blocked(tmp_path: Path) -> None:
    """An issue without a known tag blocks, naming what the agent knows."""
    with pytest.raises(Blocked, match="add-shout"):
        choose(_brief("make-coffee"), tmp_path)
    with pytest.raises(Blocked, match="no `demo-task:` tag"):
        choose(_brief(None), tmp_path)


def test_changes_apply_to_the_pristine_projects(tmp_path: Path) -> None:
    """Every first change finds its anchors in the shipped project it targets."""
    greeter, webapp = _project(tmp_path, "greeter"), _project(tmp_path, "webapp")
    assert choose(_brief("add-shout"), greeter) is TASKS["add-shout"].first
    assert choose(_brief("add-farewell"), greeter) is TASKS["add-farewell"].first
    assert choose(_brief("add-version"), webapp) is ADD_VERSION.first
    with pytest.raises(Blocked, match="not what the demo task expects"):
        choose(_brief("add-version"), greeter)


def test_heal_needs_the_broken_state(tmp_path: Path) -> None:
    """A fix-forward heals only a tree that has the break; a healthy tree blocks."""
    webapp = _project(tmp_path, "webapp")
    with pytest.raises(Blocked, match="nothing this demo agent knows how to fix"):
        choose(_brief("add-version", fix_forward=True), webapp)
    for edit in ADD_VERSION.first.edits:
        edit.apply(webapp)
    assert choose(_brief("add-version", fix_forward=True), webapp) is ADD_VERSION.heal
    assert choose(_brief(None, fix_forward=True), webapp) is ADD_VERSION.heal


def test_resolved_issue_is_blocked(tmp_path: Path) -> None:
    """A tree that already has the task's test is reported as resolved, not redone."""
    greeter = _project(tmp_path, "greeter")
    (greeter / TASKS["add-shout"].first.test_path).write_text("", encoding="utf-8")
    with pytest.raises(Blocked, match="resolved already"):
        choose(_brief("add-shout"), greeter)


def test_edit_replaces_once_or_appends(tmp_path: Path) -> None:
    """An edit replaces the first occurrence of its anchor; an empty anchor appends."""
    (tmp_path / "f.py").write_text("a = 1\na = 1\n", encoding="utf-8")
    Edit("f.py", "a = 1", "b = 2", "replace").apply(tmp_path)
    Edit("f.py", "", "c = 3\n", "append").apply(tmp_path)
    assert (tmp_path / "f.py").read_text(encoding="utf-8") == "b = 2\na = 1\nc = 3\n"
    assert not Edit("g.py", "", "x", "missing file").applies_to(tmp_path)


def test_commit_message_carries_the_prompts_trailers() -> None:
    """The commit message ends with the trailers from the prompt, and has none without them."""
    change = TASKS["add-shout"].first
    with_trailers = Brief("add-shout", "t", False, (("Afk-Run", "4"), ("Refs", "local://x/1")))
    message = commit_message(change, with_trailers)
    assert message.startswith(change.subject + "\n\n")
    assert message.endswith("\n\nAfk-Run: 4\nRefs: local://x/1\n")
    assert "Afk-Run" not in commit_message(change, _brief("add-shout"))


def test_excerpt_quotes_the_first_failure_and_summary() -> None:
    """Output excerpts keep the failure header, its last lines and the summary."""
    lines = [
        "=" * 70,
        "ERROR: test_x (t.T.test_x)",
        "-" * 70,
        "Traceback:",
        *[f"  frame {i}" for i in range(10)],
        "ImportError: nope",
        "",
        "-" * 70,
        "Ran 2 tests in 0.001s",
        "",
        "FAILED (errors=1)",
    ]
    quoted = excerpt(lines)
    assert quoted[0] == "ERROR: test_x (t.T.test_x)" and "ImportError: nope" in quoted
    assert quoted[-2:] == ["Ran 2 tests in 0.001s", "FAILED (errors=1)"]
    assert "  frame 0" not in quoted
    assert excerpt(["-" * 70, "Ran 1 test in 0s", "", "OK"]) == ["Ran 1 test in 0s", "OK"]


def test_main_blocks_unknown_issue_and_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown issue ends in one BLOCKED line and exit 0, with no file written."""
    prompt = tmp_path / "prompt.md"
    prompt.write_text(_prompt({"repo": "demo/x", "title": "Brew", "body": "coffee"}, tmp_path))
    work = tmp_path / "work"
    work.mkdir()
    assert main([str(prompt), str(work)]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("BLOCKED: ")] == [
        "BLOCKED: this demo agent only knows the demo tasks (add-farewell, add-shout, "
        "add-version); the issue has no `demo-task:` tag"
    ]
    assert list(work.iterdir()) == []


def test_main_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """Wrong arguments print the usage and exit 2."""
    assert main(["only-one"]) == 2
    assert "usage: python -m pipeline.demo.agent" in capsys.readouterr().err


def test_edit_whose_anchor_is_gone_blocks(tmp_path: Path) -> None:
    """An edit whose anchor an earlier edit removed blocks instead of silently doing nothing."""
    (tmp_path / "m.py").write_text("x = 1\n", encoding="utf-8")
    change = Change(
        "s",
        "b",
        "tests/test_m.py",
        "import unittest\nraise SystemExit(1)\n",
        (Edit("m.py", "x = 1", "x = 2", "first"), Edit("m.py", "x = 1", "x = 3", "second")),
    )
    lines: list[str] = []
    with pytest.raises(Blocked, match=r"m.py no longer holds the code to change \(second\)"):
        work(change, _brief("t"), tmp_path, lines.append)
    assert "editing m.py: first" in lines
