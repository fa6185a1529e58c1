"""The cost of a poll cycle when nothing changed, and of enrolling repos at start-up.

``python -m benchmarks poll --json [--sizes 10,100,1000] [--postgres-url URL]``

Per engine and per size N: a fake GitHub on loopback, served by a process of
its own as a real forge is remote (``benchmarks._forge_process``), with N
repos, every tenth holding a trusted ready issue; the real intake and tracker
client over a real store, with the tracker's ``poll_concurrency`` set to
``--concurrency`` (default 8, the default of the setting; 1 is one request at
a time). Measured:

- ``enrol_s``: ``Store.sync_repos`` of the N repos into an empty database
  (what ``pipeline run`` does at start-up);
- after a first (paid) poll that queues the ready issues: one cycle where every
  list answers 304 (``unchanged_cycle_s``, ``statements``, and the poller's
  CPU seconds ``unchanged_cycle_cpu_s``), and one where every
  list is answered in full but is the same as before, as from a forge without
  ETags (``unchanged_list_cycle_s``, ``statements_unchanged_list``).

Statements are counted with a SQLAlchemy event listener on the store's engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._databases import DEFAULT_POSTGRES_URL, temp_database
from benchmarks._forge_process import RemoteForge, slugs
from benchmarks._paired import StatementCounter, machine
from pipeline.config.settings import RepoSettings
from pipeline.store import Store
from pipeline.testing.intake_world import IntakeWorld


def enrol_s(url: str, size: int) -> float:
    store = Store(url)
    store.upgrade()
    repos = [
        RepoSettings(name=f"e{n}", tracker="github", slug=f"enrol/r{n}", remote_url="x")
        for n in range(size)
    ]
    started = time.perf_counter()
    store.sync_repos(repos)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def cycle(world: IntakeWorld) -> tuple[float, int, float]:
    """Wall seconds, statements, and the poller's CPU seconds (the forge is another process)."""
    with StatementCounter(world.store.engine) as counter:
        cpu, started = time.process_time(), time.perf_counter()
        report = world.intake.poll("github")
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if report.error:
        raise RuntimeError(f"poll failed: {report.error}")
    return elapsed, counter.count, cpu


def run_size(engine: str, server: str, size: int, concurrency: int) -> dict[str, Any]:
    with temp_database(engine, server) as url:
        enrolled = enrol_s(url, size)
    fake = RemoteForge(size)
    with fake, temp_database(engine, server) as url, tempfile.TemporaryDirectory() as tmp:
        world = IntakeWorld.build(
            url,
            Path(tmp) / "volume",
            {"github": fake},
            [("github", s) for s in slugs(size)],
            wall_clock=True,
            poll_concurrency=concurrency,
        )
        try:
            world.intake.poll("github")  # paid: queues the ready issues
            unchanged_s, statements, cpu_s = cycle(world)
            for tracker in world.trackers.values():
                tracker.http._state.etags.clear()  # lists answered in full, unchanged
            listed_s, listed_statements, _ = cycle(world)
        finally:
            world.close()
    return {
        "repos": size,
        "enrol_s": round(enrolled, 3),
        "unchanged_cycle_s": round(unchanged_s, 3),
        "unchanged_cycle_cpu_s": round(cpu_s, 3),
        "statements": statements,
        "unchanged_list_cycle_s": round(listed_s, 3),
        "statements_unchanged_list": listed_statements,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks poll")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--concurrency", type=int, default=8, help="the tracker's poll_concurrency")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    result: dict[str, Any] = {"benchmark": "poll", "poll_concurrency": args.concurrency}
    for engine in args.engines.split(","):
        result[engine] = {
            str(n): run_size(engine, args.postgres_url, n, args.concurrency) for n in sizes
        }
        print(f"  {engine}: {result[engine]}", flush=True)
    engines = [result[e] for e in args.engines.split(",")]
    for n in sizes:
        key = str(n)
        result[f"unchanged_cycle_s_{n}"] = max(e[key]["unchanged_cycle_s"] for e in engines)
        result[f"statements_per_cycle_{n}"] = max(
            max(e[key]["statements"], e[key]["statements_unchanged_list"]) for e in engines
        )
        result[f"enrol_s_{n}"] = max(e[key]["enrol_s"] for e in engines)
    result["machine"] = machine()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
