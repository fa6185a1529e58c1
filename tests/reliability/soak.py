"""Soak: several daemon replicas on one PostgreSQL, many issues, random kill -9 of replicas.

A checker thread reads every run in one query, every ``CHECK_INTERVAL_S``, for
the whole soak, and records any breach of the guarantees it sees at that
instant: two busy runs in one repo, more busy runs than ``max_concurrency``,
two active runs for one issue. Recovery time is from a replica's kill to each
of its runs being claimed again (by any replica) or ended.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.store import RunFilter, Store
from pipeline.store.models import BUSY_STATES

from .figures import Figures
from .killmatrix import check_outcome
from .world import World, WorldSpec, fresh_database, kill9, stop

CHECK_INTERVAL_S = 0.05


@dataclass(frozen=True)
class SoakPlan:
    replicas: int = 3
    issues: int = 40
    repos: int = 8
    kills: int = 2
    max_concurrency: int = 4
    agent_min_s: float = 0.2
    agent_max_s: float = 1.5
    timeout_s: float = 180.0
    seed: int = 9
    engine: str = "postgresql"


@dataclass
class Checker:
    """Polls the runs table and records invariant breaches and recoveries as they happen."""

    database_url: str
    cap: int
    polls: int = 0
    max_busy: int = 0
    violations: list[str] = field(default_factory=list)
    pending: dict[int, tuple[int, float]] = field(default_factory=dict)  # run -> attempt, t
    recovered_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        store = Store(self.database_url)
        try:
            while not self._stop.wait(CHECK_INTERVAL_S):
                try:
                    self.check(store.list_runs(RunFilter(limit=100_000)))
                except Exception as exc:  # a transient read failure is not a breach
                    self.violations.append(f"checker read failed: {type(exc).__name__}")
        finally:
            store.close()

    def stop(self) -> None:
        self._stop.set()

    def check(self, runs: list[Any]) -> None:
        self.polls += 1
        busy = [r for r in runs if r.state in BUSY_STATES]
        self.max_busy = max(self.max_busy, len(busy))
        if len(busy) > self.cap:
            self.violations.append(f"{len(busy)} busy runs exceed max_concurrency {self.cap}")
        self._duplicates(busy, "repo_name", "busy runs in repo")
        active = [r for r in runs if not r.terminal and r.issue_id is not None]
        self._duplicates(active, "issue_id", "active runs for issue")
        self._recoveries(runs)

    def _duplicates(self, runs: list[Any], key: str, what: str) -> None:
        seen: dict[object, list[int]] = {}
        for run in runs:
            seen.setdefault(getattr(run, key), []).append(run.id)
        for value, ids in seen.items():
            if len(ids) > 1:
                self.violations.append(f"{len(ids)} {what} {value}: runs {ids}")

    def _recoveries(self, runs: list[Any]) -> None:
        now = time.monotonic()
        with self.lock:
            for run in runs:
                mark = self.pending.get(run.id)
                if mark is not None and (run.terminal or run.attempt > mark[0]):
                    self.recovered_s.append(now - mark[1])
                    del self.pending[run.id]

    def expect_recovery(self, runs: list[Any], t_kill: float) -> None:
        with self.lock:
            for run in runs:
                self.pending[run.id] = (run.attempt, t_kill)


# The bounded plans run in CI; the full ones with --long / PIPELINE_RELIABILITY_LONG=1.
BOUNDED = SoakPlan(replicas=3, issues=40, repos=8, kills=2)
FULL = SoakPlan(replicas=3, issues=200, repos=20, kills=10, max_concurrency=6, timeout_s=1500)
SQLITE_BOUNDED = SoakPlan(replicas=3, issues=24, repos=6, kills=2, engine="sqlite")
SQLITE_FULL = SoakPlan(replicas=3, issues=100, repos=10, kills=6, engine="sqlite", timeout_s=900)


def soak(root: Path, plan: SoakPlan) -> Figures:
    """Run the soak on a fresh database of ``plan.engine``; the figures say what broke."""
    figures = Figures(
        scenario=f"soak: {plan.replicas} replicas, {plan.issues} issues over "
        f"{plan.repos} repos, {plan.kills} kill -9",
        engine=plan.engine,
        unit="issues",
    )
    root.mkdir(parents=True, exist_ok=True)
    spec = WorldSpec(
        repos=plan.repos,
        max_concurrency=plan.max_concurrency,
        max_recoveries=10,
        agent_env={
            "AGENT_SLEEP_MIN_S": str(plan.agent_min_s),
            "AGENT_SLEEP_MAX_S": str(plan.agent_max_s),
        },
    )
    started = time.monotonic()
    with fresh_database(plan.engine, root) as url:
        world = World(root, url, spec)
        try:
            _soak(world, plan, figures)
        finally:
            world.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _soak(world: World, plan: SoakPlan, figures: Figures) -> None:
    rng = random.Random(plan.seed)
    world.migrate()
    names = sorted(world.remotes)
    for index in range(plan.issues):
        world.file_issue(names[index % len(names)], f"soak issue {index}", "add a file")
    checker = Checker(world.database_url, plan.max_concurrency)
    thread = threading.Thread(target=checker.run, name="soak-checker", daemon=True)
    thread.start()
    replicas = [world.daemon(f"replica{i}") for i in range(plan.replicas)]
    began = time.monotonic()
    try:
        figures.faults_injected = _kill_loop(world, plan, rng, replicas, checker)
        world.wait(
            lambda: _all_done(world, plan.issues),
            plan.timeout_s,
            "every soak run ends",
            interval_s=0.5,
        )
    except AssertionError as exc:
        figures.lost_issues.append(str(exc).splitlines()[0])
    finally:
        elapsed = time.monotonic() - began
        for index, proc in enumerate(replicas):
            if proc.poll() is not None:
                tail = (world.root / f"replica{index}.log").read_text(errors="replace")[-400:]
                figures.misclassified.append(
                    f"replica {index} exited by itself ({proc.returncode}): ...{tail}"
                )
            stop(proc)
        checker.stop()
        thread.join(timeout=10)
    succeeded = sum(1 for r in world.runs() if r.state == "succeeded")
    figures.trials = plan.issues
    figures.throughput_per_min = round(succeeded / elapsed * 60, 1)
    figures.invariant_violations.extend(checker.violations)
    figures.recovery_s.extend(checker.recovered_s)
    figures.notes.append(
        f"{checker.polls} invariant checks, at most {checker.max_busy} busy "
        f"runs at once (cap {plan.max_concurrency}); {succeeded} runs succeeded "
        f"in {elapsed:.0f} s"
    )
    owners = _claimers(world)
    figures.notes.append(f"{len(owners)} daemon processes claimed runs")
    if len(owners) < 2:  # which replica wins each claim is luck; that several work is not
        figures.misclassified.append(f"only {len(owners)} process ever claimed a run")
    if checker.pending:
        figures.lost_issues.append(f"runs never recovered after a kill: {sorted(checker.pending)}")
    check_outcome(world, figures, expect_success=True)


def _kill_loop(
    world: World, plan: SoakPlan, rng: random.Random, replicas: list[Any], checker: Checker
) -> int:
    """Kill a random replica holding a run, ``plan.kills`` times; restart it at once."""
    kills = 0
    deadline = time.monotonic() + plan.timeout_s
    while kills < plan.kills and time.monotonic() < deadline:
        time.sleep(rng.uniform(1.0, 4.0))
        if _all_done(world, plan.issues):
            break
        busy = [r for r in world.runs() if r.state in BUSY_STATES and r.owner]
        holding = [i for i, p in enumerate(replicas) if any(f":{p.pid}:" in r.owner for r in busy)]
        index = rng.choice(holding) if holding else rng.randrange(len(replicas))
        victim = replicas[index]
        held = [r for r in busy if f":{victim.pid}:" in r.owner]
        t_kill = time.monotonic()
        kill9(victim)
        checker.expect_recovery(held, t_kill)
        kills += 1
        replicas[index] = world.daemon(f"replica{index}")
    return kills


def _all_done(world: World, issues: int) -> bool:
    runs = [r for r in world.runs() if r.kind == "issue"]
    return len(runs) >= issues and all(r.terminal for r in runs)


def _claimers(world: World) -> set[str]:
    """Every owner that claimed a run, from the runs' timelines."""
    return {
        str(e.data.get("owner"))
        for r in world.runs()
        for e in world.store.run_events(r.id)
        if e.kind == "claimed"
    }
