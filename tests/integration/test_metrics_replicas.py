"""/metrics from several replicas of one database: database-wide series exported once,
escalations and abandoned notifications counted, and the text clean under promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.http.app import create_app, serve
from pipeline.store import Attempt, Channel, NotificationDraft, Store
from tests.integration.api_harness import make_settings

REQUIRE_TOOLS = os.environ.get("PIPELINE_TEST_REQUIRE_TOOLS") == "1"
Samples = list[tuple[str, dict[str, str], float]]


class Replica:
    """One daemon's HTTP app over its own store (its own connections) on the shared database."""

    def __init__(self, database_url: str, tmp_path: Path) -> None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.store = Store(database_url)
        self.handle = serve(create_app(self.store, make_settings(database_url, tmp_path)))

    def scrape(self) -> str:
        answer = httpx.get(self.handle.url + "/metrics", timeout=10)
        assert answer.status_code == 200
        return answer.text

    def stop(self) -> None:
        self.handle.stop()
        self.store.close()


@pytest.fixture
def shared(database_url: str) -> Iterator[Store]:
    """The shared database, migrated, with repos alpha and beta."""
    store = Store(database_url)
    store.upgrade()
    store.ensure_repo("alpha", tracker="gh", slug="org/alpha")
    store.ensure_repo("beta", tracker="gh", slug="org/beta")
    yield store
    store.close()


def samples(text: str) -> Samples:
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def total(scrapes: list[str], name: str, **labels: str) -> float:
    """What ``sum(name{labels})`` over these scrapes gives in Prometheus."""
    return sum(
        value
        for text in scrapes
        for got, got_labels, value in samples(text)
        if got == name and labels.items() <= got_labels.items()
    )


def test_two_replicas_export_the_queue_once(
    shared: Store, database_url: str, tmp_path: Path
) -> None:
    """sum() over two replicas of queue depth, runs and spend equals the database's figures;
    each replica shows its own capacity, exactly one leads, and the lead moves on a stop."""
    for repo in ("alpha", "beta", "beta", "beta"):
        shared.enqueue(repo)
    running = [Replica(database_url, tmp_path / name) for name in ("a", "b")]
    try:
        scrapes = [replica.scrape() for replica in running * 2][2:]  # the second round
        assert total(scrapes, "pipeline_queue_depth") == 4
        assert total(scrapes, "pipeline_queue_depth", repo="beta") == 3
        assert total(scrapes, "pipeline_runs", state="queued") == 4
        assert total(scrapes, "pipeline_metrics_leader") == 1
        assert total(scrapes, "pipeline_capacity") == 20  # 10 each: a per-replica figure
        assert total(scrapes, "pipeline_database_up") == 2
        leader = 0 if total(scrapes[:1], "pipeline_metrics_leader") == 1 else 1
        running.pop(leader).stop()
        after = [running[0].scrape()]
        assert total(after, "pipeline_metrics_leader") == 1
        assert total(after, "pipeline_queue_depth") == 4
    finally:
        for replica in running:
            replica.stop()


def test_escalations_and_abandoned_notifications_are_counted(
    shared: Store, database_url: str, tmp_path: Path
) -> None:
    """pipeline_escalations_total counts per repo and reason; a notification given up
    counts in pipeline_notifications_abandoned_total."""
    run = shared.enqueue("alpha").run
    shared.add_escalation("alpha", "tests_failed", "red after 3 iterations", run.id)
    shared.add_escalation("alpha", "tests_failed", "red again", run.id)
    shared.add_escalation("beta", "frozen", "deploy broken")
    (row,) = shared.add_notification(
        NotificationDraft("escalation", "run escalated", "body", run.id), [Channel("json", "k")]
    )
    shared.record_attempt(Attempt(row, ok=False, error="refused", retry_in_s=None))
    replica = Replica(database_url, tmp_path)
    try:
        scrape = [replica.scrape()]
    finally:
        replica.stop()
    assert total(scrape, "pipeline_escalations_total", repo="alpha", reason="tests_failed") == 2
    assert total(scrape, "pipeline_escalations_total", repo="beta", reason="frozen") == 1
    assert total(scrape, "pipeline_notifications_abandoned_total") == 1
    assert total(scrape, "pipeline_notifications_undelivered") == 1
    assert total(scrape, "pipeline_notifications_failed_total") == 1


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool not installed (Debian package prometheus)"
        if REQUIRE_TOOLS:
            pytest.fail(message + "; PIPELINE_TEST_REQUIRE_TOOLS=1 makes this a failure")
        pytest.skip(message)
    return found


def test_metrics_pass_promtool_on_leader_and_follower(
    shared: Store, database_url: str, tmp_path: Path
) -> None:
    """`promtool check metrics` finds nothing wrong in a leader's or a follower's /metrics."""
    promtool = _promtool()
    run = shared.enqueue("alpha").run
    shared.add_escalation("alpha", "blocked", "the agent asked a question", run.id)
    with ExitStack() as stack:
        replicas = [Replica(database_url, tmp_path / name) for name in ("a", "b")]
        for replica in replicas:
            stack.callback(replica.stop)
        scrapes = [replica.scrape() for replica in replicas]
    for text in scrapes:
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked.stderr
