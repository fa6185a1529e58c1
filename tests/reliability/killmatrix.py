"""kill -9 of the daemon at each phase boundary, then a restart without the fault.

A trial files one issue, starts ``pipeline run`` with ``PIPELINE_FAULTS=<checkpoint>``,
waits for the process to die by SIGKILL, restarts it clean and follows the
run to its end. Recovery time is measured from the restart to the moment the
run is claimed again (or, if it was already recorded as done, terminal).
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.core.faults import CHECKPOINTS
from pipeline.store import Run

from .figures import Figures
from .oracle import judge
from .world import World, WorldSpec, fresh_database, kill9, stop

DEATH_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 90.0


def kill_trial(root: Path, engine: str, checkpoint: str) -> Figures:
    """One crash-and-restart trial; the figures say what broke."""
    figures = Figures(scenario=f"kill -9 at {checkpoint}", engine=engine, trials=1)
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    with fresh_database(engine, root) as url:
        world = World(root, url, WorldSpec())
        try:
            _trial(world, checkpoint, figures)
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _trial(world: World, checkpoint: str, figures: Figures) -> None:
    world.migrate()
    world.file_issue("r0", f"crash at {checkpoint}", "add a file")
    first = world.daemon("faulty", env={"PIPELINE_FAULTS": checkpoint})
    try:
        world.wait(
            lambda: first.poll() is not None,
            DEATH_TIMEOUT_S,
            f"daemon with PIPELINE_FAULTS={checkpoint} dies",
        )
    except AssertionError:
        figures.misclassified.append(f"checkpoint {checkpoint} never fired")
        kill9(first)
        return
    if first.returncode != -9:
        figures.misclassified.append(f"daemon exited {first.returncode}, not by SIGKILL")
    figures.faults_injected += 1
    (run,) = world.runs()
    _check_death_point(world, run, checkpoint, figures)
    attempt_at_death = run.attempt
    second = world.daemon("clean")
    try:
        figures.recovery_s.append(
            world.wait(
                lambda: _back_in_line(world, run.id, attempt_at_death),
                FINISH_TIMEOUT_S,
                f"run {run.id} claimed again after the restart",
                interval_s=0.05,
            )
        )
        world.wait(
            lambda: all(r.terminal for r in world.runs()),
            FINISH_TIMEOUT_S,
            f"run {run.id} terminal",
        )
    except AssertionError as exc:
        figures.lost_issues.append(str(exc).splitlines()[0])
    finally:
        code = stop(second)
    if code != 0:
        figures.misclassified.append(f"the restarted daemon exited {code} on SIGTERM")
    check_outcome(world, figures, expect_success=True)


def _check_death_point(world: World, run: Run, checkpoint: str, figures: Figures) -> None:
    """The daemon died where the checkpoint says: the run's state, and for after_push, a
    commit on the remote that the database does not know about yet."""
    expected = {"after_push": "publishing"}.get(checkpoint, checkpoint)
    if run.state != expected:
        figures.misclassified.append(f"died in state {run.state}, expected {expected}")
    if checkpoint == "after_push":
        pushed = world.pushes_by_run().get(run.id, 0)
        if pushed != 1 or run.pushed_sha is not None:
            figures.misclassified.append(
                f"after_push: {pushed} commit(s) on the remote, pushed_sha {run.pushed_sha}"
            )


def _back_in_line(world: World, run_id: int, attempt: int) -> bool:
    run = world.store.get_run(run_id)
    return run is not None and (run.terminal or run.attempt > attempt)


def check_outcome(world: World, figures: Figures, *, expect_success: bool) -> None:
    """The oracle over the world's issues, runs and remotes (``oracle.judge``)."""
    issues = world.issue_views(must_ship=expect_success)
    judge(figures, issues, world.runs(), world.pushes_by_run())


def kill_mid_agent_trial(root: Path, engine: str) -> Figures:
    """kill -9 while the agent works: its orphan finishes alone; the run is redone, pushed once."""
    figures = Figures(scenario="kill -9 mid-agent (orphaned agent)", engine=engine, trials=1)
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    spec = WorldSpec(agent_env={"AGENT_SLEEP_MIN_S": "3", "AGENT_SLEEP_MAX_S": "3"})
    with fresh_database(engine, root) as url:
        world = World(root, url, spec)
        try:
            world.migrate()
            world.file_issue("r0", "killed while the agent works", "add a file")
            first = world.daemon("first")
            world.wait(
                lambda: any(r.state == "implementing" for r in world.runs()), 60, "agent started"
            )
            time.sleep(1.0)  # the agent is mid-way through its 3 s
            kill9(first)
            figures.faults_injected = 1
            (run,) = world.runs()
            second = world.daemon("second")
            try:
                figures.recovery_s.append(
                    world.wait(
                        lambda: _back_in_line(world, run.id, run.attempt),
                        FINISH_TIMEOUT_S,
                        "claimed again",
                        interval_s=0.05,
                    )
                )
                world.wait(
                    lambda: all(r.terminal for r in world.runs()), FINISH_TIMEOUT_S, "terminal"
                )
            except AssertionError as exc:
                figures.lost_issues.append(str(exc).splitlines()[0])
            finally:
                stop(second)
            check_outcome(world, figures, expect_success=True)
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def kill_matrix(root: Path, engines: tuple[str, ...], repeat: int = 1) -> list[Figures]:
    """Every checkpoint on every engine, ``repeat`` times, plus a kill in mid-agent."""
    results = []
    for engine in engines:
        for checkpoint in CHECKPOINTS:
            merged = Figures(scenario=f"kill -9 at {checkpoint}", engine=engine)
            for index in range(repeat):
                merged.merge(
                    kill_trial(root / f"{engine}-{checkpoint}-{index}", engine, checkpoint)
                )
            results.append(merged)
        results.append(kill_mid_agent_trial(root / f"{engine}-mid-agent", engine))
    return results
