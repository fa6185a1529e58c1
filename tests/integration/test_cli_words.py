"""The CLI's plain-text answers and its errors: what an operator reads without --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pipeline.cli.main import main
from pipeline.store import Store


def local_alpha_config(tmp_path: Path, database: str) -> Path:
    """A config with one local-tracker repo ``alpha`` on ``database``."""
    config = tmp_path / "pipeline.toml"
    config.write_text(
        f'database_url = "{database}"\n\n[trackers.local]\nkind = "local"\n\n'
        f'[repos.alpha]\ntracker = "local"\nslug = "org/alpha"\n'
        f'remote_url = "{tmp_path / "alpha.git"}"\ntest_command = "true"\n',
        encoding="utf-8",
    )
    return config


ADD = ("issue", "add", "--repo", "alpha", "--title")


class Pipeline:
    """``pipeline ARGS --config CONFIG`` in this process: exit status, stdout, stderr."""

    def __init__(self, config: Path) -> None:
        self.config = config

    def __call__(self, *args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        status = main([*args, "--config", str(self.config)], out, err)
        return status, out.getvalue(), err.getvalue()


@pytest.fixture
def cli(tmp_path: Path) -> Pipeline:
    """A config with one local-tracker repo ``alpha``; its SQLite history not yet created."""
    return Pipeline(local_alpha_config(tmp_path, f"sqlite:///{tmp_path / 'history.db'}"))


def test_history_before_the_schema_asks_for_db_upgrade(cli: Pipeline) -> None:
    """Without a schema, history commands exit 2 naming the fix; `db upgrade` makes it current."""
    status, _, err = cli("runs", "list")
    assert status == 2 and "run `pipeline db upgrade` first" in err
    status, out, _ = cli("db", "upgrade", "--json")
    assert status == 0 and json.loads(out)["current"] is True
    status, out, _ = cli("db", "upgrade")
    assert status == 0 and "is at the latest schema" in out
    assert cli("runs", "list")[0] == 0


def test_an_unreachable_database_exits_1_without_its_password(cli: Pipeline) -> None:
    """A database that refuses connections is named, its password masked, and the exit is 1."""
    url = "postgresql://afk:hunter2-secret@127.0.0.1:1/history"
    status, _, err = cli("runs", "list", "--database-url", url)
    assert status == 1
    assert "unavailable" in err and "127.0.0.1:1" in err
    assert "hunter2-secret" not in err


def test_no_command_prints_help_and_a_bare_group_is_a_usage_error() -> None:
    """`pipeline` alone prints help and exits 0; `pipeline runs` without a command exits 2,
    its own commands on stderr."""
    out = io.StringIO()
    assert main([], out, io.StringIO()) == 0
    assert "COMMAND" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert main(["runs"], out, err) == 2
    assert out.getvalue() == "" and "usage: pipeline runs" in err.getvalue()


def test_a_bad_body_file_is_named_with_what_is_wrong(cli: Pipeline, tmp_path: Path) -> None:
    """A missing or non-UTF-8 --body-file exits 2, naming the file and the problem."""
    cli("db", "upgrade")
    missing = tmp_path / "nope.md"
    status, _, err = cli(*ADD, "t", "--body-file", str(missing))
    assert status == 2 and str(missing) in err and "No such file" in err
    latin = tmp_path / "latin.md"
    latin.write_bytes(b"caf\xe9\n")
    status, _, err = cli(*ADD, "t", "--body-file", str(latin))
    assert status == 2 and str(latin) in err and "not UTF-8 text (byte 3)" in err


def test_local_issues_in_words(cli: Pipeline, tmp_path: Path) -> None:
    """Adding, labelling, listing, unlabelling and closing a local issue answer in sentences
    and a table; closing one that does not exist names it."""
    cli("db", "upgrade")
    body = tmp_path / "body.md"
    body.write_text("Make it greet.\n", encoding="utf-8")
    status, out, _ = cli(*ADD, "Greet", "--body-file", str(body))
    assert (status, out) == (0, "issue 1 added to alpha\n")
    status, out, _ = cli("issue", "label", "1", "ready-for-agent")
    assert status == 0 and out == "issue 1 labelled ready-for-agent: [ready-for-agent]\n"
    status, out, _ = cli("issue", "list")
    assert status == 0 and "Greet" in out and "ready-for-agent" in out
    status, out, _ = cli("issue", "unlabel", "1", "ready-for-agent")
    assert status == 0 and out == "issue 1 unlabelled ready-for-agent: []\n"
    assert cli("issue", "close", "1")[:2] == (0, "issue 1 closed\n")
    status, _, err = cli("issue", "close", "7")
    assert status != 0 and "local issue 7 does not exist" in err


def test_cancel_and_retry_in_words(cli: Pipeline, tmp_path: Path) -> None:
    """Cancel and retry say what they did: cancelled, queued again, stopping, already ended."""
    cli("db", "upgrade")
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        store.ensure_repo("alpha", tracker="local", slug="org/alpha")
        first = store.enqueue("alpha").run.id
        assert cli("runs", "cancel", str(first))[1] == f"run {first} cancelled\n"
        status, out, _ = cli("runs", "retry", str(first))
        assert status == 0 and out.startswith(f"run {first} queued as run ")
        second = int(out.split()[-1])
        claimed = store.claim_next("worker-words", max_concurrency=1, lease_s=60.0)
        assert claimed is not None and claimed.id == second
        status, out, _ = cli("runs", "cancel", str(second))
        assert out == f"run {second} is {claimed.state}: its worker stops it within seconds\n"
        store.finish(second, "worker-words", claimed.attempt, "failed", error="stopped")
        ended = store.get_run(second)
        assert ended is not None
        status, out, _ = cli("runs", "cancel", str(second))
        assert out == f"run {second} already ended {ended.state}; nothing to cancel\n"
    finally:
        store.close()


def test_retry_of_a_run_that_cannot_be_retried_is_refused_in_words(
    cli: Pipeline, tmp_path: Path
) -> None:
    """Retrying a queued run exits 2 saying which runs can be retried, with no traceback."""
    cli("db", "upgrade")
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        store.ensure_repo("alpha", tracker="local", slug="org/alpha")
        queued = store.enqueue("alpha").run.id
    finally:
        store.close()
    status, out, err = cli("runs", "retry", str(queued))
    assert (status, out) == (2, "")
    assert err == (
        f"pipeline: run {queued} is queued; only failed, escalated, cancelled runs can be retried\n"
    )
    status, out, err = cli("runs", "retry", str(queued), "--json")
    assert (status, out) == (2, "") and "can be retried" in err


@pytest.mark.parametrize("given", ["2147483648", "99999999999999999999", "0"])
def test_an_id_no_run_can_have_exits_2_naming_the_range(
    given: str, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id past the database's integers is a usage error naming the range, not a database one."""
    config = local_alpha_config(tmp_path, database_url)
    assert main(["db", "upgrade", "--config", str(config)], io.StringIO(), io.StringIO()) == 0
    for command in (
        ("runs", "show", given),
        ("runs", "cancel", given),
        ("runs", "retry", given),
        ("issue", "label", given, "ready-for-agent"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:  # argparse's usage error
            main([*command, "--config", str(config)], io.StringIO(), io.StringIO())
        assert exited.value.code == 2, command
        assert f"must be an id from 1 to 2147483647, got '{given}'" in capsys.readouterr().err


def test_run_text_cannot_steer_the_terminal(cli: Pipeline, tmp_path: Path) -> None:
    """Escape sequences and bidi overrides in run text are shown escaped; extra lines indented."""
    from pipeline.store import EnqueueOptions, SeenIssue

    cli("db", "upgrade")
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        store.ensure_repo("alpha", tracker="local", slug="org/alpha")
        seen = SeenIssue(tracker="local", number=3, title="Fix \u202egnp.exe", author="m", url="u")
        issue = store.upsert_issue("alpha", seen)
        store.enqueue("alpha", EnqueueOptions(issue_id=issue.id))
        run = store.claim_next("worker-words", max_concurrency=1, lease_s=60.0)
        assert run is not None
        forged = "ok\n  10:00:00 UTC  #1 state     succeeded\x1b]0;owned\x07\x1b[2J\rX"
        store.append_event_fenced(run.id, "worker-words", run.attempt, "agent", forged, {})
        store.finish(run.id, "worker-words", run.attempt, "failed", error="boom\x1b[8m")
    finally:
        store.close()
    status, out, _ = cli("runs", "show", str(run.id))
    assert status == 0
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\u202e" not in out
    assert "Fix \\u202egnp.exe" in out
    assert "succeeded\\x1b]0;owned\\x07\\x1b[2J\\x0dX" in out
    agent_line = next(line for line in out.splitlines() if line.endswith(" agent     ok"))
    indent = len(agent_line) - len("ok")
    assert "\n" + " " * indent + "  10:00:00 UTC  #1 state" in out  # under the message, not a line
    assert "boom\\x1b[8m" in out and "[None]" not in out


def test_unlabel_and_close_say_when_nothing_changed(cli: Pipeline) -> None:
    """Taking off a label the issue does not carry, or closing a closed issue, exits 0 saying
    it was already so, instead of claiming a change that did not happen."""
    cli("db", "upgrade")
    cli(*ADD, "Greet")
    status, out, _ = cli("issue", "unlabel", "1", "ready-for-agent")
    assert (status, out) == (0, "issue 1 already has no label ready-for-agent: []\n")
    cli("issue", "label", "1", "ready-for-agent")
    status, out, _ = cli("issue", "label", "1", "ready-for-agent")
    assert (status, out) == (0, "issue 1 already labelled ready-for-agent: [ready-for-agent]\n")
    assert cli("issue", "close", "1")[:2] == (0, "issue 1 closed\n")
    assert cli("issue", "close", "1")[:2] == (0, "issue 1 already closed\n")


def test_retry_in_a_frozen_repo_says_the_run_waits_for_an_unfreeze(
    cli: Pipeline, tmp_path: Path
) -> None:
    """A retry queued in a frozen repo says the repo is frozen and how to unfreeze it, in
    words and in JSON; once unfrozen, a retry says nothing of it."""
    cli("db", "upgrade")
    store = Store(f"sqlite:///{tmp_path / 'history.db'}")
    try:
        store.ensure_repo("alpha", tracker="local", slug="org/alpha")
        first = store.enqueue("alpha").run.id
        store.cancel_run(first, by="alice")
        store.freeze_repo("alpha", "deploy broken", by="alice")
    finally:
        store.close()
    status, out, _ = cli("runs", "retry", str(first))
    assert status == 0 and out.startswith(f"run {first} queued as run ")
    assert "repo alpha is frozen" in out and "pipeline repos unfreeze alpha" in out
    status, out, _ = cli("runs", "retry", str(first), "--json")
    assert "pipeline repos unfreeze alpha" in json.loads(out)["note"]
