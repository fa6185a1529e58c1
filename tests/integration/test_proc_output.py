"""A child's output keeps being read when whoever is told about its lines fails."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.core.proc import run_command

CHATTY = """
import sys
print("first", flush=True)
for i in range(5000):
    print("line", i, "x" * 60)
print("last", flush=True)
"""


def test_a_failing_line_callback_does_not_cut_the_childs_output(tmp_path: Path) -> None:
    """A line callback that raises (a database refusing the event) is not the child's
    problem: the rest of its output is read, so it is never killed by a closed pipe."""
    seen: list[str] = []

    def on_line(line: str) -> None:
        seen.append(line)
        if line == "first":
            raise ValueError("the history refused the event")

    result = run_command(
        [sys.executable, "-c", CHATTY], cwd=tmp_path, env={}, on_line=on_line, tail_lines=5
    )
    assert result.returncode == 0, result.output_tail
    assert seen[-1] == "last" and len(seen) == 5002
    assert result.output_tail.splitlines()[-1] == "last"
