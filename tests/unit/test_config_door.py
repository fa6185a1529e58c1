"""Refused at the door: what the daemon needs is checked by `config check` and `run` first."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest

from pipeline.cli.config import check_command
from pipeline.cli.main import main
from pipeline.config.door import door_problems
from pipeline.config.load import load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "pipeline.example.toml"
# Every secret the example refers to by environment variable.
EXAMPLE_SECRETS = (
    "GITHUB_TOKEN",
    "GITHUB_WEBHOOK_SECRET",
    "PIPELINE_API_TOKEN",
    "PIPELINE_NOTIFY_URLS",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "WEB_GIT_CRYPT_KEY",
    "WOODPECKER_TOKEN",
)
EXAMPLE_AGENTS = ("claude", "codex", "aider")  # the programs its agents run
REPO = '[repos.web]\ntracker = "local"\nslug = "o/web"\nremote_url = "web.git"\n'


def example_copy(tmp_path: Path) -> Path:
    """The example config in its own directory, with the key file and the local remote it
    names, and the programs of its agents in ``conf/bin`` (``cli_env`` puts them on PATH)."""
    config = tmp_path / "conf" / "pipeline.toml"
    (config.parent / "secrets").mkdir(parents=True)
    notes = config.parent / "repos" / "notes.git"
    subprocess.run(["git", "init", "-q", "--bare", str(notes)], check=True)
    shutil.copy(EXAMPLE, config)
    (config.parent / "secrets" / "web-deploy-key").write_text("key\n", encoding="utf-8")
    (config.parent / "bin").mkdir()
    for program in EXAMPLE_AGENTS:
        (config.parent / "bin" / program).write_text("#!/bin/sh\n", encoding="utf-8")
        (config.parent / "bin" / program).chmod(0o755)
    return config


def cli_env(config: Path, unset: tuple[str, ...] = ()) -> dict[str, str]:
    """This environment without PIPELINE_* overrides, with the example's secrets set and
    its agents' programs on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINE_")}
    env |= {name: f"value-of-{name.lower()}" for name in EXAMPLE_SECRETS}
    env["PATH"] = f"{config.parent / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    return {k: v for k, v in env.items() if k not in unset}


def pipeline(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_check_names_the_unset_token_and_run_stops_before_the_database(tmp_path: Path) -> None:
    """Example config, GITHUB_TOKEN unset: check and run exit 2 naming token_env; no database."""
    config = example_copy(tmp_path)
    line = f"{config}:trackers.github.token_env: the environment variable GITHUB_TOKEN is not set"
    env = cli_env(config, unset=("GITHUB_TOKEN",))
    checked = pipeline("config", "check", str(config), env=env)
    assert (checked.returncode, checked.stderr.splitlines(), checked.stdout) == (2, [line], "")
    ran = pipeline("run", "--config", str(config), "--no-http", env=env)
    assert (ran.returncode, ran.stderr.splitlines(), ran.stdout) == (2, [line], "")
    assert not (config.parent / "data").exists()


def test_show_output_loads_back_and_passes_check(tmp_path: Path) -> None:
    """`config show FILE > out.toml && config check out.toml` passes for the example."""
    config = example_copy(tmp_path)
    shown = pipeline("config", "show", str(config), env=cli_env(config))
    assert shown.returncode == 0, shown.stderr
    out = tmp_path / "out.toml"
    out.write_text(shown.stdout, encoding="utf-8")
    checked = pipeline("config", "check", str(out), env=cli_env(config))
    assert checked.returncode == 0, checked.stderr
    again = dataclasses.replace(load_settings(out, environ={}), source=None)
    assert again == dataclasses.replace(load_settings(config, environ={}), source=None)


def test_an_agent_program_missing_from_path_is_refused_before_any_run(tmp_path: Path) -> None:
    """The example with `aider` not installed: check and run exit 2 naming the agent's
    command, once, with the repos that use it; nothing is queued that would fail three
    times at the first issue with "No such file or directory"."""
    config = example_copy(tmp_path)
    (config.parent / "bin" / "aider").unlink()
    env = cli_env(config)
    checked = pipeline("config", "check", str(config), env=env)
    [line] = checked.stderr.splitlines()
    assert checked.returncode == 2
    assert line.startswith(f"{config}:agents.aider.command: 'aider' is not found on PATH")
    assert line.endswith("(used by repos.notes)")
    ran = pipeline("run", "--config", str(config), "--no-http", env=env)
    assert (ran.returncode, ran.stderr.splitlines()) == (2, [line])
    (config.parent / "bin" / "aider").write_text("not executable\n", encoding="utf-8")
    assert pipeline("config", "check", str(config), env=env).returncode == 2
    assert pipeline("config", "check", "--static", str(config), env=env).returncode == 0


def test_schema_validates_the_example_and_refuses_a_typo() -> None:
    """`config schema` prints a JSON Schema the example passes and an unknown key fails."""
    done = pipeline("config", "schema", env=cli_env(EXAMPLE))
    schema = json.loads(done.stdout)
    example = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    jsonschema.validate(example, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**example, "max_concurency": 3}, schema)


