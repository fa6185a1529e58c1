"""What a newcomer types wrong gets one line naming what and where, exit 2, no traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli.main import main
from tests.integration.test_cli_words import ADD, Pipeline, local_alpha_config


@pytest.fixture
def cli(tmp_path: Path) -> Pipeline:
    """A config with one local-tracker repo ``alpha``, its SQLite history at the latest schema."""
    pipeline = Pipeline(local_alpha_config(tmp_path, f"sqlite:///{tmp_path / 'history.db'}"))
    assert pipeline("db", "upgrade")[0] == 0
    return pipeline


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``pipeline ARGV``'s argparse refusal: it exits 2; its last line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(argv), io.StringIO(), io.StringIO())
    assert exited.value.code == 2, argv
    return capsys.readouterr().err.splitlines()[-1]


def test_a_malformed_database_url_option_is_named_without_a_traceback(tmp_path: Path) -> None:
    """`--database-url` is checked as PIPELINE_DATABASE_URL is: a URL SQLAlchemy cannot read,
    or a scheme the store does not speak, is one line naming the option, exit 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINE_")}
    env["PIPELINE_DATA_DIR"] = str(tmp_path / "data")
    for url in ("sqlite://history.db", "postgres://afk@db.example/afk", "mysql://afk@db/afk"):
        done = subprocess.run(
            [sys.executable, "-m", "pipeline", "runs", "list", "--database-url", url],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=False,
        )
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr == (
            f"--database-url: must start with sqlite:/// or postgresql://, got {url!r}\n"
        )


def test_the_database_url_option_is_checked_and_applied_by_config_commands(
    cli: Pipeline, tmp_path: Path
) -> None:
    """`config show` and `config check` take `--database-url` as every command does: shown as
    the effective database, refused when malformed, its directory checked."""
    status, out, _ = cli("config", "show", "--database-url", "sqlite:////srv/afk/history.db")
    assert status == 0 and 'database_url = "sqlite:////srv/afk/history.db"' in out
    status, _, err = cli("config", "check", "--static", "--database-url", "sqlite://x.db")
    assert status == 2 and err.startswith("--database-url: must start with sqlite:///")
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    status, _, err = cli("config", "check", "--database-url", f"sqlite:///{blocker}/h.db")
    assert status == 2 and f"{blocker} is not a directory" in err


def test_the_demo_refuses_a_malformed_database_url_before_it_builds_anything(
    tmp_path: Path,
) -> None:
    err = io.StringIO()
    argv = ["demo", "--dir", str(tmp_path / "demo"), "--database-url", "sqlite://x.db"]
    assert main(argv, io.StringIO(), err) == 2
    assert err.getvalue().startswith("--database-url: must start with sqlite:///")
    assert not (tmp_path / "demo").exists()


def test_a_repo_filter_accepts_an_enrolled_repo_before_its_first_run(cli: Pipeline) -> None:
    """`--repo` of an enrolled repo the daemon has not seen yet is an empty answer, not a
    refusal; an unknown one exits 2 naming the known repos, for runs and for local issues."""
    assert cli("runs", "list", "--repo", "alpha")[:2] == (0, cli("runs", "list")[1])
    assert cli("issue", "list", "--repo", "alpha")[0] == 0
    for command in (("runs", "list"), ("issue", "list")):
        status, out, err = cli(*command, "--repo", "alpah")
        assert (status, out) == (2, "")
        assert err == "pipeline: --repo alpah: no such repo (known: alpha)\n"


def test_an_unknown_state_lists_the_states_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "runs", "list", "--state", "done")
    assert line.endswith(
        "invalid choice: 'done' (choose from 'queued', 'retry_wait', "
        "'preparing', 'implementing', 'testing', 'publishing', 'watching', "
        "'succeeded', 'failed', 'escalated', 'cancelled')"
    )


def test_a_bare_command_group_lists_its_own_commands_on_stderr() -> None:
    """`pipeline runs` exits 2 and shows what `runs` offers, not the top-level help."""
    for group, commands in (
        ("runs", ("list", "show", "cancel", "retry", "export")),
        ("repos", ("list", "freeze", "unfreeze")),
        ("issue", ("add", "label", "unlabel", "close", "list")),
        ("db", ("upgrade", "prune")),
        ("config", ("check", "show", "schema")),
    ):
        out, err = io.StringIO(), io.StringIO()
        assert main([group], out, err) == 2
        assert out.getvalue() == ""
        assert err.getvalue().startswith(f"usage: pipeline {group} ")
        assert all(f"\n    {command} " in err.getvalue() for command in commands), group


