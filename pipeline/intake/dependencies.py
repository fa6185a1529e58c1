"""Issues that wait for others: ``Depends on #12`` / ``Blocked by #12`` in an issue's text.

An issue whose dependencies are not all closed is not queued; intake records
why it waits and looks again on every poll. A dependency counts as done once
it is closed, by a successful run (which closes its issue) or by a human.

Issue text is untrusted, so reading it is bounded: hidden content is stripped
first (a reference nobody sees cannot hold an issue back), at most
``MAX_REFS`` references per issue, only ``#N`` in the same repository
(``owner/name#N`` is reported as unsupported), and the walk that looks for a
cycle fetches at most ``MAX_WALK`` issues per check. A cycle, a missing issue
or an unsupported reference is a ``Problem``: the issue waits and is told once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.core.errors import FatalError
from pipeline.intake.sanitize import inert_quote, strip_hidden
from pipeline.trackers.base import Tracker, TrackerIssue

MAX_REFS = 5
MAX_WALK = 10
MAX_NUMBER = 10**9
DONE_STATES = ("closed",)

_PHRASE = re.compile(r"\b(?:depends[ \t]+on|blocked[ \t]+by)\b[ \t]*:?", re.IGNORECASE)
_REF = re.compile(
    r"[ \t]*(?:,|&|\band\b)?[ \t]*([A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100})?#(\d{1,12})\b"
)
_LINE_CHARS = 400


@dataclass(frozen=True)
class Refs:
    """The issue numbers an issue's text depends on, and what could not be read."""

    numbers: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Problem:
    """Something to tell the issue once: ``key`` makes the comment idempotent."""

    key: str
    text: str
    issues: tuple[int, ...]  # every issue to tell (each member of a cycle)


@dataclass(frozen=True)
class Verdict:
    """May the issue start? If not, ``reason`` says why (for the dashboard and the CLI)."""

    ready: bool
    reason: str | None = None
    problem: Problem | None = None


READY = Verdict(ready=True)


def parse_refs(text: str) -> Refs:
    """The ``#N`` after each ``Depends on`` / ``Blocked by`` in ``text``, bounded."""
    visible = strip_hidden(text).text
    numbers: list[int] = []
    problems: list[str] = []
    for phrase in _PHRASE.finditer(visible):
        line = visible[phrase.end() : phrase.end() + _LINE_CHARS].split("\n", 1)[0]
        position = 0
        while (ref := _REF.match(line, position)) is not None:
            position = ref.end()
            number = int(ref.group(2))
            if ref.group(1):
                problems.append(  # quoted on the issue: a back-link there, unless inert
                    f"{inert_quote(f'{ref.group(1)}#{number}')}: dependencies on other "
                    "repositories are not supported"
                )
            elif not 0 < number < MAX_NUMBER:
                problems.append(f"#{number}: not an issue number")
            elif number not in numbers:
                numbers.append(number)
    if len(numbers) > MAX_REFS:
        problems.append(f"{len(numbers)} dependencies: at most {MAX_REFS} are read")
        numbers = numbers[:MAX_REFS]
    return Refs(tuple(numbers), tuple(problems[:MAX_REFS]))


def vouched_refs(labelled_body: str | None) -> tuple[int, ...]:
    """The dependencies of the description as the trusted label saw it (intake's snapshot).

    They hold after an edit by anyone: the forge does not always say who edited, and an
    untrusted editor must not start an issue early by deleting its ``Depends on`` line.
    Its unreadable references are not problems: only the text as it is now is told.
    """
    return parse_refs(labelled_body).numbers if labelled_body else ()


class DependencyCheck:
    """Decides whether issues of one repo may start; issues fetched once per check."""

    def __init__(self, tracker: Tracker, slug: str, *, max_walk: int = MAX_WALK) -> None:
        self.tracker = tracker
        self.slug = slug
        self.max_walk = max_walk
        self._seen: dict[int, TrackerIssue | None] = {}  # None: does not exist
        self._fetches = 0

    def verdict(self, number: int, body: str, vouched: tuple[int, ...] = ()) -> Verdict:
        """Ready when every dependency is closed; else why not (and any problem to report).

        ``vouched``: the dependencies of the description as labelled (``vouched_refs``),
        which hold whatever the description says now.
        """
        refs = parse_refs(body)
        if refs.problems:
            text = "; ".join(refs.problems)
            return Verdict(
                False, f"unreadable dependencies: {text}", _problem("refs", text, number)
            )
        numbers = tuple(dict.fromkeys((*refs.numbers, *vouched)))
        if number in numbers:
            return self._cycle([number, number])
        open_deps: list[int] = []
        for dep in numbers:
            found = self._fetch(dep)
            if found is None:
                text = f"#{dep} does not exist"
                return Verdict(False, f"waits for {text}", _problem(f"missing-{dep}", text, number))
            if found.state not in DONE_STATES:
                open_deps.append(dep)
        if not open_deps:
            return READY
        cycle = self._find_cycle(number, open_deps)
        if cycle is not None:
            return self._cycle(cycle)
        return Verdict(False, "waits for " + ", ".join(f"#{dep} (open)" for dep in open_deps))

    def _cycle(self, path: list[int]) -> Verdict:
        shown = " → ".join(f"#{n}" for n in path)
        members = tuple(sorted(set(path)))
        key = "cycle-" + "-".join(str(n) for n in members)
        text = f"dependency cycle {shown}: none of these can start until it is broken"
        return Verdict(False, text, Problem(key, text, members))

    def _find_cycle(self, start: int, first: list[int]) -> list[int] | None:
        """A path of open issues from ``start`` back to it, within ``max_walk`` fetches."""
        stack: list[tuple[int, list[int]]] = [(dep, [start, dep]) for dep in reversed(first)]
        visited: set[int] = set()
        while stack:
            number, path = stack.pop()
            if number == start:
                return path
            if number in visited:
                continue
            visited.add(number)
            issue = self._fetch(number)
            if issue is None or issue.state in DONE_STATES:
                continue
            for dep in reversed(parse_refs(issue.body).numbers):
                if dep == start or (dep not in visited and self._budget_left(dep)):
                    stack.append((dep, [*path, dep]))
        return None

    def _budget_left(self, number: int) -> bool:
        return number in self._seen or self._fetches < self.max_walk

    def _fetch(self, number: int) -> TrackerIssue | None:
        if number not in self._seen:
            self._fetches += 1
            try:
                self._seen[number] = self.tracker.issue(self.slug, number)
            except FatalError as exc:
                if exc.kind != "missing_issue":
                    raise
                self._seen[number] = None
        return self._seen[number]


def _problem(key: str, text: str, number: int) -> Problem:
    return Problem(key, text, (number,))


Report = Callable[[int, str, str], object]


def report_problem(problem: Problem, post: Report) -> None:
    """Tell each issue concerned, once: ``post(number, key, body)`` is idempotent on ``key``."""
    body = (
        f"This issue is not started: {problem.text}. Edit the `Depends on` / `Blocked by` "
        "lines (or close the issues concerned) and it is looked at again on the next poll."
    )
    for number in problem.issues:
        post(number, f"deps:{problem.key}", body)
