"""Pickup latency: a signed webhook to a real ``pipeline run`` daemon, until its run is claimed.

``python -m benchmarks pickup --json [--samples 50] [--postgres-url URL]``

Per engine (SQLite, PostgreSQL): a fake GitHub on loopback with ``--repos``
repos, a ``pipeline run`` subprocess (polling hourly, so only the webhook can
queue a run; ``claim_interval_s`` 1 s, so a pickup faster than the tick shows
the wake). Each sample waits a random phase of 0-1 s, labels an issue and
sends GitHub's signed ``issues.labeled`` delivery; the latency is the run's
``started_at`` (the claim, on the database clock of this same host) minus the
moment the delivery was sent, through an HTTP client built once per engine
(as a forge keeps its own; building one takes tens of milliseconds). Samples
rotate over the repos and wait for a repo's previous run to end first (not
timed), so no sample waits on another.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks import _daemon
from benchmarks._databases import DEFAULT_POSTGRES_URL, temp_database
from benchmarks._paired import machine, percentile, spread
from pipeline.store import RunFilter, Store
from pipeline.testing.forges import FakeGitHub
from pipeline.testing.forges.base import webhook_headers


def _times(store: Store, repo: str) -> tuple[datetime, datetime]:
    """(queued, claimed) of the repo's last run, on the database clock."""
    [run] = store.list_runs(RunFilter(repo=repo, limit=1))
    assert run.started_at is not None
    return run.created_at, run.started_at


def _ended(store: Store, repo: str) -> bool:
    runs = store.list_runs(RunFilter(repo=repo, limit=1))
    return not runs or runs[0].terminal


def one_sample(
    fake: FakeGitHub, store: Store, setup: _daemon.DaemonSetup, n: int, client: httpx.Client
) -> tuple[float, float]:
    """Seconds from sending the webhook to (the run queued, the run claimed).

    The delivery goes through ``client``, built once: building an HTTP client
    costs tens of milliseconds (its TLS context), which is the sender's, not
    the daemon's, and a forge keeps its own.
    """
    repo = f"r{n % len(setup.slugs)}"
    slug = setup.slugs[n % len(setup.slugs)]
    log = setup.tmp / "daemon.log"
    _daemon.until(lambda: _ended(store, repo), 120, f"the previous run of {repo}", log)
    time.sleep(random.uniform(0.0, setup.claim_interval_s))  # a random phase of the tick
    number = fake.add_issue(slug, f"sample {n}")
    fake.apply_label(slug, number, _daemon.READY, "alice")
    payload = fake.labeled_webhook(slug, number, _daemon.READY, "alice")
    before = {r.id for r in store.list_runs(RunFilter(repo=repo, limit=5))}
    url = f"http://127.0.0.1:{setup.port}/webhooks/gh"
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    headers.update(webhook_headers("github", "issues", str(uuid.uuid4()), _daemon.SECRET, body))
    sent = datetime.now(UTC).replace(tzinfo=None)
    response = client.post(url, content=body, headers=headers)
    if response.status_code != 202:
        raise RuntimeError(f"webhook answered {response.status_code}: {response.text}")

    def claimed() -> bool:
        runs = store.list_runs(RunFilter(repo=repo, limit=1))
        return bool(runs) and runs[0].id not in before and runs[0].started_at is not None

    _daemon.until(claimed, 60, f"the claim of {slug}#{number}", log)
    queued, claimed_at = _times(store, repo)
    return (queued - sent).total_seconds(), (claimed_at - sent).total_seconds()


def run_engine(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="afk-bench-pickup-") as tmp:
        fake = FakeGitHub(token=_daemon.TOKEN)
        slugs = [f"bench/p{n}" for n in range(args.repos)]
        for slug in slugs:
            fake.add_repo(slug)
            fake.set_permission(slug, "alice", "write")
        with fake:
            setup = _daemon.DaemonSetup(
                Path(tmp), url, _daemon.free_port(), slugs, Path(tmp) / "pipeline.toml"
            )
            setup.write(fake)
            log = setup.tmp / "daemon.log"
            proc = _daemon.start(setup, log)
            store = Store(url)
            try:
                _daemon.until(lambda: "/issues" in "".join(fake.paths("GET")), 60, "start", log)
                time.sleep(1.0)  # the start-up poll of every repo is over
                with httpx.Client(timeout=5.0) as client:
                    samples = [
                        one_sample(fake, store, setup, n, client) for n in range(args.samples)
                    ]
            finally:
                store.close()
                _daemon.stop(proc)
    millis = [claimed * 1000 for _, claimed in samples]
    lag = [(claimed - queued) * 1000 for queued, claimed in samples]
    return {
        "samples": len(millis),
        "p50_ms": round(percentile(millis, 50), 1),
        "p95_ms": round(percentile(millis, 95), 1),
        "ms": spread(millis, 1),
        "queued_p50_ms": round(percentile([q * 1000 for q, _ in samples], 50), 1),
        "queued_to_claimed_p50_ms": round(percentile(lag, 50), 1),
        "queued_to_claimed_p95_ms": round(percentile(lag, 95), 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks pickup")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--repos", type=int, default=10)
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--engines", default="sqlite,postgresql")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"benchmark": "pickup"}
    for engine in args.engines.split(","):
        with temp_database(engine, args.postgres_url) as url:
            result[engine] = run_engine(url, args)
        print(f"  {engine}: {result[engine]}", flush=True)
    engines = [result[e] for e in args.engines.split(",")]
    result["p50_ms"] = max(e["p50_ms"] for e in engines)
    result["p95_ms"] = max(e["p95_ms"] for e in engines)
    result["machine"] = machine()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
