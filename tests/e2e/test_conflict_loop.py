"""The daemon hands a rebase conflict to the agent: a colleague pushes during the run."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from pipeline.testing.gitrepos import commit_to_remote, git, make_remote

from .conftest import Cli, local_config, stop_daemon

PROJECT = {
    "app/__init__.py": "",
    "app/calc.py": "def add(a, b):\n    return a + b\n",
    "test_calc.py": (
        "import unittest\nfrom app.calc import add\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    ),
}
ADD = "def add(a, b):\n    return a + b\n"
MUL = "\n\ndef mul(a, b):\n    return a * b\n"
SUB = "\n\ndef sub(a, b):\n    return a - b\n"

# The first invocation adds mul() and, before it finishes, has a colleague push
# sub() to the same spot (the colleague is outside the sandbox: the test, told
# through the agent's HOME); the second (the conflict prompt) rebases and keeps both.
AGENT = f"""
import os, pathlib, subprocess, sys, time
prompt = pathlib.Path(sys.argv[1]).read_text()
wd, home = pathlib.Path(sys.argv[2]), pathlib.Path(os.environ["HOME"])
if "no longer applies" not in prompt:
    (wd / "app" / "calc.py").write_text({ADD + MUL!r})
    (wd / "test_mul.py").write_text(
        "import unittest\\nfrom app.calc import mul\\n\\n\\nclass T(unittest.TestCase):\\n"
        "    def test_mul(self):\\n        self.assertEqual(mul(2, 3), 6)\\n")
    (home / "colleague-please").write_text("push sub now")
    while not (home / "colleague-done").exists():
        time.sleep(0.05)
    print("added mul; meanwhile a colleague pushed sub")
else:
    subprocess.run(["git", "rebase", "origin/main"], cwd=wd)
    (wd / "app" / "calc.py").write_text({ADD + SUB + MUL!r})
    subprocess.run(["git", "add", "app/calc.py"], cwd=wd, check=True)
    subprocess.run(["git", "rebase", "--continue"], cwd=wd, check=True)
    print("kept both sub and mul")
"""


def _colleague(home: Path, remote: str) -> None:
    """Push sub() to the remote when the agent asks (it cannot reach the remote itself)."""
    deadline = time.monotonic() + 60
    while not (home / "colleague-please").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    commit_to_remote(remote, {"app/calc.py": ADD + SUB}, "colleague adds sub")
    (home / "colleague-done").write_text("pushed")


def test_conflict_during_the_run_is_resolved_by_the_agent(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The colleague's sub() and the run's mul() both reach main; the timeline shows how."""
    remote = make_remote(tmp_path, PROJECT)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    argv = [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    config = local_config(tmp_path, remote, argv)
    cli = Cli(config, cli_env)
    cli("db", "upgrade")
    cli("issue", "add", "--repo", "calc", "--title", "Add mul", "--label", "ready-for-agent")
    log = tmp_path / "daemon.log"
    colleague = threading.Thread(
        target=_colleague, args=(tmp_path / "volume" / "homes" / "calc", remote), daemon=True
    )
    colleague.start()
    daemon = cli.daemon(log)
    try:
        runs = cli.wait_for(
            lambda rs: bool(rs) and rs[0]["state"] in ("succeeded", "escalated"), 60, daemon, log
        )
    finally:
        assert stop_daemon(daemon) == 0, log.read_text()[-3000:]
    shown = cli("runs", "show", str(runs[0]["id"])).stdout
    assert runs[0]["state"] == "succeeded", shown
    calc = git(Path(remote), "show", "main:app/calc.py")
    assert calc == ADD + SUB + MUL
    files = git(Path(remote), "show", "--name-only", "--format=", "main").split()
    assert sorted(files) == ["app/calc.py", "test_mul.py"]
    assert git(Path(remote), "log", "-1", "--format=%s", "main~1").strip() == "colleague adds sub"
    assert f"Afk-Run: {runs[0]['id']}" in git(Path(remote), "log", "-1", "--format=%B", "main")
    for line in (
        "rebase conflict",
        "the agent resolved the conflict",
        "kept both sub and mul",
        "added mul; meanwhile a colleague pushed sub",
    ):
        assert line in shown, line
