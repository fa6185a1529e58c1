"""Dependencies between issues: what an issue's text says, and whether it may start."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.core.errors import FatalError
from pipeline.intake.dependencies import MAX_REFS, DependencyCheck, parse_refs
from pipeline.trackers.base import IssueDetail


@dataclass
class Issues:
    """The one tracker call a DependencyCheck makes, over a dict of issues."""

    bodies: dict[int, tuple[str, str]]  # number -> (state, body)
    fetched: list[int] = field(default_factory=list)

    def issue(self, slug: str, number: int) -> IssueDetail:
        self.fetched.append(number)
        if number not in self.bodies:
            raise FatalError("missing_issue", f"{slug}#{number} does not exist")
        state, body = self.bodies[number]
        return IssueDetail(number, f"issue {number}", body, "alice", "", (), state, "", "")


def check(issues: Issues) -> DependencyCheck:
    return DependencyCheck(issues, "acme/app")  # type: ignore[arg-type]


def test_both_phrasings_and_lists_are_read() -> None:
    """`Depends on #1, #2 and #3` and `Blocked by: #4` each name their issues, once."""
    refs = parse_refs("Depends on #1, #2 and #3\n\nblocked by: #4 #1\nsee #9")
    assert refs.numbers == (1, 2, 3, 4) and refs.problems == ()


def test_hidden_and_cross_repo_references_do_not_count() -> None:
    """A reference in an HTML comment is ignored; another repository's is a problem."""
    assert parse_refs("<!-- Depends on #7 -->").numbers == ()
    refs = parse_refs("Depends on evil/repo#3")
    assert refs.numbers == () and "other repositories are not supported" in refs.problems[0]


def test_references_are_bounded() -> None:
    """A body naming hundreds of issues is read up to MAX_REFS, and that is a problem."""
    refs = parse_refs("Depends on " + ", ".join(f"#{n}" for n in range(1, 500)))
    assert len(refs.numbers) == MAX_REFS and "at most" in refs.problems[0]
    huge = parse_refs("Depends on #" + "9" * 40 + "\n" + "blocked by " * 20_000)
    assert huge.numbers == ()


def test_open_dependency_waits_and_closed_one_does_not() -> None:
    """An issue waits for its open dependency and starts once it is closed."""
    issues = Issues({1: ("open", ""), 2: ("open", "Depends on #1")})
    verdict = check(issues).verdict(2, "Depends on #1")
    assert not verdict.ready and verdict.reason == "waits for #1 (open)" and verdict.problem is None
    issues.bodies[1] = ("closed", "")
    assert check(issues).verdict(2, "Depends on #1").ready


def test_missing_dependency_is_a_problem() -> None:
    """A dependency that does not exist holds the issue and is reported on it."""
    verdict = check(Issues({})).verdict(2, "Blocked by #99")
    assert not verdict.ready and verdict.problem is not None
    assert verdict.problem.issues == (2,) and "#99 does not exist" in verdict.problem.text


def test_cycle_is_found_and_names_every_member() -> None:
    """#1 → #2 → #3 → #1 is a cycle reported to all three, with one key."""
    issues = Issues(
        {1: ("open", "Depends on #2"), 2: ("open", "Depends on #3"), 3: ("open", "Depends on #1")}
    )
    verdict = check(issues).verdict(1, "Depends on #2")
    assert not verdict.ready and verdict.problem is not None
    assert verdict.problem.issues == (1, 2, 3) and verdict.problem.key == "cycle-1-2-3"
    assert "#1 → #2 → #3 → #1" in verdict.problem.text
    again = check(issues).verdict(3, "Depends on #1").problem
    assert again is not None and again.key == verdict.problem.key


def test_self_dependency_is_a_cycle() -> None:
    """An issue that depends on itself is a cycle of one."""
    verdict = check(Issues({})).verdict(4, "Depends on #4")
    assert verdict.problem is not None and verdict.problem.issues == (4,)


def test_walk_is_bounded_by_fetches() -> None:
    """A long chain of open issues costs at most max_walk fetches per check, and just waits."""
    chain = {n: ("open", f"Depends on #{n + 1}") for n in range(1, 1000)}
    issues = Issues(chain)
    verdict = DependencyCheck(issues, "acme/app", max_walk=10).verdict(0, "Depends on #1")  # type: ignore[arg-type]
    assert not verdict.ready and verdict.problem is None and len(issues.fetched) <= 10


def test_fetches_are_shared_within_one_check() -> None:
    """Two issues depending on the same one fetch it once per check."""
    issues = Issues({1: ("open", "")})
    deps = check(issues)
    deps.verdict(2, "Depends on #1")
    deps.verdict(3, "Depends on #1")
    assert issues.fetched == [1]
