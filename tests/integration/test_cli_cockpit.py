"""The CLI as an operator uses it: strict filters, --follow, --json everywhere, terminal output."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.cli import render
from pipeline.store import Store

from .test_cli_words import local_alpha_config

OWNER = "worker-cli"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, Store, dict[str, str]]]:
    """A config with one local-tracker repo ``alpha``, its migrated SQLite history, an env."""
    database = f"sqlite:///{tmp_path / 'history.db'}"
    config = local_alpha_config(tmp_path, database)
    store = Store(database)
    store.upgrade()
    store.ensure_repo("alpha", tracker="local", slug="org/alpha")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TZ": "UTC"}
    env.pop("PIPELINE_DATABASE_URL", None)
    try:
        yield config, store, env
    finally:
        store.close()


def pipeline(config: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args, "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


BAD_FILTERS = [
    (("--state", "bogus"), "invalid choice: 'bogus'", "retry_wait"),
    (("--kind", "bogus"), "invalid choice: 'bogus'", "fix_forward"),
    # No run has kind "manual": a run enqueued without an issue is an "issue" run.
    (("--kind", "manual"), "invalid choice: 'manual'", "fix_forward"),
    (("--repo", "nope"), "--repo nope: no such repo", "alpha"),
    (("--since", "yesterday"), "--since: expected an ISO time", "7d"),
    (("--until", "soon"), "--until: expected an ISO time", "today"),
    (("--until", "2026-02-30"), "--until: expected an ISO time", "24h"),
    (("--since", "1d", "--until", "3d"), "--until 3d: must be later", "--since 1d"),
    (("--text", "a\x01b"), "--text: must not contain", "control characters"),
    (("--repo-state", "melted"), "invalid choice: 'melted'", "frozen"),
    (("--limit", "0"), "--limit", "from 1 to 2147483647"),
    (("--limit", "many"), "--limit", "from 1 to 2147483647"),
    # PostgreSQL refused it as out of range ("database unavailable", exit 1).
    (("--limit", "9" * 20), "--limit", "from 1 to 2147483647"),
]


@pytest.mark.parametrize(("args", "problem", "valid"), BAD_FILTERS)
def test_bad_filters_exit_2_naming_the_valid_values(
    setup: tuple[Path, Store, dict[str, str]], args: tuple[str, ...], problem: str, valid: str
) -> None:
    """`runs list` with a bad filter exits 2 and says what is allowed; no '(none)' answer."""
    config, _, env = setup
    proc = pipeline(config, env, "runs", "list", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert problem in proc.stderr and valid in proc.stderr
    assert "(none)" not in proc.stdout and "Traceback" not in proc.stderr


def test_time_and_text_filters_find_runs(setup: tuple[Path, Store, dict[str, str]]) -> None:
    """`runs list --since/--until/--text` narrow the list like the API's filters."""
    from datetime import timedelta

    from sqlalchemy import update

    from pipeline.store import EnqueueOptions, SeenIssue
    from pipeline.store.models import RunRow

    config, store, env = setup
    for number, title in ((1, "Login page crashes"), (2, "Dark mode")):
        seen = SeenIssue(tracker="local", number=number, title=title, author="a", url="u")
        store.enqueue("alpha", EnqueueOptions(issue_id=store.upsert_issue("alpha", seen).id))
    with store.engine.begin() as conn:
        old = store.now() - timedelta(days=3)
        conn.execute(update(RunRow).where(RunRow.id == 1).values(created_at=old))

    def listed(*args: str) -> list[int]:
        proc = pipeline(config, env, "runs", "list", *args, "--json")
        assert proc.returncode == 0, proc.stderr
        return [run["id"] for run in json.loads(proc.stdout)]

    assert listed("--text", "LOGIN") == [1]
    assert listed("--since", "24h") == [2]
    assert listed("--until", "2d") == [1]
    assert listed("--since", "7d", "--text", "mode") == [2]
    assert listed("--repo-state", "frozen") == []


