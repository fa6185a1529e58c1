"""A daemon frozen (SIGSTOP) past its lease, then thawed: fencing must stop the stale worker.

Daemon A takes the run; once the run reaches ``state`` A is frozen. Daemon B
recovers the lease and finishes the run. Then A is thawed: its worker resumes
where it stood and must notice it lost the lease before any side effect (a
push, a comment, a state write). The figures count pushes per run and
non-terminal or wrongly-owned outcomes.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from .figures import Figures
from .killmatrix import FINISH_TIMEOUT_S, check_outcome
from .world import World, WorldSpec, fresh_database, stop

# A slow test gate keeps each phase (testing, and publishing's re-test) open long enough.
SLOW_TESTS = (
    f"{sys.executable} -c 'import time; time.sleep(1.5)' && {sys.executable} -m unittest -q"
)
PAUSE_STATES = ("implementing", "testing", "publishing")


def pause_trial(root: Path, engine: str, state: str) -> Figures:
    figures = Figures(
        scenario=f"SIGSTOP past the lease at {state}, then SIGCONT", engine=engine, trials=1
    )
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    spec = WorldSpec(
        test_command=SLOW_TESTS, agent_env={"AGENT_SLEEP_MIN_S": "2", "AGENT_SLEEP_MAX_S": "2"}
    )
    with fresh_database(engine, root) as url:
        world = World(root, url, spec)
        try:
            _trial(world, state, figures)
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _trial(world: World, state: str, figures: Figures) -> None:
    world.migrate()
    world.file_issue("r0", f"frozen at {state}", "add a file")
    stale = world.daemon("stale")
    fresh = None
    try:
        world.wait(
            lambda: any(r.state == state for r in world.runs()), 60, f"run {state}", interval_s=0.05
        )
        os.killpg(stale.pid, signal.SIGSTOP)
        figures.faults_injected = 1
        (run,) = world.runs()
        fresh = world.daemon("fresh")
        figures.recovery_s.append(
            world.wait(
                lambda: _taken_over(world, run.id, run.attempt),
                FINISH_TIMEOUT_S,
                "another daemon takes the run",
                interval_s=0.05,
            )
        )
        world.wait(lambda: all(r.terminal for r in world.runs()), FINISH_TIMEOUT_S, "terminal")
        os.killpg(stale.pid, signal.SIGCONT)
        time.sleep(4.0)  # the thawed worker runs into its lost lease
        if stale.poll() is not None:
            figures.misclassified.append(f"the thawed daemon exited {stale.returncode}")
    except AssertionError as exc:
        figures.lost_issues.append(str(exc).splitlines()[0])
    finally:
        if stale.poll() is None:
            os.killpg(stale.pid, signal.SIGCONT)
        stop(stale)
        if fresh is not None:
            stop(fresh)
    check_outcome(world, figures, expect_success=True)


def _taken_over(world: World, run_id: int, attempt: int) -> bool:
    run = world.store.get_run(run_id)
    return run is not None and (run.terminal or run.attempt > attempt)
