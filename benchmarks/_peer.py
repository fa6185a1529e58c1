"""The claim benchmark's peer: procrastinate workers on the same PostgreSQL server.

Each job carries its repo as procrastinate's ``lock``, so procrastinate too runs
at most one job per repo at a time. A worker process records the id of every
job it actually ran in its own file: double runs are counted from those files,
not from either system's bookkeeping.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def make_app(dsn: str, record: Path | None = None) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="job")
    def job(i: int) -> None:
        if record is not None:
            with record.open("a") as fh:
                fh.write(f"{i}\n")

    return app


def populate(dsn: str, jobs: int, repos: int) -> None:
    app = make_app(dsn)
    with app.open():
        app.schema_manager.apply_schema()
        task = app.tasks["job"]
        for i in range(jobs):
            task.configure(lock=f"repo{i % repos}").defer(i=i)


def succeeded(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        ).fetchone()
    return int(row[0]) if row else 0


def worker(dsn: str, threads: int, record: Path) -> int:
    """A worker process: wait for "go" on stdin, then run jobs until SIGTERM."""
    app = make_app(dsn, record)
    with app.open():
        print("ready", flush=True)
        sys.stdin.readline()
        app.run_worker(concurrency=threads, wait=True)
    return 0
