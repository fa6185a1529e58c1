"""Claim throughput across PostgreSQL replicas, and proof that no run is claimed twice.

``python -m benchmarks claim --json --database-url postgresql://USER@HOST/DB``
creates a throwaway database on that server, queues 5,000 zero-length runs
over 200 repos, then starts 3 replica processes that each claim and finish
runs with several threads until the queue is empty. ``claims_per_s`` is runs
over the wall time from "go" to the last replica's exit; ``double_claims`` is
counted from the ``claimed`` events in the database (a run claimed by more than
one owner or more than once); ``violations`` are breaches of the per-repo and
global caps seen by a monitor polling the database meanwhile.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

from benchmarks._databases import DEFAULT_POSTGRES_URL, temp_database
from pipeline.store import Store
from pipeline.testing.invariants import InvariantMonitor

LEASE_S = 60.0


def replica(url: str, owner: str, threads: int, cap: int) -> int:
    """One replica: wait for "go" on stdin, then claim and finish until the queue is empty."""
    store = Store(url)
    store.ping()
    print("ready", flush=True)
    sys.stdin.readline()
    counts = [0] * threads

    def loop(slot: int) -> None:
        name = f"{owner}/{slot}"
        while True:
            run = store.claim_next(name, max_concurrency=cap, lease_s=LEASE_S)
            if run is None:
                if store.queue_depth() == 0:
                    return
                time.sleep(0.002)
                continue
            store.finish(run.id, name, run.attempt, "succeeded")
            counts[slot] += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(json.dumps({"owner": owner, "finished": sum(counts)}), flush=True)
    store.close()
    return 0


def populate(url: str, runs: int, repos: int) -> None:
    store = Store(url)
    store.upgrade()
    names = [f"repo{i:03d}" for i in range(repos)]
    for name in names:
        store.ensure_repo(name)
    for i in range(runs):
        store.enqueue(names[i % repos])
        if (i + 1) % 1000 == 0:
            print(f"  queued {i + 1}/{runs}", flush=True)
    store.close()


def count_claims(url: str) -> tuple[int, int, dict[str, int]]:
    """(runs claimed more than once, succeeded runs, claims per replica) from the database."""
    store = Store(url)
    per_run: Counter[int] = Counter()
    per_replica: Counter[str] = Counter()
    after = 0
    while batch := store.events_since(after, limit=5000):
        for event in batch:
            if event.kind == "claimed":
                per_run[event.run_id] += 1
                per_replica[str(event.data.get("owner", "")).split("/")[0]] += 1
        after = batch[-1].id
    succeeded = store.stats().runs_by_state.get("succeeded", 0)
    store.close()
    return sum(n - 1 for n in per_run.values() if n > 1), succeeded, dict(per_replica)


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    print(f"queueing {args.runs} runs over {args.repos} repos", flush=True)
    populate(url, args.runs, args.repos)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.claim",
                "--replica",
                f"r{i}",
                "--database-url",
                url,
                "--threads",
                str(args.threads),
                "--cap",
                str(args.cap),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(args.replicas)
    ]
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.readline()
    with InvariantMonitor(url, args.cap, interval_s=0.02) as monitor:
        started = time.monotonic()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=900)[0] for proc in procs]
        elapsed = time.monotonic() - started
    double_claims, succeeded, per_replica = count_claims(url)
    print(f"  replicas: {[o.strip() for o in outputs]}", flush=True)
    return {
        "runs": args.runs,
        "repos": args.repos,
        "replicas": args.replicas,
        "threads_per_replica": args.threads,
        "cap": args.cap,
        "elapsed_s": round(elapsed, 3),
        "claims_per_s": round(args.runs / elapsed, 1),
        "double_claims": double_claims,
        "succeeded": succeeded,
        "claims_by_replica": per_replica,
        "violations": len(monitor.seen.violations),
        "max_busy_seen": monitor.seen.max_busy,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks claim")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument(
        "--database-url",
        default=DEFAULT_POSTGRES_URL,
        help="PostgreSQL server to create a throwaway database on",
    )
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--repos", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="claimers per replica")
    parser.add_argument("--cap", type=int, default=10, help="global max_concurrency")
    parser.add_argument("--replica", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replica:
        return replica(args.database_url, args.replica, args.threads, args.cap)
    if not args.database_url.startswith(("postgresql", "postgres")):
        print("benchmarks claim: --database-url must be a PostgreSQL URL", file=sys.stderr)
        return 2
    with temp_database("postgresql", args.database_url) as url:
        result = measure(url, args)
    print(json.dumps(result))
    return 0 if result["double_claims"] == 0 and result["succeeded"] == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
