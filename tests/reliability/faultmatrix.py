"""Agent and git faults through the real daemon: each is classified, nothing crashes or repeats.

Every case is one world with one issue and a daemon subprocess. The case
passes when the run ends in the expected state with the expected
``error_class``, the daemon is still running afterwards (and stops cleanly on
SIGTERM), nothing was pushed twice and no error was left unclassified
(``internal``).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.store import Run
from pipeline.testing.gitrepos import commit_to_remote
from pipeline.testing.ports import free_port

from .figures import Figures
from .killmatrix import check_outcome
from .world import World, WorldSpec, agent_area, fresh_database, stop

# A stand-in for the Claude Code CLI: stream-json on stdout. ``FAKE_CLAUDE_529``
# invocations answer an overloaded API error first (a 529 burst), then it works.
FAKE_CLAUDE = r"""
import json, os, pathlib, sys, time
state = pathlib.Path(os.environ["FAKE_CLAUDE_STATE"])
calls = int(state.read_text()) if state.exists() else 0
state.write_text(str(calls + 1))
sys.stdin.read()
def emit(event):
    print(json.dumps(event), flush=True)
emit({"type": "system", "subtype": "init", "session_id": "s-%d" % calls})
if os.environ.get("FAKE_CLAUDE_MODE") == "garbage":
    sys.stdout.write("\x00\xff not json {\n[1,2\n" * 50)
    sys.exit(0)
if calls < int(os.environ.get("FAKE_CLAUDE_529", "0")):
    emit({"type": "result", "subtype": "success", "is_error": True, "num_turns": 1,
          "api_error_status": 529, "result": "API Error: 529 overloaded_error: Overloaded",
          "session_id": "s-%d" % calls})
    sys.exit(1)
pathlib.Path("change-%d.txt" % time.time_ns()).write_text("done")
emit({"type": "result", "subtype": "success", "is_error": False, "num_turns": 2,
      "result": "wrote a file", "total_cost_usd": 0.01, "session_id": "s-%d" % calls,
      "usage": {"input_tokens": 10, "output_tokens": 5}})
"""

# A git that reports a full disk for the commands that write a work tree.
FULL_DISK_GIT = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    worktree|checkout|clone)
      echo "fatal: could not write index: No space left on device" >&2
      exit 128;;
  esac
done
exec {git} "$@"
"""


@dataclass
class Case:
    name: str
    state: str
    error_classes: tuple[str, ...] = ()
    spec: Callable[[Path], WorldSpec] = field(default=lambda root: WorldSpec())
    env: Callable[[Path], dict[str, str]] = field(default=lambda root: {})
    during: Callable[[World], None] | None = None
    check: Callable[[World], list[str]] | None = None


def _spec(**agent_env: str) -> Callable[[Path], WorldSpec]:
    return lambda root: WorldSpec(max_attempts=2, agent_env=agent_env)


def _claude_spec(mode: str = "ok", overloaded: int = 0) -> Callable[[Path], WorldSpec]:
    def build(root: Path) -> WorldSpec:
        script = root / "fake_claude.py"
        script.write_text(FAKE_CLAUDE)
        agent = {
            "kind": "claude",
            "command": [sys.executable, str(script)],
            "idle_timeout_s": 30,
            "exit_grace_s": 1,
            "env": {
                "FAKE_CLAUDE_STATE": str(agent_area(root) / "claude-calls"),
                "FAKE_CLAUDE_MODE": mode,
                "FAKE_CLAUDE_529": str(overloaded),
            },
        }
        config = {"agents": {"fakeclaude": agent}}
        return WorldSpec(max_attempts=4, agent_name="fakeclaude", config=config)

    return build


def _unreachable(root: Path) -> WorldSpec:
    # A network remote nothing listens on: a local path to nothing is refused at the door.
    return WorldSpec(max_attempts=2, remote_urls={"r0": f"http://127.0.0.1:{free_port()}/r0.git"})


def _full_disk_env(root: Path) -> dict[str, str]:
    bin_dir = root / "fullbin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "git"
    real = next(
        Path(p) / "git" for p in os.environ["PATH"].split(os.pathsep) if (Path(p) / "git").exists()
    )
    wrapper.write_text(FULL_DISK_GIT.format(git=real))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _push_behind(world: World) -> None:
    """While the agent works, someone else pushes to main: the run must rebase, not force."""
    world.wait(lambda: any(r.state == "implementing" for r in world.runs()), 60, "run implementing")
    commit_to_remote(world.remotes["r0"], {"other.txt": "a human's commit\n"}, "human change")


