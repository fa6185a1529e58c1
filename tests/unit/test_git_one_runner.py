"""Every git command of the daemon goes through ``pipeline.git.run``; nothing declares GitPython."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
PYPROJECT = PIPELINE.parent / "pyproject.toml"
GIT_PROGRAMS = {"git", "git-crypt"}
# Not the daemon: test fakes (remotes, forges), and the demo's scripted agent, which runs
# git inside its sandbox exactly as an agent would.
EXEMPT = ("git/", "testing/", "demo/agent.py")


def git_command_lines(source: str) -> list[int]:
    """Lines where ``source`` builds a command line starting with a git program.

    A list or tuple whose first item is ``"git"`` / ``"git-crypt"``, or a string
    command (``"git fetch ..."``) handed to a call: what ``subprocess``, ``os.exec*``
    or ``pipeline.core.proc`` would run.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in GIT_PROGRAMS:
                found.append(node.lineno)
        if isinstance(node, ast.Call):
            for arg in node.args[:1]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if arg.value.split(" ", 1)[0] in GIT_PROGRAMS and " " in arg.value:
                        found.append(node.lineno)
    return found


def test_no_module_outside_the_git_package_runs_git_itself() -> None:
    """No production module but pipeline/git builds a git command line of its own."""
    offenders = []
    for path in sorted(PIPELINE.rglob("*.py")):
        relative = path.relative_to(PIPELINE).as_posix()
        if relative.startswith(EXEMPT) or "demo/projects/" in relative:
            continue
        for line in git_command_lines(path.read_text(encoding="utf-8")):
            offenders.append(f"pipeline/{relative}:{line}")
    assert offenders == [], "run git through pipeline.git.run.GitRunner: " + ", ".join(offenders)


def test_the_scan_finds_a_direct_git_call() -> None:
    """The scan flags subprocess calls, exec and shell strings that start git."""
    attacker = (
        "import os, subprocess\n"
        "subprocess.run(['git', 'fetch', 'origin'])\n"
        "os.execvp('git', ('git-crypt', 'unlock'))\n"
        "subprocess.check_output('git rev-parse HEAD', shell=True)\n"
        "raise FatalError('git', 'a kind, not a command')\n"
    )
    assert sorted(git_command_lines(attacker)) == [2, 3, 4]


def test_gitpython_is_not_declared() -> None:
    """pyproject declares no GitPython (ADR 0010 removed it; nothing imports it)."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    declared = [*project["dependencies"]]
    for extra in project.get("optional-dependencies", {}).values():
        declared.extend(extra)
    assert [d for d in declared if d.lower().replace("-", "").startswith("gitpython")] == []
    imports = [
        path
        for path in PIPELINE.rglob("*.py")
        if "import git\n" in (text := path.read_text(encoding="utf-8")) or "from git " in text
    ]
    assert imports == []
