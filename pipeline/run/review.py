"""The optional review gate: a second agent reads the issue and the diff before publish.

With ``review = true`` on a repo, after the test gate is green a reviewer (a
fresh session of the repo's agent kind, its tree mounted read-only) gets the
issue and the diff and answers with one verdict line:

    VERDICT: APPROVE
    VERDICT: REQUEST_CHANGES

followed by its reasons. Exactly one verdict line counts; none, or two that
disagree, reads as "request changes: unreadable verdict", so a confused or
chatty reviewer never approves by accident. Requested changes go back to the
implementing session (then the test gate again); a second request escalates
without pushing (``pipeline.run.implement``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.agents.base import AgentRequest, AgentResult
from pipeline.core.errors import FatalError
from pipeline.core.masking import mask
from pipeline.git.commits import Git
from pipeline.run.prompt import IssueInfo
from pipeline.run.scope import RunScope

MAX_REVIEWS = 2  # the second request for changes escalates
DIFF_CHARS = 60_000
REASONS_CHARS = 2_000
UNREADABLE = "unreadable verdict"

_VERDICT = re.compile(r"^\s*VERDICT:\s*(APPROVE|REQUEST_CHANGES)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ReviewVerdict:
    """The reviewer's answer: approved or not, and why."""

    approved: bool
    reasons: str

    @property
    def label(self) -> str:
        return "approved" if self.approved else "changes requested"


def parse_verdict(text: str) -> ReviewVerdict:
    """The verdict in a reviewer's final message; anything unclear requests changes."""
    verdicts: set[str] = set()
    reasons: list[str] = []
    for line in text.splitlines():
        match = _VERDICT.match(line)
        if match:
            verdicts.add(match.group(1).upper())
        else:
            reasons.append(line)
    # Masked before it is cut: the cut of a secret is followed by more text where it is shown.
    why = mask("\n".join(reasons).strip())[:REASONS_CHARS]
    if len(verdicts) != 1:
        detail = f" ({why[:300]})" if why else ""
        return ReviewVerdict(False, f"{UNREADABLE}{detail}")
    return ReviewVerdict(verdicts == {"APPROVE"}, why or "(no reasons given)")


def review_prompt(issue: IssueInfo, diff: str) -> str:
    """What the reviewer reads: the issue, the diff, and the answer's exact form."""
    if len(diff) > DIFF_CHARS:
        diff = diff[:DIFF_CHARS] + "\n[... the diff is cut here; read the files for the rest]"
    return (
        "afk-review: you are reviewing a change before it is pushed to the main branch.\n"
        "The working tree is read-only: read files if you need to, change nothing.\n\n"
        f"## The issue ({issue.ref}): {issue.title}\n\n{issue.body}\n\n"
        f"## The change\n\n```diff\n{diff}\n```\n\n"
        "## Your answer\n\n"
        "Does the change do what the issue asks, correctly and without unrelated edits?\n"
        "Answer with exactly one line `VERDICT: APPROVE` or `VERDICT: REQUEST_CHANGES`,\n"
        "then your reasons (for changes: what exactly must change).\n"
    )


def changes_prompt(reasons: str, round_: int) -> str:
    """What the implementing session gets back when the reviewer requests changes."""
    return (
        f"A reviewer read your change (review {round_} of {MAX_REVIEWS}) and requested "
        f"changes:\n\n{reasons}\n\nMake these changes; the tests run again and the "
        "reviewer reads the result. A second request for changes stops the run without "
        "pushing."
    )


class Reviewer:
    """Runs one review: a fresh session of the repo's agent, confined read-only."""

    def __init__(self, scope: RunScope, base: str) -> None:
        self.scope = scope
        self.base = base
        self.git = Git(scope.tree, stop=scope.stop)

    def review(self, round_: int) -> ReviewVerdict:
        scope = self.scope
        head = self.git.head()
        diff = self.git.run("diff", "--no-color", "--no-ext-diff", f"{self.base}..{head}")
        scope.events("review", f"review {round_} of {MAX_REVIEWS}: the reviewer reads the diff")
        request = AgentRequest(
            review_prompt(scope.issue, diff),
            scope.workdir,
            scope.ws.env,
            scope.home,
            None,  # a fresh session: the reviewer never sees the implementer's history
            scope.ledger.remaining(),
            jail=scope.jail.read_only_tree(scope.home),
        )
        result = scope.agent().run(request, events=scope.events, stop=scope.stop)
        scope.ledger.add(result)
        scope.ledger.check()
        self._check_untouched(head)
        verdict = _verdict_of(result)
        scope.events(
            "review",
            f"review {round_}: {verdict.label}: {verdict.reasons}",
            {"verdict": verdict.label, "round": round_, "reasons": verdict.reasons},
        )
        return verdict

    def _check_untouched(self, head: str) -> None:
        """The reviewer changed nothing (the sandbox makes sure; this says so if it did not)."""
        changed = self.git.run("status", "--porcelain", "--untracked-files=all").strip()
        if self.git.head() != head or changed:
            raise FatalError(
                "review_wrote", f"the reviewer changed the worktree, which it must not: {changed}"
            )


def _verdict_of(result: AgentResult) -> ReviewVerdict:
    if result.is_error or result.exit_code not in (0, None):
        return ReviewVerdict(False, f"{UNREADABLE} (the reviewer failed: {result.subtype})")
    return parse_verdict(result.result_text)
