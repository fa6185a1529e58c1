"""A tiny project with a bug, in a real git clone of a bare remote, for agent tests.

``calc.add`` subtracts; the suite (``python3 -m unittest``) has one passing
smoke test, so a test that captures the bug is what makes it red. Also a
scripted command agent: a Python script that plays one step per invocation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.config.settings import AgentPreset, RepoSettings
from pipeline.git.repo import GitRepo
from pipeline.run.prompt import IssueInfo

TEST_COMMAND = "python3 -m unittest discover -q"
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
STILL_WRONG = "def add(a, b):\n    return a * b\n"
FAILING_TEST = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n"
    "        self.assertEqual(add(2, 3), 5)\n"
)
SENTINELS = {
    "GITHUB_TOKEN": "sentinel-github-token",
    "GITEA_TOKEN": "sentinel-gitea-token",
    "PIPELINE_WEBHOOK_SECRET": "sentinel-webhook-secret",
    "PIPELINE_API_TOKEN": "sentinel-api-token",
    "FORGE_WEBHOOK_SECRET": "sentinel-forge-hook",
}


def git(cwd: Path, *args: str) -> str:
    """Run git, failing loudly."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass(frozen=True)
class Project:
    root: Path  # the clone the agent works in
    remote: Path
    base: str
    home: Path  # the per-repo HOME
    outside: Path  # a directory outside the worktree for test artefacts

    def repo(self, **changes: object) -> RepoSettings:
        settings: dict[str, object] = {
            "name": "demo",
            "tracker": "local",
            "slug": "o/demo",
            "remote_url": str(self.remote),
            "test_command": TEST_COMMAND,
            "test_timeout_s": 60.0,
            "max_fix_iterations": 2,
        }
        settings.update(changes)
        return RepoSettings(**settings)  # type: ignore[arg-type]

    @property
    def tree(self) -> GitRepo:
        """The clone as the daemon's git sees it: pinned to its ``.git``."""
        return GitRepo.plain(self.root)

    def commits(self) -> list[str]:
        return git(self.root, "rev-list", "--reverse", f"{self.base}..HEAD").split()

    def message(self, sha: str) -> str:
        return git(self.root, "log", "-1", "--format=%B", sha)


def make_project(tmp_path: Path) -> Project:
    """A bare remote with the buggy project, and a clone of it."""
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "calc.py").write_text(BUGGY)
    (seed / "test_smoke.py").write_text(
        "import unittest\n\n\nclass Smoke(unittest.TestCase):\n"
        "    def test_import(self):\n        import calc  # noqa: F401\n"
    )
    (seed / ".gitignore").write_text("__pycache__/\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "Initial")
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(remote))
    root = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(root))
    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir()
    outside.mkdir()
    return Project(root, remote, git(root, "rev-parse", "HEAD"), home, outside)


ISSUE = IssueInfo(
    ref="#1",
    number=1,
    title="add() subtracts",
    body="`add(2, 3)` returns -1 instead of 5.",
    comments=("Seen while totalling invoices.",),
    url="http://tracker.invalid/o/demo/issues/1",
    author="alice",
)


def base_env(**extra: str) -> dict[str, str]:
    """The parent environment with forge and daemon secrets planted as sentinels."""
    return {**os.environ, **SENTINELS, **extra}


_AGENT_SCRIPT = """\
import json, os, subprocess, sys, time
plan = json.load(open(sys.argv[1]))
state = sys.argv[2]
count = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(count + 1))
step = plan[min(count, len(plan) - 1)]
prompt = open(sys.argv[3]).read()
open(os.path.join(os.path.dirname(state), f"prompt-{count}.txt"), "w").write(prompt)
if step.get("switch"):
    subprocess.run(["git", "checkout", "-q", "-b", step["switch"]], check=True)
if step.get("dump_env"):
    json.dump(dict(os.environ), open(step["dump_env"], "w"))
for name, content in step.get("files", {}).items():
    open(name, "w").write(content)
if step.get("commit"):
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", step["commit"]], check=True)
print(step.get("print", "done"), flush=True)
time.sleep(step.get("sleep", 0))
sys.exit(step.get("exit", 0))
"""


def command_agent(
    directory: Path, steps: list[Mapping[str, object]], **preset: object
) -> AgentPreset:
    """A ``command`` preset that plays ``steps``, one per invocation (the last repeats).

    A step may ``switch`` to a new branch, write ``files``, ``commit`` them with
    a message, ``print`` a line, ``dump_env`` to a path, ``sleep`` and ``exit``
    with a code. Each prompt it got is kept as ``prompt-<n>.txt`` in ``directory``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    script, plan = directory / "agent.py", directory / "plan.json"
    script.write_text(_AGENT_SCRIPT)
    plan.write_text(json.dumps(steps))
    argv = (sys.executable, str(script), str(plan), str(directory / "count"), "{prompt_file}")
    settings: dict[str, object] = {"name": "scripted", "kind": "command", "command": argv}
    settings.update(preset)
    return AgentPreset(**settings)  # type: ignore[arg-type]


def prompts(directory: Path) -> list[str]:
    """The prompts a scripted command agent received, in order."""
    return [
        (directory / f"prompt-{index}.txt").read_text()
        for index in range(len(list(directory.glob("prompt-*.txt"))))
    ]
