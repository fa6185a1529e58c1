"""An idle daemon: what 100 enrolled repos with nothing to do cost per minute.

``python -m benchmarks idle --json [--repos 100] [--duration-s 60]``

A ``pipeline run`` subprocess on SQLite with ``--repos`` repos on a fake GitHub
(no ready issue anywhere), polling every ``--poll-interval-s``. Once its
start-up poll is over, for ``--duration-s``: database writes (commits by any
other connection, seen as changes of ``PRAGMA data_version`` read every 20 ms
from a connection of our own, and growth of the WAL file), the daemon's CPU
(user + system time over wall time) and its resident memory at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _daemon
from benchmarks._paired import machine
from pipeline.testing.forges import FakeGitHub


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def watch_writes(db: Path, duration_s: float) -> tuple[int, int]:
    """(commits seen, WAL bytes grown) over ``duration_s``."""
    conn = sqlite3.connect(db)
    wal = Path(str(db) + "-wal")
    wal_before = wal.stat().st_size if wal.exists() else 0
    last = conn.execute("PRAGMA data_version").fetchone()[0]
    commits = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        time.sleep(0.02)
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        commits += version != last
        last = version
    conn.close()
    wal_after = wal.stat().st_size if wal.exists() else 0
    return commits, wal_after - wal_before


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="afk-bench-idle-") as tmp:
        fake = FakeGitHub(token=_daemon.TOKEN)
        slugs = [f"idle/r{n:03d}" for n in range(args.repos)]
        for slug in slugs:
            fake.add_repo(slug)
        db = Path(tmp) / "history.db"
        with fake:
            setup = _daemon.DaemonSetup(
                Path(tmp),
                f"sqlite:///{db}",
                _daemon.free_port(),
                slugs,
                Path(tmp) / "pipeline.toml",
                poll_interval_s=args.poll_interval_s,
                with_remotes=False,
            )
            setup.write(fake)
            log = setup.tmp / "daemon.log"
            proc = _daemon.start(setup, log)
            try:
                last = f"/repos/{slugs[-1]}/issues"
                _daemon.until(lambda: last in fake.paths("GET"), 120, "the start-up poll", log)
                time.sleep(args.settle_s)
                polls_before = len(fake.paths("GET"))
                cpu_before, started = cpu_s(proc.pid), time.monotonic()
                commits, wal_growth = watch_writes(db, args.duration_s)
                elapsed = time.monotonic() - started
                cpu = cpu_s(proc.pid) - cpu_before
                rss = rss_mb(proc.pid)
                requests = len(fake.paths("GET")) - polls_before
            finally:
                _daemon.stop(proc)
    minutes = elapsed / 60
    return {
        "benchmark": "idle",
        "engine": "sqlite",
        "repos": args.repos,
        "duration_s": round(elapsed, 1),
        "poll_interval_s": args.poll_interval_s,
        "forge_requests": requests,
        "writes_per_min": round(commits / minutes, 2),
        "wal_bytes_grown": wal_growth,
        "rss_mb": round(rss, 1),
        "cpu_pct": round(100 * cpu / elapsed, 2),
        "machine": machine(),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks idle")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--repos", type=int, default=100)
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--poll-interval-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    result = measure(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
