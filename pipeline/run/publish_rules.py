"""What publish decides, as pure functions of what it has seen: no git, no remote.

``pipeline.run.publish`` gathers the facts (SHAs, ancestry, git's output) and
acts on these answers, so each rule is checked on its own in fast tests.
"""

from __future__ import annotations

import re
from enum import Enum

from pipeline.core.masking import ELLIPSIS
from pipeline.git.commits import defuse_closing
from pipeline.intake.sanitize import inert_quote

# Gitea and GitLab refuse a pull (merge) request title over 255 characters, GitHub over 256;
# an issue's own title may already be 255 long.
MAX_PULL_TITLE = 255


class Integration(Enum):
    """How the run's branch meets the remote's default branch before a push."""

    AS_TESTED = "as_tested"  # the remote has not moved: push what the implement phase tested
    RETEST = "retest"  # the remote moved, the branch already holds it: test again, no rebase
    REBASE = "rebase"  # rebase onto the remote, then test again


def integration(base: str, target: str, *, target_in_head: bool) -> Integration:
    """``base``: the SHA the run's commits sit on; ``target``: the remote's branch now."""
    if target == base:
        return Integration.AS_TESTED
    return Integration.RETEST if target_in_head else Integration.REBASE


def hand_conflict_to_agent(attempts: int, allowed: int, *, has_resolver: bool) -> bool:
    """True when a rebase conflict goes to the resolver again; False: escalate to a human."""
    return has_resolver and attempts < allowed


def conflict_resolved(resolved: bool, *, target_in_head: bool) -> bool:
    """The resolver's word counts only when the branch really sits on the remote's SHA."""
    return resolved and target_in_head


def carries_run(trailer_values: str, run_id: int) -> bool:
    """Whether ``Afk-Run`` trailer values (whitespace-separated) name run ``run_id``."""
    return str(run_id) in trailer_values.split()


class PushFailure(Enum):
    """What a failed push means."""

    RACE = "race"  # the remote moved under the push: fetch, integrate, push again
    REJECTED = "rejected"  # the remote refused it (a hook, a protected branch): a human decides
    TRANSIENT = "transient"  # the network or the server: retry the run later


_RACE = re.compile(r"\[rejected\].*(fetch first|non-fast-forward|stale info)")


def push_failure(output: str) -> PushFailure:
    """Classify a failed ``git push`` from its output (stdout and stderr)."""
    if _RACE.search(output):
        return PushFailure.RACE
    if "[remote rejected]" in output:
        return PushFailure.REJECTED
    return PushFailure.TRANSIENT


def pull_request_title(title: str, ref: str, limit: int = MAX_PULL_TITLE) -> str:
    """``<title> (<ref>)`` in at most ``limit`` characters: the title cut with an ellipsis,
    its closing keywords made ``Refs`` (``pipeline.git.commits.defuse_closing``).

    The forge refuses a longer one, and the branch is pushed by then: the run would end
    without its pull request. The title is the issue's, anyone's text: merged as proposed
    (the title in a merge commit's message or a squash's subject), "Fix #2" would close
    issue 2. Nor may it mention anyone or link another issue (``inert_quote``); the
    reference to the run's own issue is the daemon's, and links it.
    """
    title, suffix = inert_quote(defuse_closing(title)), f" ({ref})"
    if len(title) + len(suffix) <= limit:
        return title + suffix
    room = max(limit - len(suffix) - len(ELLIPSIS), 0)
    return title[:room].rstrip() + ELLIPSIS + suffix
