"""Claim + finish throughput against procrastinate, paired, on the same PostgreSQL server.

``python -m benchmarks claim --json [--database-url postgresql://USER@HOST/DB]``

Each repetition runs, in turn (A B A B ...), on a fresh throwaway database of
that server each time:

- ``afk``: ``--replicas`` processes x ``--threads`` claimer threads, global cap
  replicas x threads; each thread claims a run (``Store.claim_next``), finishes
  it and claims the next, woken by the queue wake when nothing is claimable;
- ``procrastinate``: as many worker processes with ``concurrency=--threads``,
  each job carrying its repo as procrastinate's ``lock`` (one job per repo at a
  time, like afk-pipeline's serial-per-repo rule), default worker settings;
- ``afk_1``: afk-pipeline with one replica, for ``scale_3_vs_1``;
- ``procrastinate_1``: procrastinate with one worker process, for
  ``peer_scale_3_vs_1``: the same ratio for the peer on the same machine.

Each round also reads ``/proc/stat`` at "go" and at the last success:
``cpu_busy_pct_1_replica`` is how busy the machine's CPUs already were (all of
them, PostgreSQL included) while one afk-pipeline replica claimed. A machine
that one replica already keeps busy cannot give three replicas more throughput.

Same jobs: ``--jobs`` zero-length jobs over ``--repos`` repos. The clock runs
from "go" until the database says every job succeeded. Every worker records
each job it actually ran in a file of its own; ``double_claims`` is counted
from those files (a job run more than once), independently of the claim path.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import _peer
from benchmarks._databases import DEFAULT_POSTGRES_URL, temp_postgres
from benchmarks._paired import machine, spread
from pipeline.store import Store
from pipeline.store.wake import QueueWake

LEASE_S = 60.0
TIMEOUT_S = 900.0


def replica(url: str, owner: str, threads: int, cap: int, record: Path) -> int:
    """One afk-pipeline replica: wait for "go", claim and finish until the queue is empty."""
    store = Store(url)
    store.ping()
    wake = threading.Event()
    listener = QueueWake(store.engine, store.url, wake.set)
    listener.start()
    listener.wait_listening(30)
    print("ready", flush=True)
    sys.stdin.readline()
    ran: list[int] = []

    def loop(slot: int) -> None:
        name = f"{owner}/{slot}"
        while True:
            run = store.claim_next(name, max_concurrency=cap, lease_s=LEASE_S)
            if run is None:
                if store.queue_depth() == 0:
                    return
                wake.wait(0.05)
                wake.clear()
                continue
            ran.append(run.id)
            store.finish(run.id, name, run.attempt, "succeeded")

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    record.write_text("".join(f"{i}\n" for i in ran))
    listener.stop()
    store.close()
    return 0


def populate_afk(url: str, jobs: int, repos: int) -> None:
    store = Store(url)
    store.upgrade()
    names = [f"repo{i:03d}" for i in range(repos)]
    for name in names:
        store.ensure_repo(name)
    for i in range(jobs):
        store.enqueue(names[i % repos])
    store.close()


def afk_succeeded(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM runs WHERE state = 'succeeded'").fetchone()
    return int(row[0]) if row else 0


def _spawn(system: str, dsn: str, record: Path, threads: int, cap: int) -> subprocess.Popen[str]:
    role = ["--peer"] if system == "procrastinate" else ["--replica", record.stem]
    command = [sys.executable, "-m", "benchmarks.claim", *role, "--database-url", dsn]
    command += ["--threads", str(threads), "--cap", str(cap), "--record", str(record)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def cpu_times() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far, from ``/proc/stat``."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _until_done(count: Any, dsn: str, jobs: int) -> float:
    started = time.monotonic()
    while count(dsn) < jobs:
        if time.monotonic() - started > TIMEOUT_S:
            raise RuntimeError(f"not all {jobs} jobs succeeded within {TIMEOUT_S} s")
        time.sleep(0.005)
    return time.monotonic() - started


def one_round(system: str, server: str, args: argparse.Namespace, replicas: int) -> dict[str, Any]:
    """Fresh database, queue the jobs, start the workers, time them to the last success."""
    with temp_postgres(server) as dsn, tempfile.TemporaryDirectory() as tmp:
        if system == "procrastinate":
            _peer.populate(dsn, args.jobs, args.repos)
        else:
            populate_afk(dsn, args.jobs, args.repos)
        cap = args.replicas * args.threads
        records = [Path(tmp) / f"w{i}" for i in range(replicas)]
        procs = [_spawn(system, dsn, r, args.threads, cap) for r in records]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        count = _peer.succeeded if system == "procrastinate" else afk_succeeded
        busy, total = cpu_times()
        elapsed = _until_done(count, dsn, args.jobs)
        busy_after, total_after = cpu_times()
        _stop(procs, system)
        ran = Counter(int(line) for r in records if r.exists() for line in r.read_text().split())
    return {
        "jobs_per_s": round(args.jobs / elapsed, 1),
        "elapsed_s": round(elapsed, 3),
        "cpu_busy_pct": round(100 * (busy_after - busy) / max(1, total_after - total), 1),
        "double_claims": sum(n - 1 for n in ran.values() if n > 1),
        "ran": sum(ran.values()),
    }


def _stop(procs: list[subprocess.Popen[str]], system: str) -> None:
    for proc in procs:
        if system == "procrastinate":
            proc.terminate()  # a graceful stop: the worker finishes its jobs in flight
        proc.communicate(timeout=120)


def measure(server: str, args: argparse.Namespace) -> dict[str, Any]:
    names = ("afk", "procrastinate", "afk_1", "procrastinate_1")
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for rep in range(args.repetitions):
        order = list(names) if rep % 2 == 0 else [names[1], names[0], names[3], names[2]]
        for name in order:
            system = name.removesuffix("_1")
            replicas = 1 if name.endswith("_1") else args.replicas
            result = one_round(system, server, args, replicas)
            print(f"  repetition {rep + 1} {name}: {result}", flush=True)
            rounds[name].append(result)
    return summarise(rounds, args)


def summarise(rounds: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    def rates(name: str) -> list[float]:
        return [r["jobs_per_s"] for r in rounds[name]]

    ratios = [a / p for a, p in zip(rates("afk"), rates("procrastinate"), strict=True)]

    def double_claims(system: str) -> int:
        names = (system, f"{system}_1")
        return sum(r["double_claims"] for name in names for r in rounds[name])

    def scale(name: str) -> float:
        pairs = zip(rates(name), rates(f"{name}_1"), strict=True)
        return round(spread([a / b for a, b in pairs])["median"], 3)

    return {
        "benchmark": "claim",
        "jobs": args.jobs,
        "repos": args.repos,
        "replicas": args.replicas,
        "threads_per_replica": args.threads,
        "repetitions": args.repetitions,
        "afk_jobs_per_s": spread(rates("afk"), 1),
        "procrastinate_jobs_per_s": spread(rates("procrastinate"), 1),
        "afk_1_replica_jobs_per_s": spread(rates("afk_1"), 1),
        "procrastinate_1_worker_jobs_per_s": spread(rates("procrastinate_1"), 1),
        "ratio_vs_procrastinate": round(spread(ratios)["median"], 3),
        "ratio_vs_procrastinate_spread": spread(ratios, 3),
        "scale_3_vs_1": scale("afk"),
        "peer_scale_3_vs_1": scale("procrastinate"),
        "cpu_busy_pct_1_replica": spread([r["cpu_busy_pct"] for r in rounds["afk_1"]], 1)["median"],
        "double_claims": double_claims("afk"),
        "double_claims_procrastinate": double_claims("procrastinate"),
        "all_ran": all(r["ran"] >= args.jobs for rs in rounds.values() for r in rs),
        "machine": machine(),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks claim")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--database-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repos", type=int, default=200)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="slots per replica")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--cap", type=int, default=12, help=argparse.SUPPRESS)
    parser.add_argument("--replica", help=argparse.SUPPRESS)
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replica:
        return replica(args.database_url, args.replica, args.threads, args.cap, args.record)
    if args.peer:
        return _peer.worker(args.database_url, args.threads, args.record)
    if not args.database_url.startswith(("postgresql", "postgres")):
        print("benchmarks claim: --database-url must be a PostgreSQL URL", file=sys.stderr)
        return 2
    result = measure(args.database_url, args)
    print(json.dumps(result))
    return 0 if result["double_claims"] == 0 and result["all_ran"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
