"""What the one git runner returns is scrubbed whole, however large or oddly shaped git's output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.config.settings import PushSettings, SecretRef
from pipeline.core.masking import register_secret
from pipeline.git.repo import GitRepo
from pipeline.git.run import GitRunner
from pipeline.testing.gitrepos import git

TOKEN = "sntl-token-7Qx9vLp2"


def _repo(tmp_path: Path) -> GitRunner:
    git(tmp_path, "init", "-q", "--initial-branch=main", "repo")
    return GitRunner(GitRepo.plain(tmp_path / "repo"))


def test_a_file_with_one_long_unbroken_line_is_shown_scrubbed(tmp_path: Path) -> None:
    """A minified bundle the agent commits: ``git show`` of it comes back, scrubbed.

    The URL redaction tried its expression at every letter of a word, reading the
    word to its end each time: a 2 MB word took hours, and the run hung on it.
    """
    runner = _repo(tmp_path)
    register_secret(TOKEN)
    word = "x" * 2_000_000
    content = f"{word} https://bot:ghp_unregistered99@git.test/a.git {TOKEN}\n"
    (tmp_path / "repo" / "bundle.min.js").write_text(content)
    blob = runner.ok("hash-object", "-w", "bundle.min.js").strip()
    shown = runner.ok("cat-file", "-p", blob)
    assert shown == f"{word} https://bot:***@git.test/a.git ***\n"


def test_a_large_listing_is_masked_at_its_first_and_last_byte(tmp_path: Path) -> None:
    """``ls-files`` of 20,000 paths, the first and the last named after a secret."""
    runner = _repo(tmp_path)
    register_secret(TOKEN)
    blob = runner.ok("hash-object", "-w", "--stdin", input_data=b"x\n").strip()
    paths = [f"{TOKEN}/a.py", *(f"src/pkg{n // 100:03d}/mod{n:05d}.py" for n in range(20_000))]
    paths.append(f"zz/{TOKEN}")
    index = "".join(f"100644 {blob}\t{p}\n" for p in paths).encode()
    runner.ok("update-index", "--index-info", input_data=index)
    listing = runner.ok("ls-files")
    assert TOKEN not in listing
    assert listing == "".join(p.replace(TOKEN, "***") + "\n" for p in paths)


def test_a_push_token_only_the_command_knows_is_masked_in_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token is resolved (so registered) before anything the command printed is shown."""
    monkeypatch.setenv("AFK_TEST_PUSH_TOKEN", "push-token-never-read-42")
    git(tmp_path, "init", "-q", "--bare", "mirror.git")
    runner = GitRunner(GitRepo.mirror(tmp_path / "mirror.git"))
    missing = os.fspath(tmp_path / "push-token-never-read-42.git")
    push = PushSettings(token=SecretRef(env="AFK_TEST_PUSH_TOKEN"))
    result = runner.network("fetch", missing, url=missing, credentials=push)
    assert not result.ok and "***" in result.stderr and "***" in result.command
    assert "push-token-never-read-42" not in f"{result.stderr} {result.command} {result.operation}"


def test_a_url_whose_userinfo_a_secret_splits_is_redacted_once_the_secret_is_masked(
    tmp_path: Path,
) -> None:
    """A registered secret holding a ``/`` hides the URL's userinfo from the first look;
    masked, it no longer does, and what follows it up to the ``@`` is hidden too."""
    runner = _repo(tmp_path)
    register_secret("ab/cdefgh1-Zq")
    line = "https://ab/cdefgh1-Zq:tokenXYZ-unregistered@git.test/r.git\n"
    blob = runner.ok("hash-object", "-w", "--stdin", input_data=("x" * 100 + line).encode())
    assert (
        runner.ok("cat-file", "-p", blob.strip()) == "x" * 100 + "https://***:***@git.test/r.git\n"
    )
