"""A daemon frozen (SIGSTOP) past its lease, then thawed: fencing must stop the stale worker.

Daemon A takes the run; once the run reaches ``state`` A is frozen. Daemon B
recovers the lease and finishes the run. Then A is thawed: its worker resumes
where it stood and must notice it lost the lease before any side effect (a
push, a comment, a state write). The trial asks for positive evidence of
that: the thawed daemon's log shows its write rejected (its heartbeat found the
run no longer its own, or a fenced write raised ``LeaseLost``), and the run's
timeline holds no event of the stale attempt written after the new attempt
claimed the run. The oracle then checks the issue was shipped and closed once.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from .figures import Figures
from .killmatrix import FINISH_TIMEOUT_S, check_outcome
from .world import World, WorldSpec, fresh_database, stop

# A slow test gate keeps each phase (testing, and publishing's re-test) open long enough.
SLOW_TESTS = (
    f"{sys.executable} -c 'import time; time.sleep(1.5)' && {sys.executable} -m unittest -q"
)
PAUSE_STATES = ("implementing", "testing", "publishing")
FENCE_TIMEOUT_S = 30.0  # a fenced write is rejected within a heartbeat of the thaw
OBSERVE_S = 2.0  # after the rejection, time for any late write to land (there must be none)


def pause_trial(
    root: Path, engine: str, state: str, stale_env: Mapping[str, str] | None = None
) -> Figures:
    """One freeze-and-thaw; ``stale_env`` goes to the frozen daemon only (a test's sabotage)."""
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
            _trial(world, state, figures, stale_env or {})
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _trial(world: World, state: str, figures: Figures, stale_env: Mapping[str, str]) -> None:
    world.migrate()
    world.file_issue("r0", f"frozen at {state}", "add a file")
    stale = world.daemon("stale", env=stale_env)
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
        log = world.root / "stale.log"
        thawed_at = log.stat().st_size
        os.killpg(stale.pid, signal.SIGCONT)
        _check_fenced(world, run.id, run.attempt, log, thawed_at, figures)
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


def _check_fenced(
    world: World, run_id: int, attempt: int, log: Path, thawed_at: int, figures: Figures
) -> None:
    """Positive evidence of the fence: the rejected write in the thawed daemon's log, and no
    event of its attempt after the run was claimed again."""
    fenced = re.compile(rf"run {run_id}: lease lost|LeaseLost|no longer held by")

    def rejected() -> bool:
        with log.open("rb") as handle:
            handle.seek(thawed_at)
            return bool(fenced.search(handle.read().decode(errors="replace")))

    try:
        world.wait(rejected, FENCE_TIMEOUT_S, "the thawed worker's write is rejected")
    except AssertionError:
        figures.invariant_violations.append(
            f"no evidence the thawed worker was fenced: its log shows no rejected write "
            f"within {FENCE_TIMEOUT_S:.0f} s"
        )
    time.sleep(OBSERVE_S)  # a write that slipped past the fence would land now
    late = late_events(world, run_id, attempt)
    if late:
        figures.invariant_violations.append(
            f"the stale attempt {attempt} wrote {len(late)} event(s) after the run was "
            f"claimed again: {late[:3]}"
        )


def late_events(world: World, run_id: int, attempt: int) -> list[str]:
    """Events of ``attempt`` written after a later attempt claimed the run."""
    events = world.store.run_events(run_id)
    claims = [e.id for e in events if e.kind == "claimed" and e.attempt > attempt]
    if not claims:
        return []
    return [f"{e.kind}: {e.message}" for e in events if e.attempt == attempt and e.id > min(claims)]


def _taken_over(world: World, run_id: int, attempt: int) -> bool:
    run = world.store.get_run(run_id)
    return run is not None and (run.terminal or run.attempt > attempt)