BAD: list[tuple[str, str, str]] = [
    ("nan lease", "[scheduler]\nlease_s = nan\n", "scheduler.lease_s: must be a finite number"),
    ("inf timeout", "[scheduler]\nrun_timeout_s = inf\n", "scheduler.run_timeout_s: must be a"),
    ("huge concurrency", "max_concurrency = 100000000\n", "max_concurrency: must be a number <="),
    ("negative interval", "poll_interval_s = -1\n", "poll_interval_s: must be a number >"),
    (
        "label with spaces",
        '[trackers.gh]\nkind = "github"\nready_label = " ready-for-agent "\n',
        "trackers.gh.ready_label: must be a label without surrounding whitespace",
    ),
    (
        "branch read as an option",
        REPO + 'default_branch = "--upload-pack=touch /tmp/pwned"\n',
        "repos.web.default_branch: must be a branch name git accepts",
    ),
    (
        "remote read as an option",
        '[repos.web]\ntracker = "local"\nslug = "o/web"\nremote_url = "--upload-pack=x"\n',
        "repos.web.remote_url: must be a git URL with a host or a path",
    ),
    ("deep array", "x = " + "[" * 500 + "]" * 500 + "\n", ": invalid TOML: "),
    (
        "unset token",
        '[trackers.gh]\nkind = "github"\ntoken_env = "AFK_TEST_UNSET_TOKEN"\n',
        "trackers.gh.token_env: the environment variable AFK_TEST_UNSET_TOKEN is not set",
    ),
    (
        "token file is a directory",
        '[trackers.gh]\nkind = "github"\ntoken_file = "."\n',
        "trackers.gh.token_file: {dir} is a directory, not a file",
    ),
    (
        "missing token file",
        '[notify]\nurls_file = "absent"\n',
        "notify.urls_file: cannot read {dir}/absent: No such file or directory",
    ),
    (
        "volume under a file",
        'volume = "a-file/volume"\n',
        "volume: {dir}/a-file/volume does not exist and cannot be created in {dir}/a-file",
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_value_is_refused_with_its_key(tmp_path: Path, text: str, expected: str) -> None:
    """Each bad value: exit 2, one line naming the file and key, no traceback."""
    path = tmp_path / "pipeline.toml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert check_command(path, out, err) == 2
    (line,) = err.getvalue().splitlines()
    assert line.startswith(f"{path}:") and expected.format(dir=tmp_path) in line
    assert out.getvalue() == "" and "Traceback" not in line


def test_run_creates_a_configured_volume(tmp_path: Path) -> None:
    """A configured volume that does not exist yet is created at the door, not refused."""
    path = tmp_path / "pipeline.toml"
    path.write_text('volume = "new/volume"\n', encoding="utf-8")
    settings = load_settings(path, environ={})
    assert door_problems(settings, environ={}) == [] and not (tmp_path / "new").exists()
    assert door_problems(settings, environ={}, create=True) == []
    assert (tmp_path / "new" / "volume").is_dir()


def test_a_volume_that_cannot_be_made_is_refused_not_a_traceback(tmp_path: Path) -> None:
    """A volume where no directory can be made (under /proc, which even root cannot write
    though access() says it may) is one `FILE:volume:` line, not a traceback."""
    path = tmp_path / "pipeline.toml"
    path.write_text('volume = "/proc/afk-volume"\n', encoding="utf-8")
    settings = load_settings(path, environ={})
    [problem] = door_problems(settings, environ={}, create=True)
    assert problem.startswith(f"{path}:volume: ") and "/proc/afk-volume" in problem


def test_issue_body_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    """`issue add --body-file` with non-UTF-8 bytes: exit 2 and a one-line reason."""
    config = tmp_path / "pipeline.toml"
    config.write_text(REPO, encoding="utf-8")
    body = tmp_path / "body.txt"
    body.write_bytes(b"caf\xe9 \xff\n")
    out, err = io.StringIO(), io.StringIO()
    argv = ["issue", "add", "--config", str(config), "--repo", "web", "--title", "t"]
    assert main([*argv, "--body-file", str(body)], out, err) == 2
    reason = "not UTF-8 text (byte 3); save the file as UTF-8"
    assert err.getvalue() == f"pipeline: --body-file {body}: {reason}\n"


def _one_repo(tmp_path: Path, remote: str) -> tuple[Path, dict[str, str]]:
    """A config whose one repo ``web`` has ``remote``, its agent installed, its volume
    and database under ``tmp_path``; and an environment without PIPELINE_* overrides."""
    config = tmp_path / "pipeline.toml"
    config.write_text(
        'volume = "volume"\ndatabase_url = "sqlite:///history.db"\n'
        f'[agents.sh]\nkind = "command"\ncommand = ["{sys.executable}", "{{prompt_file}}"]\n'
        f'[repos.web]\ntracker = "local"\nslug = "o/web"\nagent = "sh"\nremote_url = "{remote}"\n',
        encoding="utf-8",
    )
    return config, {k: v for k, v in os.environ.items() if not k.startswith("PIPELINE_")}


NOT_A_REMOTE = [
    ("missing path", "web.git", "{dir}/web.git does not exist"),
    ("missing file url", "file://{dir}/gone.git", "{dir}/gone.git does not exist"),
    ("plain directory", "{dir}/plain", "{dir}/plain is not a git repository"),
    ("a file", "{dir}/plain/notes.txt", "{dir}/plain/notes.txt is not a git repository"),
]


@pytest.mark.parametrize(
    ("remote", "problem"), [c[1:] for c in NOT_A_REMOTE], ids=[c[0] for c in NOT_A_REMOTE]
)
def test_a_local_remote_that_is_no_repository_is_refused_before_any_run(
    tmp_path: Path, remote: str, problem: str
) -> None:
    """A repo's remote_url that is a local path (or file:// URL) to nothing, or to no git
    repository: check and run exit 2 with one line naming the key and the path, before the
    database is touched. Both accepted it, and every run of that repo failed at its clone."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("no repository\n", encoding="utf-8")
    config, env = _one_repo(tmp_path, remote.format(dir=tmp_path))
    line = f"{config}:repos.web.remote_url: local remote {problem.format(dir=tmp_path)}"
    checked = pipeline("config", "check", str(config), env=env)
    assert (checked.returncode, checked.stderr.splitlines(), checked.stdout) == (2, [line], "")
    ran = pipeline("run", "--config", str(config), "--no-http", env=env)
    assert (ran.returncode, ran.stderr.splitlines(), ran.stdout) == (2, [line], "")
    assert not (tmp_path / "history.db").exists()


REMOTES = [
    ("bare repository", "{dir}/bare.git"),
    ("bare repository by file url", "file://{dir}/bare.git"),
    ("bare repository without its .git", "{dir}/bare"),
    ("working copy", "{dir}/work"),
    ("https", "https://git.invalid/o/web.git"),
    ("ssh", "ssh://git@git.invalid/o/web.git"),
    ("scp-like", "git@git.invalid:o/web.git"),
]


@pytest.mark.parametrize("remote", [c[1] for c in REMOTES], ids=[c[0] for c in REMOTES])
def test_a_repository_or_a_network_remote_passes_the_door(tmp_path: Path, remote: str) -> None:
    """A local bare repository or working copy (as git clone finds it: ``PATH``,
    ``PATH/.git``, ``PATH.git``) passes; a network remote is left to the clone to reach."""
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "bare.git")], check=True)
    subprocess.run(["git", "init", "-q", str(tmp_path / "work")], check=True)
    config, env = _one_repo(tmp_path, remote.format(dir=tmp_path))
    checked = pipeline("config", "check", str(config), env=env)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stderr
