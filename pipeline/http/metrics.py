"""Prometheus metrics: the store read at scrape time, plus counters the daemon bumps.

Each app has its own ``CollectorRegistry`` (so tests and several apps in one
process never share series). Gauges and totals that live in the database are
read by ``StoreCollector`` on every scrape; events that leave no row behind
(a failed poll, a rejected webhook) are counted in process by ``Metrics``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pipeline.core.states import ALL_STATES
from pipeline.store.outbox import NotificationCounts
from pipeline.store.records import Repo, Stats

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RUN_STATES = ALL_STATES
# Seconds of execution: a run takes minutes to an hour or two.
DURATION_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0)


class MetricsSource(Protocol):
    """The store verbs the collector reads (``pipeline.store.Store`` has them)."""

    def stats(self) -> Stats: ...

    def list_repos(self) -> list[Repo]: ...

    def duration_histogram(self, bounds: Sequence[float]) -> tuple[list[int], int, float]: ...

    def notification_counts(self) -> NotificationCounts: ...


class Metrics:
    """The app's registry and the in-process counters the daemon increments."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._poll_errors = Counter(
            "pipeline_poll_errors",
            "Tracker polls that failed, by tracker.",
            ["tracker"],
            registry=self.registry,
        )
        self._webhooks_rejected = Counter(
            "pipeline_webhooks_rejected",
            "Webhook deliveries refused (bad signature, untrusted actor, malformed...).",
            ["tracker", "reason"],
            registry=self.registry,
        )

    def poll_error(self, tracker: str) -> None:
        """Count one failed poll of ``tracker``."""
        self._poll_errors.labels(tracker=tracker).inc()

    def webhook_rejected(self, tracker: str, reason: str) -> None:
        """Count one refused webhook delivery for ``tracker`` with a short ``reason``."""
        self._webhooks_rejected.labels(tracker=tracker, reason=reason).inc()

    def know_trackers(self, names: Iterable[str]) -> None:
        """Show a zero poll-error count for each tracker before its first error."""
        for name in names:
            self._poll_errors.labels(tracker=name)

    def watch_store(self, source: MetricsSource, capacity: int) -> None:
        """Report the store's runs, queues, durations and agent spend on every scrape."""
        self.registry.register(StoreCollector(source, capacity))

    def render(self) -> bytes:
        """The text exposition format of every metric in the registry."""
        return generate_latest(self.registry)


class StoreCollector(Collector):
    """Reads the store when Prometheus scrapes; one bounded set of queries each time."""

    def __init__(self, source: MetricsSource, capacity: int) -> None:
        self.source = source
        self.capacity = capacity

    def describe(self) -> Iterable[Metric]:
        # Names only, so registering does not query the database.
        return [*self._families(None, [], None), *_notification_families(None)]

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self.source.stats()
            repos = self.source.list_repos()
            histogram = self.source.duration_histogram(DURATION_BUCKETS)
            notes = self.source.notification_counts()
        except Exception as exc:  # any database failure: say so, do not fail the scrape
            log.warning("metrics: cannot read the store: %s", exc)
            up = GaugeMetricFamily("pipeline_database_up", "1 when the database answered.")
            up.add_metric([], 0.0)
            return [up]
        return [*self._families(stats, repos, histogram), *_notification_families(notes)]

    def _families(
        self, stats: Stats | None, repos: list[Repo], histogram: tuple[list[int], int, float] | None
    ) -> Iterator[Metric]:
        up = GaugeMetricFamily("pipeline_database_up", "1 when the database answered.")
        capacity = GaugeMetricFamily("pipeline_capacity", "max_concurrency: runs allowed at once.")
        if stats is not None:
            up.add_metric([], 1.0)
            capacity.add_metric([], float(self.capacity))
        yield up
        yield capacity
        yield from _run_families(stats, repos)
        yield _duration_family(histogram)
        yield from _spend_families(stats)


def _run_families(stats: Stats | None, repos: list[Repo]) -> Iterator[Metric]:
    runs = GaugeMetricFamily("pipeline_runs", "Runs in the history by state.", labels=["state"])
    kinds = GaugeMetricFamily("pipeline_runs_by_kind", "Runs by kind.", labels=["kind"])
    active = GaugeMetricFamily("pipeline_active_runs", "Runs past queued and not ended.")
    depth = GaugeMetricFamily(
        "pipeline_queue_depth", "Runs waiting (queued or retry_wait) per repo.", labels=["repo"]
    )
    frozen = GaugeMetricFamily(
        "pipeline_repo_frozen", "1 when the repo is frozen.", labels=["repo"]
    )
    if stats is not None:
        for state in sorted(set(RUN_STATES) | set(stats.runs_by_state)):
            runs.add_metric([state], float(stats.runs_by_state.get(state, 0)))
        for kind, count in sorted(stats.runs_by_kind.items()):
            kinds.add_metric([kind], float(count))
        active.add_metric([], float(stats.active))
        for repo in repos:
            depth.add_metric([repo.name], float(stats.queued_by_repo.get(repo.name, 0)))
            frozen.add_metric([repo.name], 1.0 if repo.frozen else 0.0)
    yield from (runs, kinds, active, depth, frozen)


def _duration_family(histogram: tuple[list[int], int, float] | None) -> Metric:
    family = HistogramMetricFamily(
        "pipeline_run_duration_seconds", "Execution time of finished runs (queue wait excluded)."
    )
    if histogram is not None:
        cumulative, count, total = histogram
        buckets = [(_bound(b), float(c)) for b, c in zip(DURATION_BUCKETS, cumulative, strict=True)]
        buckets.append(("+Inf", float(count)))
        family.add_metric([], buckets, total)
    return family


def _spend_families(stats: Stats | None) -> Iterator[Metric]:
    cost = CounterMetricFamily("pipeline_agent_cost_usd", "Agent cost of every run, in USD.")
    tokens = CounterMetricFamily(
        "pipeline_agent_tokens", "Agent tokens of every run.", labels=["direction"]
    )
    if stats is not None:
        cost.add_metric([], stats.cost_usd)
        tokens.add_metric(["in"], float(stats.tokens_in))
        tokens.add_metric(["out"], float(stats.tokens_out))
    yield cost
    yield tokens


def _notification_families(counts: NotificationCounts | None) -> Iterator[Metric]:
    failed = CounterMetricFamily(
        "pipeline_notifications_failed",
        "Notification delivery attempts that failed (each is retried with backoff).",
    )
    undelivered = GaugeMetricFamily(
        "pipeline_notifications_undelivered",
        "Notifications not delivered yet (pending) or given up (abandoned).",
    )
    if counts is not None:
        failed.add_metric([], float(counts.failed_attempts))
        undelivered.add_metric([], float(counts.undelivered))
    yield failed
    yield undelivered


def _bound(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)
