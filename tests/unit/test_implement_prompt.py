"""Prompts and commit messages of the implement phase."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config.settings import RepoSettings
from pipeline.core.errors import ConfigError
from pipeline.git.commits import combined_message
from pipeline.run.prompt import (
    MAX_FIX_OUTPUT_CHARS,
    IssueInfo,
    build_prompt,
    fix_prompt,
    repo_instructions,
)

ISSUE = IssueInfo("web#7", 7, "Totals are off", "Sum is ${total}", (), "http://t/7", "bob")
REPO = RepoSettings(
    name="web", tracker="local", slug="o/web", remote_url="x", test_command="make t"
)


def test_prompt_keeps_issue_text_literal(tmp_path: Path) -> None:
    """Dollars and braces in the issue are not template syntax; no comments, no section."""
    prompt = build_prompt(ISSUE, run_id=3, repo=REPO, repo_root=tmp_path, workdir=tmp_path)
    assert "Sum is ${total}" in prompt and "web#7" in prompt and "Afk-Run: 3" in prompt
    assert "## Comments" not in prompt and "make t" in prompt


def test_instructions_come_from_root_and_workdir_once(tmp_path: Path) -> None:
    """AGENTS.md and CLAUDE.md of the root and of a sub-project are included, each once."""
    sub = tmp_path / "app"
    sub.mkdir()
    (tmp_path / "AGENTS.md").write_text("root rules")
    (sub / "CLAUDE.md").write_text("app rules")
    text = repo_instructions(tmp_path, sub)
    assert text.count("root rules") == 1 and "(app/CLAUDE.md)" in text
    assert repo_instructions(tmp_path, tmp_path).count("root rules") == 1


def test_missing_template_names_the_setting(tmp_path: Path) -> None:
    """A prompt_template that cannot be read is a config error naming the repo key."""
    repo = RepoSettings(
        name="web", tracker="local", slug="o/web", remote_url="x", prompt_template=Path("no.txt")
    )
    with pytest.raises(ConfigError, match=r"repos\.web\.prompt_template"):
        build_prompt(ISSUE, run_id=1, repo=repo, repo_root=tmp_path, workdir=tmp_path)


def test_fix_prompt_keeps_only_the_tail() -> None:
    """Only the last few KB of a long failure reach the agent."""
    output = "head-marker\n" + "x" * 10_000 + "\nFAILED test_total"
    prompt = fix_prompt(test_command="make t", output_tail=output, iteration=1, max_iterations=3)
    assert "FAILED test_total" in prompt and "head-marker" not in prompt
    assert len(prompt) < MAX_FIX_OUTPUT_CHARS + 1000 and "attempt 1 of 3" in prompt


def test_combined_message_prefers_the_agents_single_message() -> None:
    """One agent message is kept; several are listed under the issue subject."""
    subject = "Totals are off (web#7)"
    assert combined_message(subject, ["Fix totals\n\nbody", subject]) == "Fix totals\n\nbody"
    both = combined_message(subject, ["Add test", "Fix totals"])
    assert both == f"{subject}\n\n- Add test\n- Fix totals"
    assert combined_message(subject, [subject, subject]) == subject
