"""Publish's decisions on their own: rebase or not, re-test, conflicts, pushes, the trailer."""

from __future__ import annotations

import pytest

from pipeline.git.mirror import pushed_in
from pipeline.run.publish_rules import (
    MAX_PULL_TITLE,
    Integration,
    PushFailure,
    carries_run,
    conflict_resolved,
    hand_conflict_to_agent,
    integration,
    pull_request_title,
    push_failure,
)

BASE, MOVED = "a" * 40, "b" * 40


def test_an_unmoved_remote_is_pushed_as_tested() -> None:
    """The remote still at the run's base: no rebase and no second test run."""
    assert integration(BASE, BASE, target_in_head=True) is Integration.AS_TESTED


def test_a_moved_remote_the_branch_holds_is_retested_without_a_rebase() -> None:
    """The branch already contains the remote's new SHA: test again, rebase nothing."""
    assert integration(BASE, MOVED, target_in_head=True) is Integration.RETEST


def test_a_moved_remote_the_branch_lacks_is_rebased_onto() -> None:
    """The remote moved past the run's base: rebase onto it (then test again)."""
    assert integration(BASE, MOVED, target_in_head=False) is Integration.REBASE


@pytest.mark.parametrize(
    ("attempts", "allowed", "has_resolver", "to_agent"),
    [
        (0, 1, True, True),
        (1, 1, True, False),
        (1, 3, True, True),
        (0, 0, True, False),
        (0, 3, False, False),
    ],
)
def test_a_conflict_goes_to_the_resolver_while_attempts_last(
    attempts: int, allowed: int, has_resolver: bool, to_agent: bool
) -> None:
    """A conflict goes to the agent while it has attempts left; otherwise a human decides."""
    assert hand_conflict_to_agent(attempts, allowed, has_resolver=has_resolver) is to_agent


def test_a_resolution_counts_only_on_top_of_the_remote() -> None:
    """The resolver saying "resolved" is not enough: the branch must hold the remote's SHA."""
    assert conflict_resolved(True, target_in_head=True)
    assert not conflict_resolved(True, target_in_head=False)
    assert not conflict_resolved(False, target_in_head=True)


def test_the_trailer_names_the_run_exactly() -> None:
    """Run 7's trailer is found among others, and run 7 is not run 17 or 70."""
    assert carries_run("12\n7\n", 7)
    assert not carries_run("17\n70\n", 7)
    assert not carries_run("", 7)


def test_a_push_already_on_the_remote_is_found_by_its_trailer() -> None:
    """The newest commit carrying the run's trailer is the one to record instead of pushing."""
    log = f"{'c' * 40}\t\n{'d' * 40}\t12,7\n{'e' * 40}\t7\n"
    assert pushed_in(log, 7) == "d" * 40
    assert pushed_in(log, 1) is None
    assert pushed_in("", 7) is None


def test_another_runs_trailer_is_not_this_push() -> None:
    """A remote commit of run 17 does not stop run 1 or 7 from pushing."""
    assert pushed_in(f"{'d' * 40}\t17\n", 7) is None
    assert pushed_in(f"{'d' * 40}\t17\n", 1) is None


@pytest.mark.parametrize(
    ("output", "meaning"),
    [
        (" ! [rejected]        main -> main (fetch first)", PushFailure.RACE),
        (" ! [rejected]        main -> main (non-fast-forward)", PushFailure.RACE),
        (" ! [rejected]        afk/run-3 -> afk/run-3 (stale info)", PushFailure.RACE),
        (" ! [remote rejected] main -> main (pre-receive hook declined)", PushFailure.REJECTED),
        (
            " ! [remote rejected] main -> main (protected branch hook declined)",
            PushFailure.REJECTED,
        ),
        (
            "fatal: unable to access 'https://h/o/r.git/': Could not resolve host: h",
            PushFailure.TRANSIENT,
        ),
        ("", PushFailure.TRANSIENT),
    ],
)
def test_a_failed_push_is_a_race_a_refusal_or_transient(output: str, meaning: PushFailure) -> None:
    """A moved remote is raced again, a refusal escalates, anything else is retried later."""
    assert (
        push_failure(f"To https://h/o/r.git\n{output}\nerror: failed to push some refs") is meaning
    )


def test_a_pull_request_title_is_bounded_with_its_reference() -> None:
    assert pull_request_title("Add mul", "#3") == "Add mul (#3)"
    longest = "x" * (MAX_PULL_TITLE - len(" (#3)"))
    assert pull_request_title(longest, "#3") == f"{longest} (#3)"
    cut = pull_request_title("word " * 100, "web#12")
    assert len(cut) == MAX_PULL_TITLE - 1 and cut.endswith("word… (web#12)"), cut
