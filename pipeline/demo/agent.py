"""The demo's local agent: real edits, test first, no network, no account.

``python -m pipeline.demo.agent PROMPT_FILE WORKDIR`` plays a coding agent for
``pipeline demo`` (the ``command`` agent preset runs it). It reads the prompt,
recognises a demo issue by the tag ``demo-task: <name>`` in its body, writes a
failing test, runs the suite (red), makes the change, runs it again (green) and
commits with the trailers the prompt asks for. A prompt carrying failure
evidence (a fix-forward run) gets the task's heal instead. Anything it does
not recognise ends in one ``BLOCKED: <reason>`` line and exit 0, as the agent
contract says. The changes themselves are in ``pipeline.demo.tasks``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.demo.tasks import TASKS, Change

TAG = re.compile(r"demo-task:\s*([A-Za-z0-9_-]+)")
FIX_FORWARD = re.compile(r"^#+\s*Failure evidence|fix[- ]forward", re.IGNORECASE | re.MULTILINE)
TRAILER = re.compile(r"^(Afk-Run|Refs):[ \t]*(\S[^\n]*?)[ \t]*$", re.MULTILINE)
TITLE = re.compile(r"^#[ \t]+(\S[^\n]*?)[ \t]*$", re.MULTILINE)
TEST_ARGS = ("-m", "unittest", "discover", "-s", "tests", "-q")
BODY_LINES = 6  # of the first failure's traceback
IDENTITY = ("-c", "user.name=afk demo agent", "-c", "user.email=demo-agent@afk-pipeline.invalid")

Say = Callable[[str], None]


class Blocked(Exception):
    """The agent cannot proceed; the message is the reason it reports."""


@dataclass(frozen=True)
class Brief:
    """What the agent takes from its prompt."""

    tag: str | None
    title: str
    fix_forward: bool
    trailers: tuple[tuple[str, str], ...]


def read_brief(prompt: str) -> Brief:
    """The task tag, title, fix-forward flag and commit trailers in ``prompt``."""
    tags = TAG.findall(prompt)
    title = TITLE.search(prompt)
    trailers: dict[str, str] = {}
    for key, value in TRAILER.findall(prompt):
        trailers[key] = value  # the last one wins: the contract ends the prompt
    return Brief(
        tag=tags[0] if tags else None,
        title=title.group(1) if title else "(untitled)",
        fix_forward=FIX_FORWARD.search(prompt) is not None,
        trailers=tuple((key, trailers[key]) for key in ("Afk-Run", "Refs") if key in trailers),
    )


def choose(brief: Brief, workdir: Path) -> Change:
    """The change to make for ``brief`` in ``workdir``; raises ``Blocked``."""
    if brief.fix_forward:
        return _heal(brief, workdir)
    task = TASKS.get(brief.tag or "")
    if task is None:
        known = ", ".join(sorted(TASKS))
        found = f"tag {brief.tag!r}" if brief.tag else "no `demo-task:` tag"
        raise Blocked(f"this demo agent only knows the demo tasks ({known}); the issue has {found}")
    change = task.first
    if change.applied(workdir):
        raise Blocked(f"the issue looks resolved already: {change.test_path} exists")
    missing = change.missing_anchors(workdir)
    if missing:
        raise Blocked("the code is not what the demo task expects: " + "; ".join(missing))
    return change


def _heal(brief: Brief, workdir: Path) -> Change:
    task = TASKS.get(brief.tag or "")
    candidates = [task] if task is not None else list(TASKS.values())
    for candidate in candidates:
        heal = candidate.heal
        if heal is not None and not heal.applied(workdir) and not heal.missing_anchors(workdir):
            return heal
    raise Blocked("the failure evidence points at nothing this demo agent knows how to fix")


def run_tests(workdir: Path, say: Say) -> bool:
    """Run the suite as the project's AGENTS.md says; show the end of its output."""
    argv = [sys.executable, *TEST_ARGS]
    say("running " + " ".join(["python", *TEST_ARGS]))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    for line in excerpt((done.stdout + done.stderr).strip().splitlines()):
        print(f"    | {line}", flush=True)
    return done.returncode == 0


