"""Scheduler efficiency: serial within a repo, parallel across repos, under a global cap.

``python -m benchmarks scheduler --json [--database-url URL]`` queues 60 runs
over 12 repos whose dummy agent takes a known time per run (0.2-0.5 s, by
repo), then lets one ``Scheduler`` with cap 4 execute them, on SQLite and on
PostgreSQL (a throwaway database on the server of ``--postgres-url``; with
``--database-url`` only that engine: a PostgreSQL URL names the server, a
SQLite URL is used as is).

Each engine runs ``--repetitions`` times (3 by default, each on a fresh
database) and reports the median repetition. Reported per engine:
``makespan_s`` (first claim possible to last run
finished), ``ideal_s`` (the lower bound: the larger of the longest repo's
serial sum and total work / cap), ``efficiency`` = ideal / makespan and
``violations`` (busy runs per repo > 1 or in total > cap, seen by a monitor
polling the database; summed over the repetitions), ``efficiency`` the median
and ``efficiency_spread`` min/median/max. The dummy agent waits on the run's stop token in the
worker thread: it measures the scheduler, not process start-up.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from benchmarks._databases import DEFAULT_POSTGRES_URL, engine_of, temp_database
from benchmarks._paired import spread
from pipeline.config.settings import SchedulerSettings
from pipeline.queue.scheduler import RunContext, Scheduler
from pipeline.store import Run, Store
from pipeline.testing.invariants import InvariantMonitor

SETTINGS = SchedulerSettings(
    lease_s=60.0, heartbeat_s=10.0, sweep_interval_s=5.0, claim_interval_s=1.0, cancel_check_s=2.0
)


def durations(repos: int, low_s: float = 0.2, high_s: float = 0.5) -> dict[str, float]:
    """Each repo's per-run agent time, spread evenly over [low_s, high_s]."""
    step = (high_s - low_s) / max(1, repos - 1)
    return {f"repo{i:02d}": round(low_s + i * step, 4) for i in range(repos)}


def ideal_makespan(per_repo: dict[str, float], runs_per_repo: dict[str, int], cap: int) -> float:
    serial = max(per_repo[r] * n for r, n in runs_per_repo.items())
    total = sum(per_repo[r] * n for r, n in runs_per_repo.items())
    return max(serial, total / cap)


def run_engine(url: str, runs: int, repos: int, cap: int) -> dict[str, Any]:
    store = Store(url)
    store.upgrade()
    per_repo = durations(repos)
    names = sorted(per_repo)
    for name in names:
        store.ensure_repo(name)
    counts = dict.fromkeys(names, 0)
    for i in range(runs):
        name = names[i % repos]
        counts[name] += 1
        store.enqueue(name)
    repo_time = {store.get_repo(n).id: per_repo[n] for n in names}  # type: ignore[union-attr]
    finished: list[Run] = []
    all_done = threading.Event()

    def pipeline(ctx: RunContext) -> None:
        ctx.set_state("implementing")
        ctx.stop.wait(repo_time[ctx.run.repo_id])
        ctx.check()

    def on_finished(run: Run) -> None:
        finished.append(run)
        if len(finished) == runs:
            all_done.set()

    scheduler = Scheduler(
        store,
        pipeline,
        settings=SETTINGS,
        max_concurrency=cap,
        owner="bench",
        on_finished=on_finished,
    )
    with InvariantMonitor(url, cap, interval_s=0.02) as monitor:
        started = time.monotonic()
        scheduler.start()
        completed = all_done.wait(timeout=600)
        makespan = time.monotonic() - started
        scheduler.stop(5.0)
    store.close()
    ideal = ideal_makespan(per_repo, counts, cap)
    return {
        "runs": runs,
        "repos": repos,
        "cap": cap,
        "completed": completed,
        "succeeded": sum(r.state == "succeeded" for r in finished),
        "makespan_s": round(makespan, 3),
        "ideal_s": round(ideal, 3),
        "efficiency": round(ideal / makespan, 4),
        "violations": len(monitor.seen.violations),
        "max_busy_seen": monitor.seen.max_busy,
        "monitor_polls": monitor.seen.polls,
    }


def one_round(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    """One repetition on a database of its own (SQLite at ``--database-url`` reused)."""
    if engine == "sqlite" and args.database_url:
        return run_engine(args.database_url, args.runs, args.repos, args.cap)
    server = args.database_url or args.postgres_url
    with temp_database(engine, server) as url:
        return run_engine(url, args.runs, args.repos, args.cap)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median repetition's figures, every repetition's efficiency, all violations."""
    efficiencies = [r["efficiency"] for r in rounds]
    middle = sorted(rounds, key=lambda r: r["efficiency"])[len(rounds) // 2]
    return {
        **middle,
        "repetitions": len(rounds),
        "efficiency": spread(efficiencies)["median"],
        "efficiency_spread": spread(efficiencies),
        "violations": sum(r["violations"] for r in rounds),
        "completed": all(r["completed"] for r in rounds),
        "succeeded": sum(r["succeeded"] for r in rounds),
        "runs": sum(r["runs"] for r in rounds),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scheduler")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--database-url", help="only this engine (see the module docstring)")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--repos", type=int, default=12)
    parser.add_argument("--cap", type=int, default=4)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    engines = [engine_of(args.database_url)] if args.database_url else ["sqlite", "postgresql"]
    for engine in engines:
        print(
            f"scheduler benchmark on {engine}: {args.runs} runs, {args.repos} repos, "
            f"cap {args.cap}",
            flush=True,
        )
        rounds = [one_round(engine, args) for _ in range(args.repetitions)]
        results[engine] = summarise(rounds)
        print(f"  {engine}: {results[engine]}", flush=True)
    results["efficiency_min"] = min(r["efficiency"] for r in results.values())
    results["violations_total"] = sum(
        r["violations"] for k, r in results.items() if isinstance(r, dict)
    )
    print(json.dumps(results))
    return 0 if results["violations_total"] == 0 else 1
