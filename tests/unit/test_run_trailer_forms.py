"""A commit the daemon pushes passes for its own run only, read by git itself.

``pipeline.git.mirror`` and ``pipeline.run.publish`` find a run's push by the values of
the ``Afk-Run`` trailers git reads (``%(trailers:key=Afk-Run,valueonly)``), split at
commas. Each message below is what an agent steered by an issue could write; committed
as the daemon commits it, git reads run 7 and no other.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipeline.git.commits import inert_message

OURS = (("Afk-Run", "7"), ("Refs", "https://forge.example/acme/app/issues/3"))
MESSAGES = {
    "another run's": "Add mul\n\nAfk-Run: 12\nAfk-Run: 7\nRefs: x",
    "lower case": "Add mul\n\nafk-run: 12\nAfk-Run: 7",
    "space before the colon": "Add mul\n\nAfk-Run : 12,13\nAfk-Run: 7",
    "a comma list": "Add mul\n\nAfk-Run: 7,12",
    "folded into ours": "Add mul\n\nAfk-Run: 7\n ,12\nRefs: x",
    "folded into another": "Add mul\n\nAfk-Run: 12\n  7\nAfk-Run: 7",
    "in the body too": "Add mul\n\nAfk-Run: 12\n\nMore words.\n\nAfk-Run: 7",
}


def _git(where: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(where), *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("name", MESSAGES)
def test_git_reads_only_this_runs_trailer(tmp_path: Path, name: str) -> None:
    _git(tmp_path, "init", "-q")
    message = inert_message(MESSAGES[name], OURS)
    args = [arg for key, value in OURS for arg in ("--trailer", f"{key}: {value}")]
    final = _git(
        tmp_path, "interpret-trailers", "--if-exists", "addIfDifferent", *args, stdin=message
    )
    who = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    _git(tmp_path, *who, "commit", "-q", "--allow-empty", "-F", "-", stdin=final)
    read = _git(tmp_path, "log", "-1", "--format=%(trailers:key=Afk-Run,valueonly,separator=%x2C)")
    assert {value.strip() for value in read.strip().split(",")} == {"7"}, final
    assert final.startswith("Add mul\n")


def test_a_message_naming_only_this_run_is_kept_as_written() -> None:
    message = (
        "Add mul\n\nFollows the issue.\n\nAfk-Run: 7\nRefs: https://forge.example/acme/app/issues/3"
    )
    assert inert_message(message, OURS) == message
