"""Intake cost and pickup latency: 100 repos on a fake GitHub, polled and hooked.

``python -m benchmarks intake --json`` serves a stateful fake GitHub on
127.0.0.1 with ``--repos`` repos (one unlabelled issue each), then:

1. one first poll of every repo (paid: nothing is cached yet);
2. ``--cycles`` poll cycles with nothing changed: every list is a conditional
   request answered 304, so ``rate_limit_points_unchanged`` (read from the
   fake's own counter) should be 0;
3. poll pickup: the daemon's ``Periodic`` polls every ``--poll-interval-s``;
   right after a cycle ends (the worst phase) an issue in a middle repo is
   labelled; ``pickup_poll_s`` is the time until its run is in the store;
4. webhook pickup: the daemon's HTTP app (``pipeline.http.app.create_app`` under
   uvicorn) receives a signed ``issues.labeled`` delivery; ``pickup_webhook_s``
   is the time from sending it until the run is in the store.

Real tracker client, real HTTP, real store (SQLite by default,
``--database-url`` for PostgreSQL). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._databases import temp_sqlite
from pipeline.http.app import AppOptions, create_app, serve
from pipeline.queue.periodic import Periodic
from pipeline.testing.forges import FakeGitHub, send_webhook
from pipeline.testing.intake_world import IntakeWorld

READY = "ready-for-agent"
SECRET_ENV = "AFK_BENCH_WEBHOOK_SECRET"
TRACKER = "github"


def slugs(count: int) -> list[str]:
    return [f"bench/repo-{n:03d}" for n in range(count)]


def seed(fake: FakeGitHub, repos: list[str]) -> None:
    for slug in repos:
        fake.add_issue(slug, "an issue nobody labelled")
        fake.set_permission(slug, "alice", "write")


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.002) -> float:
    """Seconds until ``predicate`` holds (checked every ``step_s``); raises on timeout."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not reached in {timeout_s}s")
        time.sleep(step_s)
    return time.monotonic() - started


def unchanged_cycles(world: IntakeWorld, fake: FakeGitHub, cycles: int) -> dict[str, Any]:
    requests, points = len(fake.requests), fake.rate_used
    durations, enqueued = [], 0
    for cycle in range(cycles):
        started = time.monotonic()
        report = world.intake.poll(TRACKER)
        durations.append(time.monotonic() - started)
        enqueued += report.enqueued
        print(
            f"cycle {cycle + 1}/{cycles}: {report.unchanged} lists unchanged, {durations[-1]:.3f}s",
            flush=True,
        )
    statuses = [r.status for r in fake.requests[requests:]]
    return {
        "requests": len(statuses),
        "requests_304": statuses.count(304),
        "rate_limit_points_unchanged": fake.rate_used - points,
        "enqueued_unchanged": enqueued,
        "unchanged_cycle_s": round(statistics.median(durations), 4),
    }


def poll_pickup(world: IntakeWorld, fake: FakeGitHub, slug: str, interval_s: float) -> float:
    """Label right after a scheduled cycle ends; seconds until the run is stored."""
    ended = threading.Event()

    def cycle() -> None:
        world.intake.poll(TRACKER)
        ended.set()

    periodic = Periodic(name="bench-poll")
    periodic.add(f"poll:{TRACKER}", cycle, interval_s)
    periodic.start()
    try:
        if not ended.wait(interval_s * 3 + 30):
            raise TimeoutError("the periodic poll never ran")
        fake.apply_label(slug, 1, READY, "alice")
        before = len(world.runs())
        return wait_until(lambda: len(world.runs()) > before, interval_s * 3 + 30)
    finally:
        periodic.shutdown(wait=True)