def _human_commit_kept(world: World) -> list[str]:
    from pipeline.testing.gitrepos import git

    log = git(Path(world.remotes["r0"]), "log", "--format=%s", "main")
    return [] if "human change" in log else ["the human's commit is gone from main"]


def _bounded_events(world: World) -> list[str]:
    total = sum(
        len(e.message) + len(json.dumps(e.data))
        for r in world.runs()
        for e in world.store.run_events(r.id)
    )
    return [] if total < 500_000 else [f"run events hold {total} characters of agent output"]


CASES = (
    Case("agent crash (SIGSEGV)", "failed", ("agent_crash",), _spec(AGENT_MODE="crash")),
    Case("agent exits 3", "failed", ("agent_error",), _spec(AGENT_MODE="fail")),
    Case(
        "agent hang (idle timeout)",
        "failed",
        ("idle_timeout",),
        lambda root: WorldSpec(
            max_attempts=2, idle_timeout_s=1.5, agent_env={"AGENT_MODE": "hang"}
        ),
    ),
    Case("agent garbage on stdout", "succeeded", (), _spec(AGENT_MODE="garbage")),
    Case(
        "agent huge output (20 MB)",
        "succeeded",
        (),
        _spec(AGENT_MODE="huge"),
        check=_bounded_events,
    ),
    Case("agent 529 burst (claude stream)", "succeeded", (), _claude_spec(overloaded=2)),
    Case(
        "agent stream garbage (claude)",
        "failed",
        ("agent_no_result", "agent_crash", "agent_error"),
        _claude_spec("garbage"),
    ),
    Case("git remote unreachable", "failed", ("git_fetch", "git_clone", "git"), _unreachable),
    Case(
        "git non-fast-forward (main moved)",
        "succeeded",
        (),
        _spec(AGENT_SLEEP_MIN_S="2", AGENT_SLEEP_MAX_S="2"),
        during=_push_behind,
        check=_human_commit_kept,
    ),
    Case(
        "git disk full",
        "failed",
        ("disk_full",),
        lambda root: WorldSpec(max_attempts=2),
        env=_full_disk_env,
    ),
)


def fault_case(root: Path, case: Case, engine: str = "sqlite") -> Figures:
    figures = Figures(scenario=f"fault: {case.name}", engine=engine, trials=1, faults_injected=1)
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    with fresh_database(engine, root) as url:
        world = World(root, url, case.spec(root))
        try:
            _run_case(world, case, figures)
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _run_case(world: World, case: Case, figures: Figures) -> None:
    world.migrate()
    world.file_issue("r0", f"fault case: {case.name}", "add a file")
    daemon = world.daemon("daemon", env=case.env(world.root))
    try:
        if case.during is not None:
            case.during(world)
        world.wait(
            lambda: bool(world.runs()) and all(r.terminal for r in world.runs()),
            90,
            f"{case.name}: run terminal",
        )
        if daemon.poll() is not None:
            figures.misclassified.append(f"daemon died with code {daemon.returncode}")
    except AssertionError as exc:
        figures.lost_issues.append(str(exc).splitlines()[0])
    finally:
        code = stop(daemon)
    if code != 0:
        figures.misclassified.append(f"daemon exited {code} on SIGTERM")
    if "Traceback" in world.log_text():
        figures.misclassified.append("a traceback in the daemon log")
    for run in world.runs():
        _classify(run, case, figures)
    check_outcome(world, figures, expect_success=case.state == "succeeded")
    if case.check is not None:
        figures.misclassified.extend(case.check(world))


def _classify(run: Run, case: Case, figures: Figures) -> None:
    state, error_class = run.state, run.error_class
    figures.notes.append(f"ended {state}" + (f", error_class {error_class}" if error_class else ""))
    if state != case.state:
        figures.misclassified.append(
            f"{case.name}: ended {state} ({error_class}: {run.error}), expected {case.state}"
        )
    elif case.error_classes and error_class not in case.error_classes:
        figures.misclassified.append(
            f"{case.name}: error_class {error_class!r}, expected one of {case.error_classes}"
        )
    if error_class == "internal":
        figures.misclassified.append(f"{case.name}: unclassified error {run.error}")


def fault_matrix(root: Path) -> list[Figures]:
    return [fault_case(root / f"case{i}", case) for i, case in enumerate(CASES)]
