"""The reviewer's output protocol: one verdict line; anything unclear requests changes."""

from __future__ import annotations

from pathlib import Path

from pipeline.core.masking import register_secret
from pipeline.run.review import REASONS_CHARS, UNREADABLE, parse_verdict
from pipeline.sandbox.bwrap import Layout, bwrap_argv
from pipeline.sandbox.jail import Jail, Unconfined


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


def test_reviewer_jail_mounts_the_tree_read_only(tmp_path: Path) -> None:
    """The reviewer's bwrap binds its tree, git metadata and caches read-only, its HOME writable."""
    tree, git_dir, cache, home = (tmp_path / n for n in ("tree", "git", "cache", "home"))
    for path in (tree, git_dir, cache, home):
        path.mkdir()
    layout = Layout(workdir=tree, writable=(tree, git_dir, cache, home))
    reviewer = Jail(Unconfined(), layout, home=home).read_only_tree(home)
    argv = bwrap_argv(Path("/usr/bin/bwrap"), reviewer.layout, ["true"], None, 3)
    binds = {(argv[i], argv[i + 1]) for i in range(len(argv) - 1)}
    for path in (tree, git_dir, cache):
        assert ("--ro-bind", str(path)) in binds and ("--bind", str(path)) not in binds
    assert ("--bind", str(home)) in binds


def test_a_secret_the_reasons_cut_is_masked_before_the_cut() -> None:
    """A reviewer printing a key where its reasons (or an unreadable answer's excerpt) are
    cut short: nothing of the key is left, whatever text is put after the reasons."""
    key = "sntl-review-key-7Qx9vLp2"
    register_secret(key)
    for limit in (REASONS_CHARS, 300):  # 300: the excerpt of an unreadable answer
        text = "y" * (limit - 12) + key + "\nmore reasons"
        kept = parse_verdict(text + "\nVERDICT: REQUEST_CHANGES").reasons
        unreadable = parse_verdict(text).reasons
        assert key[:8] not in kept and key[:8] not in unreadable
        assert "***" in kept or "***" in unreadable