def test_follow_streams_events_and_exits_when_the_run_ends(
    setup: tuple[Path, Store, dict[str, str]],
) -> None:
    """`runs show --follow` prints each event as it is written and exits 0 on success."""
    config, store, env = setup
    store.enqueue("alpha")
    run = store.claim_next(OWNER, max_concurrency=1, lease_s=60.0)
    assert run is not None
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "pipeline", "runs", "show", str(run.id), "--follow"),
            "--config",
            str(config),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        store.transition(run.id, OWNER, run.attempt, "implementing", "agent started")
        seen = read_until(proc.stdout, "agent started")
        assert proc.poll() is None  # still following: the run has not ended
        store.append_event_fenced(run.id, OWNER, run.attempt, "test", "tests passed", {})
        seen += read_until(proc.stdout, "tests passed")
        assert proc.poll() is None
        store.finish(run.id, OWNER, run.attempt, "succeeded")
        rest, errors = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, errors
    assert f"run {run.id} ended succeeded" in rest
    assert " UTC  #" in seen  # times carry their zone


def read_until(stream: io.TextIOBase | object, text: str) -> str:
    """Lines from the follower until one contains ``text`` (the test times out otherwise)."""
    lines = []
    for line in stream:  # type: ignore[attr-defined]
        lines.append(line)
        if text in line:
            return "".join(lines)
    raise AssertionError(f"stream ended before {text!r}: {''.join(lines)}")


def test_follow_exits_1_when_the_run_fails(setup: tuple[Path, Store, dict[str, str]]) -> None:
    """Following a run that already failed prints its timeline and exits 1 at once."""
    config, store, env = setup
    store.enqueue("alpha")
    run = store.claim_next(OWNER, max_concurrency=1, lease_s=60.0)
    assert run is not None
    store.finish(run.id, OWNER, run.attempt, "failed", error="tests failed")
    proc = pipeline(config, env, "runs", "show", str(run.id), "--follow", "--json")
    assert proc.returncode == 1
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["state"] == "failed"


JSON_COMMANDS = [
    ("runs", "list"),
    ("runs", "show", "1"),
    ("runs", "cancel", "1"),
    ("runs", "retry", "1"),
    ("repos", "list"),
    ("repos", "freeze", "alpha", "--note", "n"),
    ("repos", "unfreeze", "alpha", "--note", "n"),
    ("issue", "add", "--repo", "alpha", "--title", "t"),
    ("issue", "label", "1", "ready-for-agent"),
    ("issue", "unlabel", "1", "ready-for-agent"),
    ("issue", "close", "1"),
    ("issue", "list"),
    ("db", "upgrade"),
]


def test_every_command_speaks_json(setup: tuple[Path, Store, dict[str, str]]) -> None:
    """Each review and steering command prints one JSON document with --json."""
    config, store, env = setup
    store.enqueue("alpha")
    for command in JSON_COMMANDS:
        proc = pipeline(config, env, *command, "--json")
        assert proc.returncode == 0, (command, proc.stderr)
        json.loads(proc.stdout)


def test_tables_are_rich_on_a_terminal_and_plain_when_piped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A terminal gets colour; a pipe gets plain text; a title's markup is shown as written."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    rows = [["1", "[red]boom[/red]", "failed"]]
    tty, pipe = Terminal(), io.StringIO()
    render.table(("ID", "TITLE", "STATE"), rows, tty)
    render.table(("ID", "TITLE", "STATE"), rows, pipe)
    assert "\x1b[" in tty.getvalue() and "[red]boom[/red]" in tty.getvalue()
    assert "\x1b[" not in pipe.getvalue() and "[red]boom[/red]" in pipe.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = Terminal()
    render.table(("ID", "TITLE", "STATE"), rows, plain)
    assert "\x1b[" not in plain.getvalue()
