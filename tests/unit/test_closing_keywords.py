"""Commit messages the daemon pushes never make a forge close or reopen an issue.

The patterns below are the forges' own, as their documentation gives them: GitHub's
closing keywords (close, closes, closed, fix, fixes, fixed, resolve, resolves, resolved
before a reference), GitLab's default ``issue_closing_pattern`` (which adds the -ing forms,
``implement`` and ``issues?`` before the reference, and external ``KEY-12`` ids) and
Gitea's actionable references (the close, fix and resolve forms, and reopen).
"""

from __future__ import annotations

import re

import pytest

from pipeline.git.commits import defuse_closing

REF = r"(?:(?:[\w.-]+/)+[\w.-]+)?#\d+|https?://\S+/issues/\d+"
GITHUB = re.compile(rf"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s+(?:{REF})", re.IGNORECASE)
GITLAB = re.compile(
    r"\b(?:[Cc]los(?:e[sd]?|ing)|[Ff]ix(?:e[sd]|ing)?|[Rr]esolv(?:e[sd]?|ing)"
    rf"|[Ii]mplement(?:s|ed|ing)?)(:?) +(?:(?:issues? +)?(?:{REF})|[A-Z][A-Z0-9_]+-\d+)"
)
GITEA = re.compile(
    rf"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?|reopen(?:s|ed)?)\b:?\s+(?:{REF})",
    re.IGNORECASE,
)
# GitLab's documented example, and what agents and issue titles write.
MESSAGES = (
    "Awesome commit message\n\nFix #20, Fixes #21 and Closes group/otherproject#22.\n"
    "This commit is also related to #17 and fixes #18, #19\n"
    "and https://gitlab.example.com/group/otherproject/issues/23.",
    "Fix #5: the greeter crashes (#12)",
    "Add mul\n\nCloses: #12\nResolves acme/web#3\nImplements issue #4\nReopens #9",
    "closing #1, fixing JIRA-77, resolving #2",
    "fixes nested/group/project#8 and FIXED https://github.com/acme/web/issues/10",
)


@pytest.mark.parametrize("message", MESSAGES)
def test_no_forge_pattern_matches_a_defused_message(message: str) -> None:
    """Each message trips at least one forge's pattern as written, and none once defused;
    every reference is still there to read."""
    assert any(p.search(message) for p in (GITHUB, GITLAB, GITEA))
    defused = defuse_closing(message)
    assert not [p.pattern for p in (GITHUB, GITLAB, GITEA) if p.search(defused)]
    assert re.findall(REF, defused) == re.findall(REF, message)


def test_words_that_name_no_issue_are_left_alone() -> None:
    message = "Fix the prefix #3 handling\n\nfixing the bug; a fix-up for #4; closes the file"
    assert defuse_closing(message) == message
