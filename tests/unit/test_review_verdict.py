"""The reviewer's output protocol: one verdict line; anything unclear requests changes."""

from __future__ import annotations

from pipeline.run.review import UNREADABLE, parse_verdict


def test_approve_with_reasons() -> None:
    """``VERDICT: APPROVE`` approves, and the other lines are the reasons."""
    verdict = parse_verdict("Looks right.\nVERDICT: APPROVE\nTests cover it.")
    assert verdict.approved and verdict.reasons == "Looks right.\nTests cover it."


def test_request_changes_carries_what_to_change() -> None:
    """``VERDICT: REQUEST_CHANGES`` (any case, any spacing) rejects with its reasons."""
    verdict = parse_verdict("  verdict:   request_changes  \nRename foo to bar.")
    assert not verdict.approved and verdict.reasons == "Rename foo to bar."


def test_missing_or_conflicting_verdicts_are_unreadable() -> None:
    """No verdict line, two that disagree, or a verdict inside prose never approve."""
    for text in (
        "I approve this change.",
        "VERDICT: APPROVE\nVERDICT: REQUEST_CHANGES",
        "The VERDICT: APPROVE is what I would say",
        "",
    ):
        verdict = parse_verdict(text)
        assert not verdict.approved and verdict.reasons.startswith(UNREADABLE), text


def test_repeated_identical_verdict_still_counts() -> None:
    """The same verdict twice is still one clear answer."""
    assert parse_verdict("VERDICT: APPROVE\nok\nVERDICT: APPROVE").approved