def excerpt(lines: list[str]) -> list[str]:
    """The first failure (its header and last lines) and the summary, as an agent quotes them."""
    summary_at = next(
        (i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("Ran ")), len(lines)
    )
    summary = [line for line in lines[summary_at:] if line.strip()]
    first = next(
        (i for i, line in enumerate(lines[:summary_at]) if line.startswith(("FAIL:", "ERROR:"))),
        None,
    )
    if first is None:
        return summary or lines[-BODY_LINES:]
    body: list[str] = []
    for line in lines[first + 2 : summary_at]:
        if line.startswith(("=====", "-----")):
            break
        if line.strip():
            body.append(line)
    return [lines[first], *body[-BODY_LINES:], *summary]


def _git(workdir: Path, *args: str, input_text: str | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=workdir, input=input_text, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise Blocked(f"git {args[0]} failed: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def _identity(workdir: Path) -> tuple[str, ...]:
    configured = subprocess.run(
        ["git", "config", "user.email"], cwd=workdir, capture_output=True, text=True, check=False
    ).stdout.strip()
    has_env = "GIT_COMMITTER_EMAIL" in os.environ or "EMAIL" in os.environ
    return () if configured or has_env else IDENTITY


def commit_message(change: Change, brief: Brief) -> str:
    """Subject, body, and the trailers the prompt asked for."""
    message = f"{change.subject}\n\n{change.body}\n\nTest first: {change.test_path}.\n"
    if brief.trailers:
        message += "\n" + "\n".join(f"{key}: {value}" for key, value in brief.trailers) + "\n"
    return message


def commit(workdir: Path, change: Change, brief: Brief) -> str:
    """Commit exactly the files the change touched; returns the new SHA."""
    _git(workdir, "add", "--", *change.paths)
    _git(
        workdir,
        *_identity(workdir),
        "commit",
        "-q",
        "--no-verify",
        "-F",
        "-",
        input_text=commit_message(change, brief),
    )
    return _git(workdir, "rev-parse", "HEAD")


def work(change: Change, brief: Brief, workdir: Path, say: Say) -> str:
    """Test first: red, change, green, commit. Returns the commit's SHA."""
    say(f"writing a failing test first: {change.test_path}")
    test_file = workdir / change.test_path
    test_file.parent.mkdir(parents=True, exist_ok=True)
    test_file.write_text(change.test_text, encoding="utf-8")
    if run_tests(workdir, say):
        raise Blocked(
            f"the new test {change.test_path} passes before any change; "
            "the issue may be resolved already"
        )
    say("red, as expected: the test captures the issue")
    for edit in change.edits:
        say(f"editing {edit.path}: {edit.why}")
        if not edit.applies_to(workdir):
            raise Blocked(f"{edit.path} no longer holds the code to change ({edit.why})")
        edit.apply(workdir)
    if not run_tests(workdir, say):
        raise Blocked("the suite is still red after the change; see the output above")
    say("green: the whole suite passes")
    sha = commit(workdir, change, brief)
    say(f"committed {sha[:12]}: {change.subject}")
    return sha


def say(line: str) -> None:
    print(f"demo-agent: {line}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m pipeline.demo.agent PROMPT_FILE WORKDIR", file=sys.stderr)
        return 2
    prompt = Path(args[0]).read_text(encoding="utf-8")
    workdir = Path(args[1])
    brief = read_brief(prompt)
    mode = "fix-forward with failure evidence" if brief.fix_forward else "issue"
    say(f"read the prompt ({mode}): {brief.title}")
    for name in ("AGENTS.md", "CLAUDE.md"):
        if (workdir / name).is_file():
            say(f"read {name}")
    try:
        change = choose(brief, workdir)
        say(f"plan: {change.subject}")
        work(change, brief, workdir, say)
    except Blocked as blocked:
        print(f"BLOCKED: {blocked}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
