"""FIFOs, sockets and devices the agent leaves in its tree never block the daemon's git.

Git opens ``.gitattributes`` and ``.gitignore`` wherever it looks. Right after the
agent, the daemon's git (unconfined) lists the new files and stages the changed ones;
at the next run it resets the warm slot with ``checkout --force``. A FIFO by one of
those names blocked each of them until git's time limit: the run stalled ten minutes,
and a slot that kept the FIFO stalled every later run of the repo. Read from outside:
the FIFOs (did any reader open them?), the remote, the run's timeline, the slot.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from pipeline.testing.gitrepos import git, make_remote

from .conftest import ENDED, Cli, FifoWatch, local_config, one_issue, stop_daemon
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(240)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

# Adds a module and an untracked directory, and leaves a FIFO ``.gitattributes``, a FIFO
# ``sub/.gitignore``, a FIFO in place of a tracked file, a socket, and (where the sandbox
# allows one) a device node.
LEAVER = """
import os, pathlib, socket, stat, sys
wd = pathlib.Path(sys.argv[2])
home = pathlib.Path(os.environ["HOME"])
(wd / "app" / "added.py").write_text("X = 1\\n")
(wd / "sub").mkdir()
(wd / "sub" / "notes.txt").write_text("notes\\n")
os.mkfifo(wd / ".gitattributes")
os.mkfifo(wd / "sub" / ".gitignore")
(wd / "docs" / "old.txt").unlink()
os.mkfifo(wd / "docs" / "old.txt")
os.chdir(wd / "app")  # a relative name: a socket's path is short
socket.socket(socket.AF_UNIX).bind("agent.sock")
try:
    os.mknod(wd / "app" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    made = "device made"
except OSError as exc:
    made = f"device refused: {exc.strerror}"
(home / "made.txt").write_text(made)
print("added a module;", made)
"""


def _slot(tmp_path: Path) -> Path:
    return tmp_path / "volume" / "repos" / "local" / "demo" / "calc" / "worktrees" / "slot-0"


def _specials(tree: Path) -> list[str]:
    """Every FIFO, socket or device under ``tree``, found by ``lstat``."""
    found = []
    for directory, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            mode = os.lstat(Path(directory) / name).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                found.append(str((Path(directory) / name).relative_to(tree)))
    return found


def _config(tmp_path: Path, script: str) -> tuple[Path, str]:
    remote = make_remote(tmp_path, {**PROJECT, "docs/old.txt": "old\n"})
    agent = tmp_path / "agent.py"
    agent.write_text(script)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    return local_config(tmp_path, remote, argv), remote


def test_fifos_the_agent_leaves_never_block_the_daemons_git(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The run ships the module and the new directory, and nothing of the daemon ever
    opened the FIFOs; the FIFO that replaced a tracked file is gone, and so is the file
    from the commit, as an ``rm`` would have it; the timeline names what was removed,
    and the slot keeps none of them. Before, the daemon's ``ls-files`` and ``add -u``
    opened the FIFOs and waited for a writer until git's time limit."""
    config, remote = _config(tmp_path, LEAVER)
    cli = Cli(config, cli_env)
    slot = _slot(tmp_path)
    with FifoWatch(slot / ".gitattributes", slot / "sub" / ".gitignore") as watch:
        run, shown = one_issue(cli, tmp_path, HANG_GUARD_S)
    made = tmp_path / "volume" / "homes" / "calc" / "made.txt"
    assert made.exists(), "the agent made no FIFO: the test shows nothing"
    assert not watch.readers, f"the daemon's git opened {[str(p) for p in watch.readers]}"
    assert run["state"] == "succeeded", shown
    tracked = git(Path(remote), "ls-tree", "-r", "--name-only", "main").split()
    assert {"app/added.py", "sub/notes.txt"} <= set(tracked), tracked
    assert not {".gitattributes", "sub/.gitignore", "app/agent.sock", "app/null"} & set(tracked)
    assert "docs/old.txt" not in tracked
    assert _specials(slot) == []
    [removed] = [e for e in shown["events"] if e["message"].startswith("removed ")]
    assert "'.gitattributes'" in removed["message"] and "'sub/.gitignore'" in removed["message"]
    assert "'app/agent.sock'" in removed["message"] and "'docs/old.txt'" in removed["message"]
    if made.read_text() == "device made":  # no sandbox would let it (no CAP_MKNOD)
        assert "'app/null'" in removed["message"]


# The first attempt leaves a FIFO ``.gitattributes`` and waits to be killed with the
# daemon; the next one (after the restart, in the same warm slot) adds a module.
KILLED = """
import os, pathlib, sys, time
wd = pathlib.Path(sys.argv[2])
home = pathlib.Path(os.environ["HOME"])
state = home / "ran-once"
if not state.exists():
    state.write_text("1")
    os.mkfifo(wd / ".gitattributes")
    (home / "made.txt").write_text("made")
    time.sleep(600)
(wd / "app" / "added.py").write_text("X = 1\\n")
print("added a module")
"""


def test_a_fifo_left_in_the_slot_by_a_killed_daemon_does_not_poison_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The daemon is killed while its agent holds a FIFO ``.gitattributes`` in the warm
    slot; after the restart the run ships from that slot, and nothing of the daemon
    opened the FIFO. Before, the slot's reset (``checkout --force``) opened it and
    waited until git's time limit, a retryable error: every attempt of every later run
    reusing the slot stalled the same way."""
    config, remote = _config(tmp_path, KILLED)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add", "--label", "ready-for-agent")
    made = tmp_path / "volume" / "homes" / "calc" / "made.txt"
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(log)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not made.exists() and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.2)
        assert made.exists(), log.read_text(errors="replace")[-3000:]
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()
    fifo = _slot(tmp_path) / ".gitattributes"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "no FIFO left in the slot: the test shows nothing"
    with FifoWatch(fifo) as watch:
        daemon = cli.daemon(tmp_path / "daemon-2.log")
        try:
            runs = cli.wait_for(
                lambda rs: bool(rs) and rs[0]["state"] in ENDED,
                HANG_GUARD_S * 2,
                daemon,
                tmp_path / "daemon-2.log",
            )
        finally:
            stop_daemon(daemon)
    assert not watch.readers, f"the daemon's git opened {[str(p) for p in watch.readers]}"
    assert runs[0]["state"] == "succeeded", runs
    assert git(Path(remote), "show", "main:app/added.py").strip() == "X = 1"
    assert _specials(_slot(tmp_path)) == []
