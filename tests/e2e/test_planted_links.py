"""Links the repository plants must not make the daemon read or write outside the tree.

The daemon reads and writes some files of a run's tree itself, outside the sandbox:
the repository's ``AGENTS.md``/``CLAUDE.md`` go into the prompt, and ``copy_files``
are copied in. Whoever can push to the default branch (an earlier run's agent
included) decides what those paths are: a symlink to ``/proc/self/environ`` (the
daemon's environment, tokens and all) or to a secret file the sandbox hides, or a
directory symlink that moves a copied secret to a path nothing keeps out of git.
Read from outside: the remote, the run's ending and timeline.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pipeline.testing.configs import merged, write_config
from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, one_issue
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(240)
HANG_GUARD_S = 120  # not a speed limit: how long to wait before calling the daemon hung
SECRET = "DAEMON-ONLY-SECRET-4b7e19"

# The agent hands back what it was told: its prompt, as a file the run commits.
PROMPT_AGENT = """
import pathlib, sys
prompt = pathlib.Path(sys.argv[1]).read_bytes()
(pathlib.Path(sys.argv[2]) / "seen.txt").write_bytes(prompt)
print("reported the prompt")
"""

# An agent that stages everything it sees, as agents commonly do.
COMMIT_AGENT = (
    PROMPT_AGENT
    + """
import subprocess
subprocess.run(["git", "add", "-A"], cwd=sys.argv[2], check=True)
subprocess.run(["git", "commit", "-q", "-m", "Add mul"], cwd=sys.argv[2], check=True)
"""
)


def _link_in_remote(remote: str, links: dict[str, str]) -> None:
    """Commit ``links`` (name: target) as symlinks on the remote's main."""
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "clone"
        subprocess.run(["git", "clone", "-q", remote, str(root)], check=True, capture_output=True)
        for name, target in links.items():
            (root / name).symlink_to(target)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "links")
        git(root, "push", "-q", "origin", "HEAD:refs/heads/main")


def _config(
    tmp_path: Path, remote: str, changes: dict[str, Any], script: str = PROMPT_AGENT
) -> Path:
    agent = tmp_path / "agent.py"
    agent.write_text(script)
    path = local_config(
        tmp_path, remote, [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    )
    document: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    return write_config(path, merged(document, changes))


def _everything_pushed(remote: str) -> bytes:
    """Every blob of every commit the remote holds."""
    listed = [
        line.split()[0] for line in git(Path(remote), "rev-list", "--objects", "--all").splitlines()
    ]
    return b"".join(
        subprocess.run(
            ["git", "-C", remote, "cat-file", "-p", name], check=True, capture_output=True
        ).stdout
        for name in listed
    )


@pytest.mark.parametrize("target", ["environ", "secret_file"])
def test_instructions_linked_out_of_the_tree_are_not_read_into_the_prompt(
    tmp_path: Path, cli_env: dict[str, str], target: str
) -> None:
    """``AGENTS.md`` is a symlink to the daemon's own environment or to a secret file the
    sandbox hides: the prompt does not carry it, and the timeline says the file was
    skipped (before, the daemon read the target into the prompt: the agent read the
    daemon's tokens and pushed them)."""
    secret_file = tmp_path / "operator" / "tracker-token"
    secret_file.parent.mkdir()
    secret_file.write_text(SECRET)
    cli_env["AFK_TEST_SENTINEL"] = SECRET
    linked = "/proc/self/environ" if target == "environ" else str(secret_file)
    remote = make_remote(tmp_path, {**PROJECT, "CLAUDE.md": "Keep functions small.\n"})
    _link_in_remote(remote, {"AGENTS.md": linked})
    run, shown = one_issue(Cli(_config(tmp_path, remote, {}), cli_env), tmp_path, HANG_GUARD_S)
    assert run["state"] == "succeeded", run
    seen = git(Path(remote), "show", "main:seen.txt")
    assert "Keep functions small." in seen  # the regular instructions still come through
    assert SECRET.encode() not in _everything_pushed(remote)
    skipped = [e["message"] for e in shown["events"] if "AGENTS.md" in e["message"]]
    assert skipped and "outside the repository" in skipped[0], shown["events"]


def test_copy_files_through_a_directory_symlink_is_refused(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The repository makes ``config`` a symlink to ``app``: a secret copied to
    ``config/local.env`` would land in ``app/local.env``, a path git does not exclude
    and the copied-file check does not look at, so an agent's ``git add -A`` committed
    it and it was pushed.
    The run is refused before the agent starts, saying why; nothing is pushed."""
    source = tmp_path / "operator" / "local.env"
    source.parent.mkdir()
    source.write_text(SECRET)
    remote = make_remote(tmp_path, PROJECT)
    _link_in_remote(remote, {"config": "app"})
    initial = git(Path(remote), "rev-parse", "main").strip()
    copied = {"repos": {"calc": {"copy_files": [{"from": str(source), "to": "config/local.env"}]}}}
    config = _config(tmp_path, remote, copied, COMMIT_AGENT)
    run, _ = one_issue(Cli(config, cli_env), tmp_path, HANG_GUARD_S)
    assert SECRET.encode() not in _everything_pushed(remote)
    assert git(Path(remote), "rev-parse", "main").strip() == initial
    assert run["state"] in ("failed", "escalated"), run
    assert "config/local.env" in run["error"] and "symlink" in run["error"], run


def test_a_symlinked_afk_toml_is_not_followed(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """``.afk.toml`` is read from git's objects, never from the disk: a symlink to a file
    outside the tree (here one that would set the prompt) is reported as not a regular
    file, and nothing of its target reaches the prompt or the timeline."""
    secret_file = tmp_path / "operator" / "settings.toml"
    secret_file.parent.mkdir()
    secret_file.write_text(f'prompt = "{SECRET}"\n')
    remote = make_remote(tmp_path, PROJECT)
    _link_in_remote(remote, {".afk.toml": str(secret_file)})
    run, shown = one_issue(Cli(_config(tmp_path, remote, {}), cli_env), tmp_path, HANG_GUARD_S)
    assert run["state"] == "succeeded", run
    assert SECRET.encode() not in _everything_pushed(remote)
    messages = [e["message"] for e in shown["events"]]
    assert any(".afk.toml: not a regular file" in m for m in messages), messages
    assert not any(SECRET in m for m in messages)
