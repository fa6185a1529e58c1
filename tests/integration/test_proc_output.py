"""A child's output keeps being read when whoever is told about its lines fails."""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.core.masking import register_secret
from pipeline.core.proc import TAIL_LINE_CHARS, run_command

KEY = "sntl-agent-key-7Qx9vLp2"

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


def test_a_line_longer_than_the_limit_is_cut_and_the_next_one_read_whole(tmp_path: Path) -> None:
    """A 3 MiB line is handed on cut to ``max_line_bytes`` (its rest skipped, never kept),
    the line after it whole; the kept tail holds a bounded piece of each."""
    script = "import sys; sys.stdout.write('y' * (3 << 20) + '\\nafter\\n')"
    seen: list[str] = []
    result = run_command(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={},
        on_line=seen.append,
        max_line_bytes=1 << 20,
    )
    assert result.returncode == 0
    assert [len(line) for line in seen] == [1 << 20, 5] and seen[1] == "after"
    assert result.output_tail == "y" * TAIL_LINE_CHARS + "\nafter"


def test_a_secret_the_kept_tail_cuts_is_masked_before_the_cut(tmp_path: Path) -> None:
    """A line cut to ``TAIL_LINE_CHARS`` inside a secret, then another line: the cut is no
    edge of the joined tail, so the line is masked before it is cut, and nothing of the
    secret is left for a caller that shows the tail's end (an agent's error, a probe)."""
    register_secret(KEY)
    for shown in range(1, len(KEY)):
        line = "y" * (TAIL_LINE_CHARS - shown) + KEY + " and on"
        script = f"import sys; sys.stdout.write({line!r} + '\\nthe last line\\n')"
        result = run_command([sys.executable, "-c", script], cwd=tmp_path, env={})
        kept = ("y" * (TAIL_LINE_CHARS - shown) + "*** and on")[:TAIL_LINE_CHARS]
        assert result.output_tail == kept + "\nthe last line", shown


def test_the_kept_tail_is_masked(tmp_path: Path) -> None:
    register_secret(KEY)
    script = f"print('the key is', {KEY!r}); print('the end')"
    result = run_command([sys.executable, "-c", script], cwd=tmp_path, env={})
    assert result.output_tail == "the key is ***\nthe end"


CHATTY_BEFORE_READING = """
import sys
sys.stdout.write("banner " * 50_000 + "\\n")  # 350 kB, more than a pipe holds
sys.stdout.flush()
data = sys.stdin.buffer.read()
print("read", len(data))
"""


def test_a_child_that_talks_before_reading_its_stdin_gets_all_of_it(tmp_path: Path) -> None:
    """A prompt larger than a pipe holds, to a child that prints much before it reads (a
    CLI's banner, a wrapper's log): the child reads all of it and ends. The prompt was
    written before the child's output was read, so both sides waited for the other for
    good, no timeout or stop watched yet."""
    prompt = b"p" * (1 << 20)
    result = run_command(
        [sys.executable, "-c", CHATTY_BEFORE_READING],
        cwd=tmp_path,
        env={},
        stdin_data=prompt,
        timeout_s=120,
    )
    assert result.returncode == 0, result
    assert result.output_tail.splitlines()[-1] == f"read {len(prompt)}"


DOTS_WITHOUT_NEWLINE = """
import sys, time
for i in range(12):
    sys.stdout.write(".")  # a test runner's progress: one dot per test, the newline at the end
    sys.stdout.flush()
    time.sleep(0.25)
print(" 12 passed", flush=True)
"""


def test_output_without_a_newline_is_activity_not_idleness(tmp_path: Path) -> None:
    """A child that prints progress dots keeps printing, if not whole lines: it is not
    idle, and is not killed as idle. Its line is handed on whole once it ends."""
    seen: list[str] = []
    result = run_command(
        [sys.executable, "-c", DOTS_WITHOUT_NEWLINE],
        cwd=tmp_path,
        env={},
        on_line=seen.append,
        idle_timeout_s=2.0,
    )
    assert not result.idle_timed_out and result.returncode == 0, result
    assert seen == ["." * 12 + " 12 passed"]
