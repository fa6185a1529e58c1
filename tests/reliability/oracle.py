"""The campaign's oracle: what a user of the tracker and the remote sees, judged per issue.

A user cares that each labelled issue was shipped once and told once: exactly
one commit on the remote for the issue (whatever run pushed it: a second run
of the same issue that pushes again is a double push), exactly one closing
comment, and no comment posted twice. The pushes are read from the bare
remotes (every commit carrying an ``Afk-Run`` trailer, mapped to its issue
through the run it names), the comments from the tracker, never from the
daemon's own record of what it did.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.testing.gitrepos import git

from .figures import Figures

TRAILER = re.compile(r"^Afk-Run: (\d+)\s*$", re.MULTILINE)
MARKER = re.compile(r"<!-- afk-pipeline:(\S+) -->")
CLOSING = re.compile(r"^run=\d+:resolved$")


@dataclass(frozen=True)
class IssueView:
    """One issue as its tracker shows it to a user."""

    repo: str
    number: int
    closed: bool
    comments: tuple[str, ...]
    must_ship: bool = True  # labelled by a trusted actor, expected to end shipped and closed

    @property
    def key(self) -> str:
        return f"{self.repo}#{self.number}"


def commits_by_run(remotes: Iterable[str]) -> dict[int, int]:
    """How many commits on the bare remotes (all refs) carry ``Afk-Run: <id>``, per run id."""
    counts: Counter[int] = Counter()
    for url in remotes:
        bodies = git(Path(url), "log", "--all", "--format=%B%x00")
        for body in bodies.split("\x00"):
            counts.update(int(m.group(1)) for m in TRAILER.finditer(body))
    return dict(counts)


def judge(
    figures: Figures, issues: Sequence[IssueView], runs: Sequence[Any], commits: Mapping[int, int]
) -> None:
    """Record every issue not shipped exactly once, closed and told exactly once."""
    by_issue: dict[tuple[str, int], list[Any]] = {}
    for run in runs:
        if run.kind == "issue" and run.issue_number is not None:
            by_issue.setdefault((run.repo_name, run.issue_number), []).append(run)
    known = {run.id for run in runs}
    for run_id in sorted(set(commits) - known):
        figures.double_pushes.append(f"{commits[run_id]} commit(s) of run {run_id}, no such run")
    for issue in issues:
        mine = sorted(by_issue.get((issue.repo, issue.number), []), key=lambda r: r.id)
        _judge_pushes(figures, issue, mine, commits)
        _judge_comments(figures, issue)
        if issue.must_ship:
            _judge_shipped(figures, issue, mine, commits)
        elif mine and not mine[-1].terminal:
            figures.lost_issues.append(
                f"issue {issue.key}: run {mine[-1].id} left {mine[-1].state}"
            )


def _judge_pushes(
    figures: Figures, issue: IssueView, runs: list[Any], commits: Mapping[int, int]
) -> None:
    pushed = {run.id: commits[run.id] for run in runs if commits.get(run.id)}
    total = sum(pushed.values())
    if total > 1:
        detail = ", ".join(f"run {run_id}: {n}" for run_id, n in sorted(pushed.items()))
        figures.double_pushes.append(f"issue {issue.key} shipped {total} commits ({detail})")


def _judge_comments(figures: Figures, issue: IssueView) -> None:
    keys = Counter(key for body in issue.comments for key in MARKER.findall(body))
    closing = sum(n for key, n in keys.items() if CLOSING.match(key))
    if closing > 1:
        figures.duplicate_comments.append(f"issue {issue.key}: {closing} closing comments")
    for key, count in sorted(keys.items()):
        if count > 1:
            figures.duplicate_comments.append(f"issue {issue.key}: comment {key} {count} times")


def _judge_shipped(
    figures: Figures, issue: IssueView, runs: list[Any], commits: Mapping[int, int]
) -> None:
    if not runs:
        figures.lost_issues.append(f"issue {issue.key}: no run")
        return
    last = runs[-1]
    if not last.terminal:
        figures.lost_issues.append(f"issue {issue.key}: run {last.id} left {last.state}")
    elif last.state != "succeeded":
        figures.lost_issues.append(
            f"issue {issue.key}: run {last.id} ended {last.state} ({last.error_class}: "
            f"{last.error})"
        )
    elif not any(commits.get(run.id) for run in runs):
        figures.lost_issues.append(f"issue {issue.key}: run {last.id} succeeded, nothing shipped")
    if last.state == "succeeded" and not issue.closed:
        figures.lost_issues.append(f"issue {issue.key}: shipped, still open")
    closing = sum(bool(CLOSING.match(k)) for b in issue.comments for k in MARKER.findall(b))
    if last.state == "succeeded" and closing == 0:
        figures.lost_issues.append(f"issue {issue.key}: closed without a closing comment")