def webhook_pickup(world: IntakeWorld, fake: FakeGitHub, slug: str) -> tuple[float, float]:
    """``(answer_s, pickup_s)`` for one signed delivery through the daemon's HTTP app."""
    app = create_app(
        world.store, world.settings, AppOptions(webhook_handler=world.intake.handle_webhook)
    )
    server = serve(app, "127.0.0.1", 0)
    try:
        fake.apply_label(slug, 1, READY, "alice")
        payload = fake.labeled_webhook(slug, 1, READY, "alice")
        before = len(world.runs())
        started = time.monotonic()
        response = send_webhook(
            f"{server.url}/webhooks/{TRACKER}", "issues", payload, os.environ[SECRET_ENV]
        )
        answer_s = time.monotonic() - started
        if response.status_code != 202:
            raise RuntimeError(f"webhook answered {response.status_code}: {response.text}")
        wait_until(lambda: len(world.runs()) > before, 10)
        return answer_s, time.monotonic() - started
    finally:
        server.stop()


@contextlib.contextmanager
def database(url: str | None) -> Iterator[str]:
    if url:
        from benchmarks._databases import temp_postgres

        with temp_postgres(url) as fresh:
            yield fresh
    else:
        with temp_sqlite() as fresh:
            yield fresh


def run(args: argparse.Namespace) -> dict[str, Any]:
    repos = slugs(args.repos)
    os.environ[SECRET_ENV] = secrets.token_hex(16)
    with (
        FakeGitHub(token=secrets.token_hex(8)) as fake,
        database(args.database_url) as url,
        tempfile.TemporaryDirectory(prefix="afk-bench-intake-") as tmp,
    ):
        seed(fake, repos)
        print(f"fake GitHub at {fake.url} with {len(repos)} repos", flush=True)
        world = IntakeWorld.build(
            url,
            Path(tmp) / "volume",
            {TRACKER: fake},
            [(TRACKER, s) for s in repos],
            webhook_secret_env=SECRET_ENV,
            poll_interval_s=args.poll_interval_s,
            wall_clock=True,
        )
        try:
            first = world.intake.poll(TRACKER)
            print(
                f"first poll: {len(fake.requests)} requests, {fake.rate_used} rate-limit "
                f"points, {first.enqueued} queued",
                flush=True,
            )
            result: dict[str, Any] = {
                "first_poll_requests": len(fake.requests),
                "first_poll_rate_points": fake.rate_used,
            }
            result.update(unchanged_cycles(world, fake, args.cycles))
            pickup_poll_s = poll_pickup(world, fake, repos[len(repos) // 2], args.poll_interval_s)
            print(
                f"poll pickup: {pickup_poll_s:.3f}s at a {args.poll_interval_s}s interval",
                flush=True,
            )
            answer_s, pickup_webhook_s = webhook_pickup(world, fake, repos[-1])
            print(
                f"webhook pickup: {pickup_webhook_s:.3f}s (answered in {answer_s:.3f}s)", flush=True
            )
            runs = len(world.runs())
        finally:
            world.close()
    return {
        **result,
        "pickup_poll_s": round(pickup_poll_s, 3),
        "poll_interval_s": args.poll_interval_s,
        "pickup_poll_phase": "labelled right after a poll cycle ended (the worst phase)",
        "pickup_webhook_s": round(pickup_webhook_s, 4),
        "webhook_answer_s": round(answer_s, 4),
        "webhook_server": "the daemon's app (pipeline.http.app.create_app) under uvicorn",
        "runs_queued": runs,
        "database": "postgresql" if args.database_url else "sqlite",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks intake")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--repos", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--poll-interval-s", type=float, default=2.0)
    parser.add_argument("--database-url", help="a PostgreSQL server URL (default: SQLite)")
    args = parser.parse_args(argv)
    summary = {
        "benchmark": "intake",
        "repos": args.repos,
        "cycles": args.cycles,
        **run(args),
        "targets": {"rate_limit_points_unchanged": 0, "pickup_webhook_s": 1},
    }
    ok = summary["rate_limit_points_unchanged"] == 0 and summary["pickup_webhook_s"] < 1
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key}: {value}")
    return 0 if ok else 1
