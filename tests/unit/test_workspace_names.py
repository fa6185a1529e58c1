"""Names that reach the filesystem and git refs: sanitising, redaction, path checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.errors import FatalError
from pipeline.core.masking import redact_url
from pipeline.git.util import (
    branch_name,
    is_disk_full,
    relative_inside,
    safe_component,
)
from pipeline.workspace.slots import keep_pattern as _keep_pattern


def ref_component_ok(part: str) -> bool:
    """git's rules for one ref component (git-check-ref-format(1))."""
    bad_chars = set(" ~^:?*[\\\x7f") | {chr(c) for c in range(32)}
    return (
        bool(part)
        and not part.startswith(".")
        and not part.endswith(".lock")
        and ".." not in part
        and "@{" not in part
        and not any(ch in bad_chars for ch in part)
    )


@given(st.text(max_size=120))
def test_safe_component_is_one_harmless_path_part(raw: str) -> None:
    """Any text becomes one non-empty component: no slash, no dot-only, valid in a ref."""
    part = safe_component(raw)
    assert "/" not in part and "\x00" not in part
    assert part not in {".", ".."}
    assert ref_component_ok(part)
    assert len(part) <= 90


@given(st.text(max_size=200), st.integers(min_value=0, max_value=10**9))
def test_branch_name_is_always_a_valid_afk_branch(issue_ref: str, run_id: int) -> None:
    """Any issue reference gives afk/<issue>-<run> whose components are valid ref parts."""
    branch = branch_name(issue_ref, run_id)
    assert branch.startswith("afk/") and branch.endswith(f"-{run_id}")
    assert branch.count("/") == 1
    assert all(ref_component_ok(part) for part in branch.split("/"))
    assert not branch.endswith(".")


def test_safe_component_keeps_clean_names_and_separates_dirty_ones() -> None:
    """Clean names pass unchanged; names that differ only in unsafe characters stay distinct."""
    assert safe_component("my-repo_1.2") == "my-repo_1.2"
    assert safe_component("a b") != safe_component("a_b")
    assert safe_component("..").startswith("_-")
    assert safe_component("x.lock") != "x.lock"


def test_branch_name_from_a_typical_issue_ref() -> None:
    """'#42' gives afk/42-7."""
    assert branch_name("#42", 7) == "afk/42-7"
    assert branch_name("acme/app#42", 7) == "afk/acme-app-42-7"


def test_redact_url_hides_userinfo_only() -> None:
    """Tokens in URLs are replaced; the host and path remain for the reader."""
    text = "fatal: https://x-access-token:ghp_abc@github.com/acme/app.git not found"
    assert redact_url(text) == "fatal: https://x-access-token:***@github.com/acme/app.git not found"
    assert redact_url("https://ghp_abc@github.com/a.git") == "https://***@github.com/a.git"
    assert redact_url("git@github.com:acme/app.git") == "git@github.com:acme/app.git"


def test_disk_full_markers() -> None:
    """Both ENOSPC and quota messages count as a full disk; other errors do not."""
    assert is_disk_full("error: write failed: No space left on device")
    assert is_disk_full("Disk quota exceeded")
    assert not is_disk_full("Permission denied")


def test_relative_inside_rejects_escapes(tmp_path: Path) -> None:
    """Absolute paths and '..' are refused with the setting named; inner paths are fine."""
    assert relative_inside(tmp_path, "a/b", what="workdir") == tmp_path / "a" / "b"
    for bad in ("/etc", "../x", "a/../../x"):
        with pytest.raises(FatalError, match="workdir"):
            relative_inside(tmp_path, bad, what="workdir")


def test_keep_patterns_match_names_anywhere_and_paths_from_the_root() -> None:
    """'node_modules' is kept at any depth; 'vendor/bundle' only at the root."""
    assert _keep_pattern("node_modules") == "node_modules/"
    assert _keep_pattern("vendor/bundle/") == "/vendor/bundle/"