@pytest.mark.parametrize("label", ["", " ", "ready-for-agent ", " ready-for-agent"])
def test_a_blank_or_padded_label_is_refused(
    cli: Pipeline, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    """A label the tracker would never match (blank, or with surrounding spaces) exits 2,
    naming the argument; nothing is added."""
    config = str(cli.config)
    line = usage_error(capsys, *ADD, "t", "--label", label, "--config", config)
    assert "argument --label: must not" in line
    assert cli(*ADD, "t")[1] == "issue 1 added to alpha\n"  # the first issue added
    line = usage_error(capsys, "issue", "label", "1", label, "--config", config)
    assert "argument label: must not" in line
    assert "[]" in cli("issue", "unlabel", "1", "ready-for-agent")[1]


def test_a_blank_title_is_refused(cli: Pipeline, capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, *ADD, " ", "--config", str(cli.config))
    assert line.endswith("argument --title: must not be empty")


def test_freeze_and_unfreeze_need_a_note_that_says_something(cli: Pipeline) -> None:
    """As `escalations ack`, a blank --note is refused: the record says who did it and why."""
    status, out, err = cli("repos", "freeze", "alpha", "--note", " ")
    assert (status, out, err) == (
        2,
        "",
        "pipeline: --note: say why (it is recorded with who did it)\n",
    )
    assert "active" in cli("repos", "list")[1]
    assert cli("repos", "freeze", "alpha", "--note", "deploy broken")[0] == 0
    status, _, err = cli("repos", "unfreeze", "alpha", "--note", "")
    assert (
        status == 2
        and err == "pipeline: --note: say what was done (it is recorded with who did it)\n"
    )
    assert "frozen" in cli("repos", "list")[1]


def test_a_config_file_from_the_environment_is_named_with_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PIPELINE_CONFIG naming a file that is not there says so: the user did not type it."""
    missing = tmp_path / "gone.toml"
    monkeypatch.setenv("PIPELINE_CONFIG", str(missing))
    err = io.StringIO()
    assert main(["runs", "list"], io.StringIO(), err) == 2
    assert err.getvalue() == (
        f"PIPELINE_CONFIG: {missing}: cannot read the file: No such file or directory\n"
    )


def test_an_option_a_command_does_not_take_is_refused_by_that_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pipeline runs export … --json` names `runs export` and shows its usage, the options
    it does take, rather than the top level's."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["runs", "export", "--since", "1d", "--json"], io.StringIO(), io.StringIO())
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: pipeline runs export ") and "--format" in err
    assert err.endswith("pipeline runs export: error: unrecognized arguments: --json\n")
    line = usage_error(capsys, "escalations", "ack", "1", "--note", "x", "--al")
    assert line == "pipeline escalations ack: error: unrecognized arguments: --al"


def test_a_data_directory_that_cannot_be_made_is_named_as_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A volume nobody configured lives in the data directory: when it cannot be made,
    `config check` says PIPELINE_DATA_DIR is where to look, not only the key never set."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(blocker / "data"))
    config = tmp_path / "pipeline.toml"
    config.write_text("", encoding="utf-8")
    err = io.StringIO()
    assert main(["config", "check", str(config)], io.StringIO(), err) == 2
    assert err.getvalue().splitlines() == [
        f"{config}:{key}: {where} does not exist and cannot be created in {blocker} "
        f"(under PIPELINE_DATA_DIR; set PIPELINE_DATA_DIR or {key} to a writable place)"
        for key, where in (
            ("volume", blocker / "data" / "volume"),
            ("database_url", blocker / "data"),
        )
    ]


def test_export_help_names_every_time_form_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """`runs export --since today` works, as for `runs list`: its help says so too."""
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["runs", "export", "--help"], io.StringIO(), io.StringIO())
    shown = " ".join(capsys.readouterr().out.split())
    assert "--since SINCE created at or after: an ISO time, an age (30m, 2h, 7d), today" in shown
    assert "--until UNTIL created before: an ISO time, an age (30m, 2h, 7d), today" in shown


@pytest.mark.parametrize("argv", [["runs", "list"], ["escalations"], ["db", "upgrade"]])
def test_commands_that_open_the_history_name_the_data_directory_they_cannot_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """The commands that open the history without a `config check` say the same."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(blocker / "data"))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    monkeypatch.delenv("PIPELINE_CONFIG", raising=False)
    err = io.StringIO()
    assert main(argv, io.StringIO(), err) == 2
    assert (
        err.getvalue()
        .strip()
        .endswith(
            "(under PIPELINE_DATA_DIR; set PIPELINE_DATA_DIR or database_url to a writable place)"
        )
    )
