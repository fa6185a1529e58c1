"""The test gate sees what is pushed: files an agent made that git ignores are not tested.

Nothing git ignores is committed. An agent whose change needs such a file (one it hid
with its own ``.gitignore`` line, or a module under a directory the repo ignores, such
as ``lib/`` in the usual Python ``.gitignore``) had its tests pass in the run's tree
and a commit pushed without the file: a broken default branch. Read from outside: the
remote, the run's ending and timeline.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from pipeline.testing.configs import write_config
from pipeline.testing.gitrepos import git, make_remote

from .conftest import Cli, local_config, one_issue
from .test_local_loop import PROJECT

pytestmark = pytest.mark.timeout(180)
HANG_GUARD_S = 90  # not a speed limit: how long to wait before calling the daemon hung

HIDING_AGENT = """
import pathlib, sys
wd = pathlib.Path(sys.argv[2])
ignore = wd / ".gitignore"
if "hidden.py" not in ignore.read_text():
    ignore.write_text(ignore.read_text() + "hidden.py\\n")
(wd / "hidden.py").write_text("def mul(a, b):\\n    return a * b\\n")
(wd / ".cache-of-mine").mkdir(exist_ok=True)
(wd / ".cache-of-mine" / "x").write_text("x")
calc = wd / "app" / "calc.py"
if "from hidden import mul" not in calc.read_text():
    with open(calc, "a") as f:
        f.write("\\nfrom hidden import mul\\n")
(wd / "test_mul.py").write_text(
    "import unittest\\nfrom app.calc import mul\\n\\n\\nclass T(unittest.TestCase):\\n"
    "    def test_mul(self):\\n        self.assertEqual(mul(2, 3), 6)\\n")
print("done")
"""


def test_a_file_the_agent_hid_from_git_is_not_there_for_the_tests(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The agent hides the module its change imports with a ``.gitignore`` line: the gate
    runs without it (the timeline says it went), goes red, and nothing is pushed. The
    tests passed in the run's tree, and main got a commit importing a missing module."""
    remote = make_remote(tmp_path, {**PROJECT, ".gitignore": ".cache-of-mine/\n"})
    initial = git(Path(remote), "rev-parse", "main").strip()
    agent = tmp_path / "agent.py"
    agent.write_text(HIDING_AGENT)
    config = local_config(
        tmp_path, remote, [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    )
    document = tomllib.loads(config.read_text())
    document["repos"]["calc"]["max_fix_iterations"] = 1
    write_config(config, document)
    run, shown = one_issue(Cli(config, cli_env), tmp_path, HANG_GUARD_S)
    assert (run["state"], run["error_class"]) == ("escalated", "tests_red"), run
    assert "No module named 'hidden'" in run["error"]
    assert git(Path(remote), "rev-parse", "main").strip() == initial
    removed = [e["message"] for e in shown["events"] if "git ignores" in e["message"]]
    assert removed and "hidden.py" in removed[0], [e["message"] for e in shown["events"]]
    assert ".cache-of-mine/" in removed[0]


LOUD_NAME_AGENT = """
import pathlib, sys
wd = pathlib.Path(sys.argv[2])
(wd / ("x" * 200 + "\\x1b[2J\\x07\\nforged line.log")).write_text("noise")
calc = wd / "app" / "calc.py"
calc.write_text(calc.read_text() + "\\n\\ndef mul(a, b):\\n    return a * b\\n")
print("done")
"""


def test_the_ignored_names_the_agent_chose_are_shown_cut_and_escaped(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The agent leaves an ignored file whose name is 200 characters of padding, a terminal
    escape, a bell and a line break: the timeline names it cut to 100 characters, with no
    control character, and the event's data counts the removed paths."""
    remote = make_remote(tmp_path, {**PROJECT, ".gitignore": "*.log\n"})
    agent = tmp_path / "agent.py"
    agent.write_text(LOUD_NAME_AGENT)
    config = local_config(
        tmp_path, remote, [sys.executable, str(agent), "{prompt_file}", "{workdir}"]
    )
    run, shown = one_issue(Cli(config, cli_env), tmp_path, HANG_GUARD_S)
    assert run["state"] == "succeeded", run
    removed = [e for e in shown["events"] if "git ignores" in e["message"]]
    assert len(removed) == 1, [e["message"] for e in shown["events"]]
    message = removed[0]["message"]
    assert "x" * 100 in message and "x" * 101 not in message, message
    assert "forged line" not in message, message
    assert not any(ord(char) < 32 or char == "\x7f" for char in message), message
    assert removed[0]["data"] == {"ignored_removed": 1}, removed[0]
